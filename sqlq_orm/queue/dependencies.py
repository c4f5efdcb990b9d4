"""Job dependencies: a job that waits for its parents (``depends_on``).

A child whose parents have not all SUCCEEDED is created WAITING, with an edge per
parent in the dependencies table and ``pending_parents`` counting the parents it still
needs. Every path that ends a job (succeed, a final fail, the sweeper, cancel) calls
:meth:`Dependencies._parents_ended` in its own transaction: each child is locked (in
id order), its parents are read again and its count recomputed from them (never
counted down: each edge settles once, however often a parent ends), and it is
queued with a DEPENDENCIES_MET event when nothing is left, or, when a parent it waits
for under ``cancel`` ended FAILED or CANCELLED, cancelled with ``DEPENDENCY:FAILED``
and a CANCELLED event naming the parent; its own children follow in the same
transaction. A manual retry recounts the children of the job it brings back.

The graph has no cycles: a parent must exist before its child is enqueued, and a job's
parents never change afterwards.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from sqlq_orm.core import validation
from sqlq_orm.db.statements.dependencies import POLICIES
from sqlq_orm.errors import InvalidInput
from sqlq_orm.ops.timeline import RelatedJob, TimelineQueries
from sqlq_orm.queue.app_columns import shown_values
from sqlq_orm.queue.core import SYSTEM_ACTOR, QueueCore, SessionArg, retry_if_rolled_back
from sqlq_orm.queue.types import EnqueuedJob, JobSpec
from sqlq_orm.schema.states import TERMINAL, Event, JobStatus

MAX_PARENTS = 1000
"""How many parents one job may name."""

_FAILED_ENDS = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})


def parent_ids(depends_on: object) -> tuple[int, ...]:
    """Check ``depends_on`` (job ids); return them, distinct, in the order given."""
    if depends_on is None:
        return ()
    if isinstance(depends_on, (str, bytes, int)) or not isinstance(depends_on, Iterable):
        raise InvalidInput(f"depends_on must be a list of job ids, got {depends_on!r}")
    ids: dict[int, None] = {}
    for position, value in enumerate(depends_on):
        ids[validation.job_id(value, f"depends_on[{position}]")] = None
    if len(ids) > MAX_PARENTS:
        raise InvalidInput(f"depends_on names {len(ids)} jobs; the limit is {MAX_PARENTS}")
    return tuple(ids)


def parent_failure_policy(value: object) -> str:
    """Check ``on_parent_failure``: ``"cancel"`` or ``"run"``."""
    if value not in POLICIES:
        raise InvalidInput(f"on_parent_failure must be one of {list(POLICIES)}, got {value!r}")
    return str(value)


CHUNK = 900
"""Job ids named per statement when working through a parent's children: under every
database's bind-parameter limit (SQLite's oldest default is 999, PostgreSQL's 65,535),
so a parent with any number of children can end."""


def chunked(ids: Sequence[int]) -> Iterator[list[int]]:
    """``ids`` in consecutive lists of at most :data:`CHUNK` (order kept)."""
    for start in range(0, len(ids), CHUNK):
        yield list(ids[start : start + CHUNK])


def settle(
    edges: Iterable[tuple[int, str, str]], prefer: Collection[int] = ()
) -> tuple[tuple[int, str] | None, int]:
    """What a child's parents, as they are now, mean for it.

    ``edges`` are ``(parent, policy, parent's status)``. Returns ``(failed, pending)``:
    a parent it waits for under ``cancel`` that ended FAILED or CANCELLED, as
    ``(id, status)`` (one in ``prefer`` first, then the lowest id), or None; and how
    many parents it still waits for (not SUCCEEDED under ``cancel``, not finished
    under ``run``). Pure: the same rule for an end, a retry and the checker.
    """
    failed: list[tuple[int, str]] = []
    pending = 0
    for parent, policy, status in edges:
        state = JobStatus(status)
        if policy == "run":
            pending += state not in TERMINAL
            continue
        pending += state is not JobStatus.SUCCEEDED
        if state in _FAILED_ENDS:
            failed.append((parent, state.value))
    failed.sort(key=lambda found: (found[0] not in prefer, found[0]))
    return (failed[0] if failed else None), pending


@dataclass(frozen=True)
class ParentPlan:
    """What a new child's parents mean for it, read under their locks."""

    parents: tuple[int, ...]
    policy: str
    pending: int
    """Parents not yet SUCCEEDED (``cancel``) or not yet finished (``run``)."""
    failed_parent: tuple[int, str] | None
    """(id, status) of a parent that already ended FAILED/CANCELLED, under ``cancel``."""


class Dependencies(QueueCore):
    """Parents and children: enqueue helpers, and what a parent's end does to children."""

    # ---------------------------------------------------------------- enqueue side

    def _dependency_request(
        self, depends_on: object, on_parent_failure: object
    ) -> tuple[tuple[int, ...], str] | None:
        """Validate ``depends_on``/``on_parent_failure``; None when there are no parents."""
        policy = parent_failure_policy(on_parent_failure)
        ids = parent_ids(depends_on)
        if not ids:
            return None
        if not self.sql.has_dependencies:
            raise InvalidInput(
                "depends_on needs a dependency model: bind JobDependencyMixin and pass it "
                "as Models(dependency=...)"
            )
        return ids, policy

    def _plan_parents(
        self, connection: Connection, requests: Sequence[tuple[tuple[int, ...], str] | None]
    ) -> list[ParentPlan | None]:
        """Lock every parent named in ``requests`` and plan each child; unknown ids raise
        :class:`~sqlq_orm.errors.InvalidInput` naming them (nothing written yet)."""
        wanted = sorted({i for request in requests if request for i in request[0]})
        if not wanted:
            return [None] * len(requests)
        # In chunks (ascending, so the locks are still taken in id order): an
        # enqueue_many may name any number of parents. Flag the parents that have no
        # child yet (an exclusive lock, once per parent), then share-lock them all (see
        # DependencyStatements: the lock that holds off a parent's end without stalling
        # the worker renewing its lease).
        found: set[int] = set()
        for chunk in chunked(wanted):
            params = {"p_ids": chunk}
            unflagged = connection.execute(self.sql.unflagged_parents, params).scalars().all()
            if unflagged:
                to_flag = {"p_ids": sorted(unflagged)}
                locked = (
                    connection.execute(self.sql.lock_unflagged_parents, to_flag).scalars().all()
                )
                if locked:
                    connection.execute(self.sql.flag_parents, {"p_ids": list(locked)})
            found.update(row.id for row in connection.execute(self.sql.lock_parents, params))
        missing = [i for i in wanted if i not in found]
        if missing:
            more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
            raise InvalidInput(f"depends_on names jobs that do not exist: {missing[:20]}{more}")
        statuses: dict[int, JobStatus] = {}
        for chunk in chunked(wanted):
            for row in connection.execute(self.sql.parent_states, {"p_ids": chunk}):
                statuses[row.id] = JobStatus(row.status)
        plans: list[ParentPlan | None] = []
        for request in requests:
            if request is None:
                plans.append(None)
                continue
            ids, policy = request
            failed = next(
                ((i, statuses[i].value) for i in ids if statuses[i] in _FAILED_ENDS), None
            )
            if policy == "run":
                pending = sum(1 for i in ids if statuses[i] not in TERMINAL)
                failed = None
            else:
                pending = sum(1 for i in ids if statuses[i] is not JobStatus.SUCCEEDED)
            plans.append(ParentPlan(ids, policy, pending, failed))
        return plans

    def _attach_parents(self, connection: Connection, job_id: int, plan: ParentPlan) -> None:
        """Write a new child's edges, then hold it WAITING or cancel it (after its
        ENQUEUED event, which the caller has written)."""
        connection.execute(
            self.sql.insert_dependency,
            [{"p_job_id": job_id, "p_parent_id": p, "p_policy": plan.policy} for p in plan.parents],
        )
        if plan.failed_parent is not None:
            parent, status = plan.failed_parent
            self._cancel_child(connection, job_id, JobStatus.QUEUED, parent, status)
        elif plan.pending:
            connection.execute(self.sql.hold_waiting, {"p_id": job_id, "p_pending": plan.pending})

    @retry_if_rolled_back
    def enqueue_chain(
        self, jobs: Sequence[JobSpec | Mapping[str, Any]], *, session: SessionArg = None
    ) -> list[EnqueuedJob]:
        """Enqueue ``jobs`` so that each waits for the one before; return their ids.

        One transaction. A spec's own ``depends_on`` is kept, and the previous job is
        added to it; each job's ``on_parent_failure`` applies to all its parents. A
        ``dedupe_key`` that matches an unfinished job links the chain to that job.
        """
        specs = self._specs(jobs, "enqueue_chain")
        ids: list[EnqueuedJob] = []
        queues: set[str] = set()
        with self._write(session) as connection:
            for spec in specs:
                extra = (ids[-1],) if ids else ()
                job_id, queue = self._enqueue_spec(connection, spec, extra)
                ids.append(job_id)
                queues.add(queue)
            self._announce_jobs(connection, queues)
        self._wake_workers(session, queues)
        return ids

    @retry_if_rolled_back
    def enqueue_fan_in(
        self,
        parents: Sequence[JobSpec | Mapping[str, Any]],
        then: JobSpec | Mapping[str, Any],
        *,
        session: SessionArg = None,
    ) -> list[EnqueuedJob]:
        """Enqueue ``parents`` and a job ``then`` that waits for all of them.

        One transaction; returns the parents' ids followed by the last job's id.
        """
        specs = self._specs(parents, "enqueue_fan_in parents")
        (last,) = self._specs([then], "enqueue_fan_in then")
        ids: list[EnqueuedJob] = []
        queues: set[str] = set()
        with self._write(session) as connection:
            for spec in specs:
                job_id, queue = self._enqueue_spec(connection, spec, ())
                ids.append(job_id)
                queues.add(queue)
            job_id, queue = self._enqueue_spec(connection, last, tuple(ids))
            ids.append(job_id)
            queues.add(queue)
            self._announce_jobs(connection, queues)
        self._wake_workers(session, queues)
        return ids

    def _specs(self, jobs: Iterable[JobSpec | Mapping[str, Any]], call: str) -> list[JobSpec]:
        specs = []
        for index, job in enumerate(jobs):
            try:
                specs.append(job if isinstance(job, JobSpec) else JobSpec.from_mapping(job))
            except TypeError as exc:
                raise InvalidInput(f"job #{index} of {call}: {exc}") from None
        if not specs:
            raise InvalidInput(f"{call} needs at least one job")
        return specs

    def _enqueue_spec(
        self, connection: Connection, spec: JobSpec, extra_parents: tuple[int, ...]
    ) -> tuple[EnqueuedJob, str]:
        """Insert one spec in ``connection``'s transaction with its parents (its own
        ``depends_on`` and ``extra_parents``); return (the job, its queue)."""
        # Enqueueing's helpers (this mixin sits under it in Queue).
        enqueueing: Any = self
        params, columns = enqueueing._spec_params(spec)
        request = self._dependency_request(
            (*parent_ids(spec.depends_on), *extra_parents), spec.on_parent_failure
        )
        (plan,) = self._plan_parents(connection, [request])
        if plan is not None:
            params["p_depends_on"] = list(plan.parents)
        with enqueueing._app_values_refused(connection, shown_values(columns), None):
            job_id, created = enqueueing._insert_deduplicated(connection, params, columns)
        if created:
            self._write_events(connection, [enqueueing._enqueued_event(job_id, params)])
            if plan is not None:
                self._attach_parents(connection, job_id, plan)
        return EnqueuedJob(job_id, created), spec.queue

    # ---------------------------------------------------------------- end side

    def _parents_ended(
        self,
        connection: Connection,
        ended: Iterable[int],
        cancelled_children: list[int] | None = None,
        actor: str = SYSTEM_ACTOR,
    ) -> set[str]:
        """Queue, recount or cancel the children of jobs that just ended.

        Runs in the ending transaction. Each child's parents are read again under its
        lock, so a parent that ends twice (failed, retried by hand, then succeeded) is
        never counted twice. Returns the queues
        that got a job (for the caller to wake workers after commit; the NOTIFY is
        sent here). The ids of the descendants it cancelled are appended to
        ``cancelled_children`` when given. Their CANCELLED events name ``actor``: the
        operator (or ``system``) whose act ended the parent.
        """
        return self._settle_children_of(connection, ended, cancelled_children, actor=actor)

    def _settle_children_of(
        self,
        connection: Connection,
        jobs: Iterable[int],
        cancelled_children: list[int] | None = None,
        discarding: Collection[int] = (),
        actor: str = SYSTEM_ACTOR,
    ) -> set[str]:
        """Bring every WAITING child of ``jobs`` in line with its parents as they are
        now (and theirs, transitively, for the children this cancels). Parents in
        ``discarding`` (about to be deleted unfinished) count as CANCELLED."""
        if not self.sql.has_dependencies:
            return set()
        woken: set[str] = set()
        cancelled: list[int] = []
        frontier = sorted(set(jobs))
        while frontier:
            frontier = self._settle_children(connection, frontier, woken, discarding, actor)
            cancelled.extend(frontier)
        if cancelled_children is not None:
            cancelled_children.extend(cancelled)
        if cancelled:
            # Whoever ended the parent, the children's ``wait`` callers hear it now.
            self._announce_finished(connection, cancelled)
        if woken:
            self._announce_jobs(connection, woken)
        return woken

    def _settle_children(
        self,
        connection: Connection,
        parents: list[int],
        woken: set[str],
        discarding: Collection[int] = (),
        actor: str = SYSTEM_ACTOR,
    ) -> list[int]:
        """One level of :meth:`_settle_children_of`; returns the children it cancelled.

        Children are named to the database in chunks (:data:`CHUNK`), in id order, so
        a parent with any number of children ends without hitting a bind-parameter
        limit, and two enders still lock alike.
        """
        by_child: dict[int, list[int]] = {}
        for chunk in chunked(parents):
            for child, parent, _ in connection.execute(self.sql.children_of, {"p_ids": chunk}):
                by_child.setdefault(child, []).append(parent)
        locked: dict[int, Any] = {}
        for chunk in chunked(sorted(by_child)):
            for row in connection.execute(self.sql.lock_children, {"p_ids": chunk}):
                locked[row.id] = row  # WAITING children only
        if not locked:
            return []
        edges = self._parent_edges(connection, sorted(locked))
        if discarding:
            # Still in their rows until the delete: what they mean for a child is a
            # cancellation (the edges go with them, so it is now or never).
            edges = {
                child: [
                    (p, policy, JobStatus.CANCELLED.value if p in discarding else status)
                    for p, policy, status in found
                ]
                for child, found in edges.items()
            }
        cancel: dict[tuple[int, str], list[int]] = {}
        release: list[int] = []
        recount: dict[int, list[int]] = {}
        for child, row in locked.items():
            failed, pending = settle(edges.get(child, []), prefer=by_child[child])
            if failed is not None:
                cancel.setdefault(failed, []).append(child)
            elif pending == 0:
                release.append(child)
            elif pending != row.pending_parents:
                recount.setdefault(pending, []).append(child)
        events: list[dict[str, Any]] = []
        for (parent, status), ids in cancel.items():
            reason = f"parent job {parent} ended {status}"
            for chunk in chunked(ids):
                connection.execute(
                    self.sql.cancel_waiting_for_dependency, {"p_ids": chunk, "p_detail": reason}
                )
            detail = {"was": JobStatus.WAITING.value, "reason": reason, "parent": parent,
                      "parent_status": status}  # fmt: skip
            events.extend(self._event(i, Event.CANCELLED, actor, detail) for i in ids)
        for chunk in chunked(release):
            connection.execute(self.sql.release_waiting, {"p_ids": chunk})
        for child in release:
            detail = {"parents": by_child[child]}
            events.append(self._event(child, Event.DEPENDENCIES_MET, SYSTEM_ACTOR, detail))
            woken.add(locked[child].queue)
        for pending, ids in recount.items():
            for chunk in chunked(ids):
                connection.execute(self.sql.set_pending, {"p_ids": chunk, "p_pending": pending})
        self._write_events(connection, events)
        return sorted(i for ids in cancel.values() for i in ids)

    def _parent_edges(
        self, connection: Connection, children: Sequence[int]
    ) -> dict[int, list[tuple[int, str, str]]]:
        """``child -> [(parent, policy, parent's status)]``, read now."""
        edges: dict[int, list[tuple[int, str, str]]] = {}
        for chunk in chunked(children):
            for child, parent, policy, status in connection.execute(
                self.sql.parent_tally, {"p_ids": chunk}
            ):
                edges.setdefault(child, []).append((parent, policy, status))
        return edges

    def _cancel_child(
        self, connection: Connection, job_id: int, seen: JobStatus, parent: int, status: str
    ) -> None:
        """Cancel a child for its parent's end, with the CANCELLED event naming it."""
        reason = f"parent job {parent} ended {status}"
        connection.execute(
            self.sql.cancel_for_dependency,
            {"p_id": job_id, "p_status": seen.value, "p_detail": reason},
        )
        detail = {"was": seen.value, "reason": reason, "parent": parent, "parent_status": status}
        self._write_events(connection, [self._event(job_id, Event.CANCELLED, SYSTEM_ACTOR, detail)])

    # ---------------------------------------------------------------- reads

    def dependencies_of(self, job_id: int) -> tuple[list[RelatedJob], list[RelatedJob]]:
        """``(parents, children)`` of a job, each a :class:`RelatedJob`, by id (empty
        lists for a job without any, or models without a dependency table)."""
        validation.job_id(job_id)
        queries = TimelineQueries(self.tables)
        found: list[list[RelatedJob]] = []
        with self.read() as connection:
            for query in (queries.parents(job_id), queries.children(job_id)):
                rows = [] if query is None else connection.execute(query).all()
                found.append(
                    [RelatedJob(int(r.id), r.type, r.status, r.on_parent_failure) for r in rows]
                )
        return found[0], found[1]
