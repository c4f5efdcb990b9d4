"""Adding jobs: :meth:`~Enqueueing.enqueue` (one, optionally deduplicated, optionally in
the caller's transaction) and :meth:`~Enqueueing.enqueue_many`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import bindparam
from sqlalchemy.engine import Connection

from sqlq_orm.core import validation
from sqlq_orm.errors import DedupeConflict, InvalidInput, SqlqError
from sqlq_orm.queue.app_columns import shown_values
from sqlq_orm.queue.core import SYSTEM_ACTOR, SessionArg, retry_if_rolled_back
from sqlq_orm.queue.dependencies import Dependencies
from sqlq_orm.queue.types import EnqueuedJob, JobSpec
from sqlq_orm.schema.mixins import (
    CONCURRENCY_KEY_MAX,
    DEDUPE_KEY_MAX,
    QUEUE_MAX,
    RATE_KEY_MAX,
    REF_MAX,
    TYPE_MAX,
)
from sqlq_orm.schema.states import Event

_DEDUPE_ROUNDS = 5
"""Lookups and re-inserts an enqueue with a dedupe_key tries before giving up."""

_ARRAY_COLUMNS = (
    "queue",
    "type",
    "priority",
    "payload",
    "payload_ref",
    "run_at",
    "delay",
    "max_retries",
    "max_runtime_seconds",
    "concurrency_key",
    "concurrency_limit",
    "rate_key",
)
"""The per-job parameters ``insert_jobs_from_arrays`` takes, one array each."""


class Enqueueing(Dependencies):
    """Adding jobs, each with its ENQUEUED event in the same transaction."""

    def _job_params(
        self,
        type: str,
        payload: Any,
        *,
        queue: str,
        priority: int,
        run_at: Any,
        delay: Any,
        max_retries: int | None,
        max_runtime_seconds: int | None,
        dedupe_key: str | None,
        payload_ref: str | None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_key: str | None = None,
        dedupe_period: int | None = None,
    ) -> dict[str, Any]:
        """Validate one job's arguments; return the parameters of the insert statement."""
        validation.require_name("type", type, TYPE_MAX)
        validation.require_name("queue", queue, QUEUE_MAX)
        validation.require_int(
            "priority", priority, minimum=validation.INT32_MIN, maximum=validation.INT32_MAX
        )
        absolute_run_at, delay_seconds = validation.schedule(run_at, delay)
        validation.optional_int("max_retries", max_retries, minimum=0, maximum=validation.INT32_MAX)
        validation.optional_int(
            "max_runtime_seconds", max_runtime_seconds, minimum=1, maximum=validation.INT32_MAX
        )
        validation.optional_name("dedupe_key", dedupe_key, DEDUPE_KEY_MAX)
        validation.optional_name("payload_ref", payload_ref, REF_MAX)
        key, limit = validation.concurrency(concurrency_key, concurrency_limit, CONCURRENCY_KEY_MAX)
        validation.optional_name("rate_key", rate_key, RATE_KEY_MAX)
        validation.optional_int(
            "dedupe_period", dedupe_period, minimum=1, maximum=validation.INT32_MAX
        )
        if dedupe_period is not None and dedupe_key is None:
            raise InvalidInput(
                f"dedupe_period={dedupe_period!r} needs a dedupe_key (the key it holds)"
            )
        return {
            "p_queue": queue,
            "p_type": type,
            "p_priority": priority,
            "p_payload": self._storable_json(
                "payload", validation.encode_payload(payload, self.payload_max_bytes)
            ),
            "p_payload_ref": payload_ref,
            "p_dedupe_key": dedupe_key,
            "p_run_at": absolute_run_at,
            "p_delay": delay_seconds,
            "p_max_retries": self.sql.default_max_retries if max_retries is None else max_retries,
            "p_max_runtime_seconds": max_runtime_seconds,
            "p_concurrency_key": key,
            "p_concurrency_limit": limit,
            "p_rate_key": rate_key,
            "p_dedupe_period": dedupe_period,
        }

    def _spec_params(self, spec: JobSpec) -> tuple[dict[str, Any], dict[str, Any]]:
        """Validate one :class:`JobSpec`: the insert's parameters and its app columns."""
        params = self._job_params(
            spec.type,
            spec.payload,
            queue=spec.queue,
            priority=spec.priority,
            run_at=spec.run_at,
            delay=spec.delay,
            max_retries=spec.max_retries,
            max_runtime_seconds=spec.max_runtime_seconds,
            dedupe_key=spec.dedupe_key,
            payload_ref=spec.payload_ref,
            concurrency_key=spec.concurrency_key,
            concurrency_limit=spec.concurrency_limit,
            rate_key=spec.rate_key,
            dedupe_period=spec.dedupe_period,
        )
        return params, self._check_app_values(spec.columns)

    @retry_if_rolled_back
    def enqueue(
        self,
        /,
        type: str,
        payload: Any = None,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: Any = None,
        delay: float | None = None,
        max_retries: int | None = None,
        max_runtime_seconds: int | None = None,
        dedupe_key: str | None = None,
        payload_ref: str | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_key: str | None = None,
        dedupe_period: int | None = None,
        session: SessionArg = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
        **app_columns: Any,
    ) -> EnqueuedJob:
        """Add a job and its ENQUEUED event, atomically.

        ``payload`` is small JSON (capped at ``payload_max_bytes``); ``run_at`` (epoch
        seconds or an aware datetime) or ``delay`` (seconds) holds it back; higher
        ``priority`` runs first. With ``dedupe_key``, while an unfinished job has the
        same key, that job is returned (``created=False``) instead of adding another;
        a key held by a job of another ``type`` or ``queue`` raises
        :class:`~sqlq_orm.errors.DedupeConflict`. With ``dedupe_period`` (seconds, needs
        ``dedupe_key``) the key also holds that long after the job SUCCEEDED or FAILED:
        an enqueue with it gets that finished job back the same way (a CANCELLED job
        releases its key at once). With ``concurrency_key``, at most
        ``concurrency_limit`` (default 1) jobs sharing that key are CLAIMED or RUNNING
        at once; the others wait in QUEUED without holding up other jobs. In a queue
        with a rate limit (:meth:`set_rate_limit`), the limit counts the starts of
        each ``rate_key`` apart (jobs without one share one count).
        With ``session``, the job is written in the caller's transaction and commits or
        rolls back with it. Extra keyword arguments fill columns a host app added to
        its job model. Bad input raises :class:`~sqlq_orm.errors.InvalidInput` and
        writes nothing.

        With ``depends_on`` (ids of existing jobs), the job waits (WAITING) until all
        of them SUCCEEDED; if one ends FAILED or CANCELLED it is cancelled with
        ``DEPENDENCY:FAILED``, or, with ``on_parent_failure="run"``, runs once every
        parent has finished. Unknown ids raise :class:`~sqlq_orm.errors.InvalidInput`.
        """
        params = self._job_params(
            type,
            payload,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_retries=max_retries,
            max_runtime_seconds=max_runtime_seconds,
            dedupe_key=dedupe_key,
            payload_ref=payload_ref,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            rate_key=rate_key,
            dedupe_period=dedupe_period,
        )
        app_columns = self._check_app_values(app_columns)
        request = self._dependency_request(depends_on, on_parent_failure)
        with self._write(session) as connection:
            (plan,) = self._plan_parents(connection, [request])
            if plan is not None:
                params["p_depends_on"] = list(plan.parents)
            with self._app_values_refused(connection, shown_values(app_columns), session):
                job_id, created = self._insert_deduplicated(connection, params, app_columns)
            if created:
                self._write_events(connection, [self._enqueued_event(job_id, params)])
                if plan is not None:
                    self._attach_parents(connection, job_id, plan)
                self._announce_jobs(connection, [queue])
        if created:
            self._wake_workers(session, [queue])
        return EnqueuedJob(job_id, created)

    def _insert_deduplicated(
        self, connection: Connection, params: dict[str, Any], app_columns: Mapping[str, Any]
    ) -> tuple[int, bool]:
        """Insert one job (no event yet): ``(id, True)``, or ``(existing id, False)``
        when an unfinished job holds its dedupe key."""
        statement = self.sql.insert_job
        if params["p_dedupe_key"] is not None:
            statement = self.sql.insert_job_unless_duplicate
            held = self._held_duplicate(connection, params)
            if held is not None:
                return held, False
        if app_columns:
            statement = statement.values(dict(app_columns))
        job_id = self.sql.insert_unless_duplicate(connection, statement, params)
        if job_id is None:
            existing, job_id = self._active_duplicate_or_insert(connection, statement, params)
            if existing is not None:
                return existing, False
        if params["p_dedupe_key"] is not None:
            held = self._held_duplicate(connection, params)
            if held is not None:
                # The insert waited for the key's unfinished holder, which then
                # finished, keeping the key for its period, and left the unique
                # index, so the insert went in. Under READ COMMITTED this new
                # statement sees that finish: the row goes again, the holder answers.
                connection.execute(self.sql.delete_new_job, {"p_job_id": int(job_id)})
                return held, False
        return int(job_id), True

    def _enqueued_event(self, job_id: int, params: Mapping[str, Any]) -> dict[str, Any]:
        detail = {"queue": params["p_queue"], "type": params["p_type"]}
        if params["p_dedupe_key"] is not None:
            detail["dedupe_key"] = params["p_dedupe_key"]
        if params.get("p_depends_on"):
            detail["depends_on"] = params["p_depends_on"]
        return self._event(job_id, Event.ENQUEUED, SYSTEM_ACTOR, detail)

    def _active_duplicate_or_insert(
        self, connection: Connection, statement: Any, params: dict[str, Any]
    ) -> tuple[int | None, int]:
        """After an insert that conflicted: ``(existing id, 0)`` or ``(None, new id)``.

        ``ON CONFLICT DO NOTHING`` on the partial unique index makes the insert race
        free: of two concurrent enqueues one inserts, the other waits for it and then
        conflicts. Under READ COMMITTED (and SQLite's single writer) the winner is
        visible to the lookup that follows. If that job finished in between (it left
        the partial index), the key is free again, so insert once more. A key held by
        a job of another type or queue raises :class:`~sqlq_orm.errors.DedupeConflict`.
        """
        for _ in range(_DEDUPE_ROUNDS):
            existing = connection.execute(
                self.sql.find_active_by_dedupe_key, {"p_dedupe_key": params["p_dedupe_key"]}
            ).one_or_none()
            if existing is not None:
                wanted = (params["p_type"], params["p_queue"])
                if (existing.type, existing.queue) != wanted:
                    raise DedupeConflict(
                        params["p_dedupe_key"],
                        existing.id,
                        (existing.type, existing.queue),
                        wanted,
                    )
                return int(existing.id), 0
            # The active holder may just have finished while keeping its key for a
            # period: that counts as a hold too.
            held = self._held_duplicate(connection, params)
            if held is not None:
                return held, 0
            job_id = self.sql.insert_unless_duplicate(connection, statement, params)
            if job_id is not None:
                return None, int(job_id)
        raise SqlqError(
            f"enqueue with dedupe_key {params['p_dedupe_key']!r} kept colliding with jobs "
            f"that finished at once ({_DEDUPE_ROUNDS} rounds); nothing was written, try again"
        )

    def _held_duplicate(self, connection: Connection, params: dict[str, Any]) -> int | None:
        """The id of a finished job still holding ``p_dedupe_key`` for its
        ``dedupe_period``, or None; :class:`~sqlq_orm.errors.DedupeConflict` when it is
        of another type or queue (as for an unfinished holder)."""
        held = connection.execute(
            self.sql.find_held_by_dedupe_key, {"p_dedupe_key": params["p_dedupe_key"]}
        ).one_or_none()
        if held is None:
            return None
        wanted = (params["p_type"], params["p_queue"])
        if (held.type, held.queue) != wanted:
            raise DedupeConflict(params["p_dedupe_key"], held.id, (held.type, held.queue), wanted)
        return int(held.id)

    @retry_if_rolled_back
    def enqueue_many(
        self, jobs: Iterable[JobSpec | Mapping[str, Any]], *, session: SessionArg = None
    ) -> list[EnqueuedJob]:
        """Add many jobs (and their ENQUEUED events) in one transaction; return them.

        One :class:`EnqueuedJob` per job, in order, as ``enqueue`` returns: each is the
        job's id (an ``int``) with ``created`` False where a ``dedupe_key`` matched.

        Each job is a :class:`JobSpec` or a mapping of the same fields, where any other
        key fills a column the host app added to its job model. All jobs are validated
        before anything is written; one bad job writes none. Jobs without a
        ``dedupe_key`` go in as multi-row inserts (one per set of app columns); a job
        with one is inserted on its own, and where an unfinished job (possibly one
        earlier in this batch) holds its key, that job's id is returned in its place.
        """
        prepared: list[tuple[dict[str, Any], dict[str, Any]]] = []
        requests: list[tuple[tuple[int, ...], str] | None] = []
        for index, job in enumerate(jobs):
            try:
                spec = job if isinstance(job, JobSpec) else JobSpec.from_mapping(job)
                params, columns = self._spec_params(spec)
                requests.append(self._dependency_request(spec.depends_on, spec.on_parent_failure))
            except (InvalidInput, TypeError) as exc:
                raise InvalidInput(f"job #{index} of enqueue_many: {exc}") from None
            prepared.append((params, columns))
        if not prepared:
            return []
        ids: list[int | None] = [None] * len(prepared)
        made = [True] * len(prepared)
        events: list[dict[str, Any] | None] = [None] * len(prepared)
        with self._write(session) as connection:
            plans = self._plan_parents(connection, requests)
            bulk: dict[tuple[str, ...], list[int]] = {}
            for index in _dedupe_keys_first_in_order(prepared):
                params, columns = prepared[index]
                plan = plans[index]
                if plan is not None:
                    # Inserted on its own, like a deduplicated job: its ENQUEUED event
                    # lists its parents.
                    params["p_depends_on"] = list(plan.parents)
                elif params["p_dedupe_key"] is None:
                    bulk.setdefault(tuple(sorted(columns)), []).append(index)
                    continue
                with self._app_values_refused(
                    connection, f"job #{index}: {shown_values(columns)}", session
                ):
                    job_id, created = self._insert_deduplicated(connection, params, columns)
                ids[index], made[index] = job_id, created
                if created:
                    events[index] = self._enqueued_event(job_id, params)
            logged_by_insert = False
            for names, indexes in bulk.items():
                shown = "; ".join(
                    f"job #{i}: {shown_values(prepared[i][1])}" for i in indexes[:3]
                ) + ("; ..." if len(indexes) > 3 else "")
                with self._app_values_refused(connection, shown, session):
                    inserted, logged = self._insert_bulk(connection, names, prepared, indexes)
                logged_by_insert = logged_by_insert or logged
                for index, job_id in zip(indexes, inserted, strict=True):
                    ids[index] = job_id
                    if not logged:
                        events[index] = self._enqueued_event(job_id, prepared[index][0])
            written = [e for e in events if e is not None]
            self._write_events(connection, written)
            for index, plan in enumerate(plans):
                if plan is not None and events[index] is not None:
                    self._attach_parents(connection, int(ids[index] or 0), plan)
            queues = {params["p_queue"] for params, _ in prepared}
            created = bool(written) or logged_by_insert
            if created:
                self._announce_jobs(connection, queues)
        if created:
            self._wake_workers(session, queues)
        return [EnqueuedJob(job_id, made[i]) for i, job_id in enumerate(ids) if job_id is not None]

    def _insert_bulk(
        self,
        connection: Connection,
        names: tuple[str, ...],
        prepared: list[tuple[dict[str, Any], dict[str, Any]]],
        indexes: list[int],
    ) -> tuple[list[int], bool]:
        """Insert the jobs at ``indexes`` (same app columns ``names``); return their ids
        in that order, and whether the insert wrote their ENQUEUED events too."""
        statement = self.sql.insert_job
        rows = [prepared[i][0] for i in indexes]
        if not names and self.sql.insert_jobs_from_arrays is not None:
            # One short statement with an array per column; rows are numbered in
            # array order, and RETURNING gives ids in that order once sorted (below).
            arrays: dict[str, Any] = {
                f"a_{column}": [row[f"p_{column}"] for row in rows] for column in _ARRAY_COLUMNS
            }
            arrays["p_actor"] = SYSTEM_ACTOR
            ids = sorted(
                int(row[0]) for row in connection.execute(self.sql.insert_jobs_from_arrays, arrays)
            )
            if len(ids) != len(rows):
                raise SqlqError(f"inserted {len(ids)} of {len(rows)} jobs; rolled back")
            return ids, self.sql.bulk_insert_writes_events
        if names:
            statement = statement.values({name: bindparam(f"p_app_{name}") for name in names})
            rows = [
                {**prepared[i][0], **{f"p_app_{n}": prepared[i][1][n] for n in names}}
                for i in indexes
            ]
        # executemany with RETURNING: SQLAlchemy batches the rows into multi-row
        # INSERTs. Asking it for the ids in parameter order would make it insert
        # row by row on SQLite (no "sentinel" support there); but both databases
        # number the rows of one INSERT in VALUES order, and the batches run in
        # order, so the sorted ids are the ids in parameter order.
        ids = sorted(int(row[0]) for row in connection.execute(statement, rows))
        if len(ids) != len(rows):
            raise SqlqError(f"inserted {len(ids)} of {len(rows)} jobs; rolled back")
        return ids, False


def _dedupe_keys_first_in_order(prepared: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[int]:
    """The jobs' indexes: those with a dedupe key first, by key, then the rest in order.

    Each dedupe insert may wait for a concurrent transaction's uncommitted insert of
    the same key; two batches that took their keys in different orders could each wait
    for the other (a deadlock). In key order, every batch waits in the same direction.
    """
    return sorted(
        range(len(prepared)),
        key=lambda i: (
            prepared[i][0]["p_dedupe_key"] is None,
            prepared[i][0]["p_dedupe_key"] or "",
            i,
        ),
    )
