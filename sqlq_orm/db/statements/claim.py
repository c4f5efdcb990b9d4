"""The claim: one statement that leases up to ``p_limit`` ready jobs, each its own token.

On PostgreSQL the candidates are locked with ``FOR UPDATE SKIP LOCKED`` inside a
``MATERIALIZED`` CTE; on SQLite the claim's ``BEGIN IMMEDIATE`` already serialises
writers; on MariaDB (no ``UPDATE ... RETURNING``) the locking ``SELECT`` runs first and
the update takes exactly the rows it locked (see :mod:`.returning`). Each claimed row
gets the token at its position in the ``tokens`` parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Integer,
    bindparam,
    case,
    func,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.statements.concurrency import ConcurrencyStatements, within_limits
from sqlq_orm.db.statements.controls import ControlStatements
from sqlq_orm.db.statements.history import HistoryStatements
from sqlq_orm.db.statements.returning import LOCKED_ID_LIST, LOCKED_IDS
from sqlq_orm.schema.states import JobStatus


def row_number() -> ColumnElement[int]:
    """``row_number() OVER ()``, typed as an integer (same on every dialect)."""
    return func.row_number(type_=Integer).over()


class ClaimStatements(HistoryStatements, ConcurrencyStatements, ControlStatements):
    """The claim, for one queue or several merged (built on first use per count)."""

    def _build_claim_group(self) -> None:
        self._build_concurrency()
        # -- claim -----------------------------------------------------------------
        self.history_in_one_statement = self.dialect.history_in_one_statement
        self.claim = self._recorded_claim(self._build_claim(start=False), start=False)
        self.claim_and_start = self._recorded_claim(self._build_claim(start=True), start=True)
        # Claims that merge one pick per queue, built on first use per queue count.
        self._merged_claims: dict[tuple[int, bool], Any] = {}
        # Claims of chosen jobs (a rate-limited queue's picks, ``p_ids``).
        self.claim_ids = self._recorded_claim(
            self._build_claim(start=False, by_ids=True), start=False
        )
        self.claim_and_start_ids = self._recorded_claim(
            self._build_claim(start=True, by_ids=True), start=True
        )
        # -- a claim whose answer was lost: the jobs it leased, found by their tokens
        # (minted by the claimer, so only the claim that minted them can have set them).
        held = self.tables.jobs.c
        self.claimed_by_tokens = select(*self._claim_returned(), held.status).where(
            held.lease_token.in_(bindparam("p_tokens", expanding=True)),
            held.status.in_([JobStatus.CLAIMED.value, JobStatus.RUNNING.value]),
        )
        # -- when the next queued job is due (an idle worker sleeps until then) ------
        j = self.tables.jobs.c
        # (Paused queues have nothing due: a worker of only paused queues sleeps.
        # Rate-limited ones are asked apart: their window decides when.)
        not_paused = self.tables.queues
        self.seconds_until_next_job = select(func.min(j.run_at) - self.now).where(
            j.queue.in_(bindparam("p_queues", expanding=True)),
            j.status == JobStatus.QUEUED.value,
            *(
                ()
                if not_paused is None
                else (
                    j.queue.not_in(
                        select(not_paused.c.name).where(
                            or_(
                                not_paused.c.paused_at.is_not(None),
                                not_paused.c.rate_limit.is_not(None),
                            )
                        )
                    ),
                )
            ),
        )

    def _claim_returned(self) -> list[Any]:
        """The columns a claim returns (a :class:`~sqlq_orm.core.lease.Lease` is made
        of them), in one place for the claim and :attr:`claimed_by_tokens`."""
        j = self.tables.jobs.c
        return [
            j.id,
            j.lease_token,
            j.type,
            j.queue,
            j.payload,
            j.payload_ref,
            j.attempt_count,
            j.claimed_by,
            j.retry_count,
            j.max_retries,
            j.max_runtime_seconds,
            j.lease_expires_at,
            j.deadline_at,
            j.concurrency_key,
            j.concurrency_limit,
            # The app's own columns, for the handler (JobContext.columns).
            *self.app_columns,
        ]

    def claim_for(self, queues: Sequence[str], *, start: bool) -> tuple[Any, dict[str, Any]]:
        """The claim statement for these (distinct) queues and the parameters naming them.

        Where the backend allows (:attr:`history_in_one_statement`), the statement also
        writes the claim's attempt rows and events; otherwise the caller writes them
        with :meth:`claim_history` statements.
        """
        if len(queues) > 1:
            key = (len(queues), start)
            statement = self._merged_claims.get(key)
            if statement is None:
                # A race here only builds the same statement twice.
                statement = self._recorded_claim(
                    self._build_claim(start=start, merged_queues=len(queues)), start=start
                )
                self._merged_claims[key] = statement
            return statement, {f"p_queue_{i}": name for i, name in enumerate(queues)}
        return (self.claim_and_start if start else self.claim), {"p_queues": list(queues)}

    def _recorded_claim(self, claim: Any, *, start: bool) -> Any:
        if not self.history_in_one_statement:
            return claim
        return self.with_history(claim, lambda source: self.claim_history(source, start=start))

    def _ready_jobs(
        self,
        queue_filter: ColumnElement[bool],
        not_paused: ColumnElement[bool],
        *,
        by_queue: bool = True,
    ) -> Any:
        """Ready jobs in claim order, at most ``p_limit`` of them, with what the
        concurrency limits need: each one's key, limit and the key's held jobs.

        A job whose key is already full is not a candidate, so it never takes the
        place of a job behind it. ``not_paused`` is the guard that the queue(s) of
        ``queue_filter`` are not paused (:meth:`ControlStatements.not_paused`).
        ``by_queue``: ``queue_filter`` names queues (read through the claim index),
        not ids."""
        j = self.tables.jobs.c
        held = self.held_by_key()
        limit = self.strictest_limit()
        no_key = j.concurrency_key.is_(None)
        # Matches ix_*_claim (queue, status, priority DESC, run_at, id): no sort.
        ready = (
            select(
                j.id,
                j.priority,
                j.run_at,
                j.concurrency_key,
                case((no_key, j.concurrency_limit), else_=limit).label("concurrency_limit"),
                case((no_key, 0), else_=held).label("held"),
            )
            .where(
                queue_filter,
                not_paused,
                j.status == JobStatus.QUEUED.value,
                j.run_at <= self.now,
                or_(no_key, held < limit),
            )
            .order_by(j.priority.desc(), j.run_at, j.id)
            .limit(bindparam("p_limit", type_=Integer))
        )
        return self.dialect.in_claim_order(ready, self.tables.jobs) if by_queue else ready

    def _within_limits(self, candidates: Any) -> Any:
        """Of the picked candidates, those that fit their keys' limits: the n-th
        candidate of a key (in claim order) fits while ``held + n`` is within the
        strictest limit of the key's first n candidates (each already the strictest of
        its own and the held jobs'; :func:`.concurrency.within_limits`)."""
        c = candidates.c
        in_order = (c.priority.desc(), c.run_at, c.id)
        key_rank = func.row_number(type_=Integer).over(
            partition_by=c.concurrency_key, order_by=in_order
        )
        strictest = func.min(c.concurrency_limit).over(
            partition_by=c.concurrency_key, order_by=in_order
        )
        ranked = select(
            c.id,
            c.concurrency_key,
            strictest.label("strictest"),
            c.held,
            key_rank.label("key_rank"),
        ).subquery("ranked")
        r = ranked.c
        return select(r.id).where(
            or_(r.concurrency_key.is_(None), r.held + r.key_rank <= r.strictest)
        )

    def _build_claim(self, *, start: bool, merged_queues: int = 0, by_ids: bool = False) -> Any:
        jobs = self.tables.jobs
        j = jobs.c
        now = self.now
        lock = self.dialect.lock_rows
        if merged_queues:
            # "queue IN (a, b) ORDER BY priority DESC, run_at, id" cannot follow the claim
            # index past its first column: PostgreSQL sorts every ready job of those
            # queues, then locks (InnoDB would lock every row it sorted). Instead take the
            # first p_limit of each queue in index order (each locked as read), and the
            # first p_limit of those: the same rows, sorting at most queues * p_limit. The
            # rows read but not picked stay locked (skipped by other claimers) until this
            # claim commits.
            per_queue = [
                lock(
                    self._ready_jobs(
                        j.queue == bindparam(f"p_queue_{i}"),
                        self.not_paused(bindparam(f"p_queue_{i}")),
                    ),
                    True,
                )
                for i in range(merged_queues)
            ]
            if self.dialect.update_returning:
                branches = [ready.subquery(f"ready_{i}") for i, ready in enumerate(per_queue)]
                ready = union_all(*(select(*b.c) for b in branches))
                merged = ready.subquery("ready")
                candidates = (
                    select(*merged.c)
                    .order_by(merged.c.priority.desc(), merged.c.run_at, merged.c.id)
                    .limit(bindparam("p_limit", type_=Integer))
                )
            else:
                # MySQL locks only in a top-level SELECT: lock each queue's rows in a
                # UNION of the locking SELECTs and pick the first p_limit of them.
                compound = union_all(*per_queue)
                picked_first = compound.selected_columns
                candidates = None
                merged_lock = compound.order_by(
                    picked_first.priority.desc(), picked_first.run_at, picked_first.id
                ).limit(bindparam("p_limit", type_=Integer))
        elif by_ids:
            # The picks of a rate-limited queue, whose control row this claim holds
            # locked (so no guard here); still only if ready and within concurrency.
            candidates = lock(
                self._ready_jobs(
                    j.id.in_(bindparam("p_ids", expanding=True)), true(), by_queue=False
                ),
                True,
            )
        else:
            candidates = lock(
                self._ready_jobs(
                    j.queue.in_(bindparam("p_queues", expanding=True)), self.not_paused()
                ),
                True,
            )
        values: dict[str, Any] = {
            "status": JobStatus.CLAIMED.value,
            "claimed_by": bindparam("p_worker"),
            "claimed_at": now,
            "heartbeat_at": now,
            "lease_expires_at": self.later(bindparam("p_lease_seconds")),
        }
        if by_ids:
            values["rate_started_at"] = now
        if start:
            values.update(
                status=JobStatus.RUNNING.value,
                started_at=now,
                attempt_count=j.attempt_count + 1,
                deadline_at=self.deadline_from_now(),
            )
        returned = self._claim_returned()
        if not self.dialect.update_returning:
            # Lock the picked rows first, then update exactly those, each row's token
            # at its position among the locked ids (see db/statements/returning.py).
            position = func.find_in_set(j.id, bindparam(LOCKED_ID_LIST), type_=Integer)
            locked_update = (
                self.update_by_id(jobs)
                .where(
                    j.id.in_(bindparam(LOCKED_IDS, expanding=True)),
                    j.status == JobStatus.QUEUED.value,
                )
                .values(lease_token=self.dialect.token_for_row(position), **values)
            )
            return self.returning_update(
                update(jobs).values(**values),
                returned,
                lock=merged_lock if candidates is None else candidates,
                locked_update=locked_update,
                keep=within_limits,
            )
        assert candidates is not None
        picked = self.dialect.pick(candidates, "picked")
        fitting = self._within_limits(picked).subquery("fitting")
        # Number the rows to claim so each gets its own token from the bound list.
        numbered = select(fitting.c.id, row_number().label("rn")).subquery("numbered")
        return self.returning_update(
            update(jobs)
            .where(j.id == numbered.c.id)
            .values(lease_token=self.dialect.token_for_row(numbered.c.rn), **values),
            returned,
        )
