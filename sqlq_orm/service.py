"""The queue operations: enqueue, claim, start, heartbeat, succeed, fail, release,
sweep, cancel and retry. The worker and the CLI call these; they never write SQL.

Every state change writes its event in the same transaction. Every call made on
behalf of a lease is fenced by the lease token and raises
:class:`~sqlq_orm.errors.LeaseLost` (changing nothing) when the token is stale.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from sqlq_orm import error_codes, validation
from sqlq_orm.clock import Clock, DatabaseClock
from sqlq_orm.dialects import support_for
from sqlq_orm.errors import (
    InvalidInput,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    MaxRuntimeExceeded,
    SqlqError,
)
from sqlq_orm.lease import Lease
from sqlq_orm.mixins import DEDUPE_KEY_MAX, QUEUE_MAX, REF_MAX, TYPE_MAX, WORKER_ID_MAX
from sqlq_orm.retry import RetryPolicy
from sqlq_orm.statements import Statements, Tables
from sqlq_orm.states import HELD, TERMINAL, AttemptStatus, Event, JobStatus

log = logging.getLogger("sqlq_orm")

DEFAULT_LEASE_SECONDS = 30
DEFAULT_HEARTBEAT_EVENT_INTERVAL = 300.0
"""A running job logs a HEARTBEAT event at most this often (seconds, monotonic)."""

SYSTEM_ACTOR = "system"

_DEDUPE_ROUNDS = 5
"""Lookups and re-inserts an enqueue with a dedupe_key tries before giving up."""

# Columns the service fills itself; a host app's extra columns are everything else.
_SERVICE_COLUMNS = frozenset(
    {
        "id", "queue", "type", "status", "priority", "payload", "payload_ref",
        "result_ref", "dedupe_key", "created_at", "run_at", "claimed_at", "started_at",
        "heartbeat_at", "lease_expires_at", "deadline_at", "finished_at", "claimed_by",
        "lease_token", "attempt_count", "retry_count", "max_retries",
        "max_runtime_seconds", "error_code", "error_detail",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Models:
    """The mapped classes the queue works with; a host app passes its own."""

    job: Any
    attempt: Any
    event: Any
    worker: Any

    @classmethod
    def default(cls) -> Models:
        """The library's own models (tables ``sqlq_*``)."""
        from sqlq_orm.models import Job, JobAttempt, JobEvent, WorkerRecord

        return cls(job=Job, attempt=JobAttempt, event=JobEvent, worker=WorkerRecord)

    def tables(self) -> Tables:
        def table(model: Any) -> Table:
            return model.__table__  # type: ignore[no-any-return]

        return Tables(
            jobs=table(self.job),
            attempts=table(self.attempt),
            events=table(self.event),
            workers=table(self.worker),
        )


@dataclass(frozen=True)
class EnqueuedJob:
    """The result of :meth:`Queue.enqueue`."""

    id: int
    created: bool
    """False when a ``dedupe_key`` matched an unfinished job, whose id is returned."""


@dataclass(frozen=True)
class JobSpec:
    """One job for :meth:`Queue.enqueue_many`; fields mean what they mean in ``enqueue``."""

    type: str
    payload: Any = None
    queue: str = "default"
    priority: int = 0
    run_at: Any = None
    delay: float | None = None
    max_retries: int | None = None
    max_runtime_seconds: int | None = None
    payload_ref: str | None = None


@dataclass(frozen=True)
class SweepResult:
    """What one :meth:`Queue.sweep` did."""

    expired: int = 0
    """Jobs whose lease had expired (their worker is gone or stuck)."""
    timed_out: int = 0
    """RUNNING jobs past their max runtime."""
    requeued: int = 0
    """Of those, how many went back to QUEUED for another attempt."""
    failed: int = 0
    """Of those, how many ended FAILED (retries spent)."""

    @property
    def total(self) -> int:
        return self.expired + self.timed_out

    def __add__(self, other: SweepResult) -> SweepResult:
        return SweepResult(
            self.expired + other.expired,
            self.timed_out + other.timed_out,
            self.requeued + other.requeued,
            self.failed + other.failed,
        )


@dataclass
class _DeferredWrites:
    """Attempt closes and events collected to be written together, in order."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _detail_json(detail: Mapping[str, Any] | None) -> str | None:
    if not detail:
        return None
    return json.dumps(detail, separators=(",", ":"), default=str)


class Queue:
    """A job queue stored in the tables of ``models`` on ``bind``'s database.

    ``bind`` is an :class:`~sqlalchemy.engine.Engine` (configure it with
    :func:`sqlq_orm.configure_engine`, or create it with :func:`sqlq_orm.create_engine`)
    or a :class:`~sqlalchemy.orm.sessionmaker` bound to one. ``clock`` defaults to the
    database's clock; tests pass a :class:`~sqlq_orm.clock.PinnedClock`.
    """

    def __init__(
        self,
        bind: Engine | sessionmaker[Any],
        *,
        models: Models | None = None,
        clock: Clock | None = None,
        retry_policy: RetryPolicy | None = None,
        default_lease_seconds: int = DEFAULT_LEASE_SECONDS,
        payload_max_bytes: int = validation.DEFAULT_PAYLOAD_MAX_BYTES,
        heartbeat_event_interval: float = DEFAULT_HEARTBEAT_EVENT_INTERVAL,
    ) -> None:
        if isinstance(bind, sessionmaker):
            engine = bind.kw.get("bind")
            if not isinstance(engine, Engine):
                raise InvalidInput("the sessionmaker passed to Queue must be bound to an Engine")
            bind = engine
        if not isinstance(bind, Engine):
            raise InvalidInput(f"Queue needs an Engine or a sessionmaker, got {bind!r}")
        self.engine = bind
        self.models = models or Models.default()
        self.clock = clock or DatabaseClock()
        self.retry_policy = retry_policy or RetryPolicy()
        self.default_lease_seconds = validation.lease_seconds(default_lease_seconds)
        self.payload_max_bytes = validation.require_int(
            "payload_max_bytes", payload_max_bytes, minimum=1
        )
        self.heartbeat_event_interval = heartbeat_event_interval
        self.dialect = support_for(bind)
        self.tables = self.models.tables()
        self.sql = Statements(self.tables, self.dialect, self.clock.sql_now())
        self._app_columns = self.sql.job_columns - _SERVICE_COLUMNS
        self._read_engine = bind.execution_options(**self.dialect.read_options)

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def _write(self, session: Session | None = None) -> Iterator[Connection]:
        """A write transaction: the caller's session's, or a short one of our own."""
        if session is not None:
            yield session.connection()
            return
        with self.engine.begin() as connection:
            yield connection

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction that never takes SQLite's write lock."""
        with self._read_engine.connect() as connection, connection.begin():
            yield connection

    def session(self) -> Session:
        """An ORM session for reads (``Job``, its ``attempts`` and ``events``)."""
        return Session(self._read_engine, expire_on_commit=False)

    def _write_events(self, connection: Connection, rows: list[dict[str, Any]]) -> None:
        if rows:
            connection.execute(self.sql.insert_event, rows)

    @staticmethod
    def _event(
        job_id: int, event: Event, actor: str, detail: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return {
            "p_job_id": job_id,
            "p_event": event.value,
            "p_actor": actor,
            "p_detail": _detail_json(detail),
        }

    # ------------------------------------------------------------------- enqueue

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
        return {
            "p_queue": queue,
            "p_type": type,
            "p_priority": priority,
            "p_payload": validation.encode_payload(payload, self.payload_max_bytes),
            "p_payload_ref": payload_ref,
            "p_dedupe_key": dedupe_key,
            "p_run_at": absolute_run_at,
            "p_delay": delay_seconds,
            "p_max_retries": self.sql.default_max_retries if max_retries is None else max_retries,
            "p_max_runtime_seconds": max_runtime_seconds,
        }

    def enqueue(
        self,
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
        session: Session | None = None,
        **app_columns: Any,
    ) -> EnqueuedJob:
        """Add a job and its ENQUEUED event, atomically.

        ``payload`` is small JSON (capped at ``payload_max_bytes``); ``run_at`` (epoch
        seconds or an aware datetime) or ``delay`` (seconds) holds it back; higher
        ``priority`` runs first. With ``dedupe_key``, while an unfinished job has the
        same key, that job is returned (``created=False``) instead of adding another.
        With ``session``, the job is written in the caller's transaction and commits or
        rolls back with it. Extra keyword arguments fill columns a host app added to
        its job model. Bad input raises :class:`~sqlq_orm.errors.InvalidInput` and
        writes nothing.
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
        )
        validation.app_columns(app_columns, self._app_columns)
        statement = self.sql.insert_job
        if dedupe_key is not None:
            statement = self.sql.insert_job_unless_duplicate
        if app_columns:
            statement = statement.values(app_columns)
        with self._write(session) as connection:
            job_id = connection.execute(statement, params).scalar_one_or_none()
            if job_id is None:
                existing, job_id = self._active_duplicate_or_insert(connection, statement, params)
                if existing is not None:
                    return EnqueuedJob(id=existing, created=False)
            detail = {"queue": queue, "type": type}
            if dedupe_key is not None:
                detail["dedupe_key"] = dedupe_key
            self._write_events(
                connection, [self._event(job_id, Event.ENQUEUED, SYSTEM_ACTOR, detail)]
            )
        return EnqueuedJob(id=job_id, created=True)

    def _active_duplicate_or_insert(
        self, connection: Connection, statement: Any, params: dict[str, Any]
    ) -> tuple[int | None, int]:
        """After an insert that conflicted: ``(existing id, 0)`` or ``(None, new id)``.

        ``ON CONFLICT DO NOTHING`` on the partial unique index makes the insert race
        free: of two concurrent enqueues one inserts, the other waits for it and then
        conflicts. Under READ COMMITTED (and SQLite's single writer) the winner is
        visible to the lookup that follows. If that job finished in between (it left
        the partial index), the key is free again, so insert once more.
        """
        for _ in range(_DEDUPE_ROUNDS):
            existing = connection.execute(
                self.sql.find_active_by_dedupe_key, {"p_dedupe_key": params["p_dedupe_key"]}
            ).scalar_one_or_none()
            if existing is not None:
                return int(existing), 0
            job_id = connection.execute(statement, params).scalar_one_or_none()
            if job_id is not None:
                return None, int(job_id)
        raise SqlqError(
            f"enqueue with dedupe_key {params['p_dedupe_key']!r} kept colliding with jobs "
            f"that finished at once ({_DEDUPE_ROUNDS} rounds); nothing was written, try again"
        )

    def enqueue_many(
        self, jobs: Iterable[JobSpec | Mapping[str, Any]], *, session: Session | None = None
    ) -> list[int]:
        """Add many jobs (and their ENQUEUED events) in two statements; return ids.

        All jobs are validated before anything is written; one bad job writes none.
        ``dedupe_key`` and app columns are not supported here: use :meth:`enqueue`.
        """
        params = []
        for index, job in enumerate(jobs):
            try:
                spec = job if isinstance(job, JobSpec) else JobSpec(**job)
                params.append(
                    self._job_params(
                        spec.type,
                        spec.payload,
                        queue=spec.queue,
                        priority=spec.priority,
                        run_at=spec.run_at,
                        delay=spec.delay,
                        max_retries=spec.max_retries,
                        max_runtime_seconds=spec.max_runtime_seconds,
                        dedupe_key=None,
                        payload_ref=spec.payload_ref,
                    )
                )
            except (InvalidInput, TypeError) as exc:
                raise InvalidInput(f"job #{index} of enqueue_many: {exc}") from None
        if not params:
            return []
        with self._write(session) as connection:
            # executemany with RETURNING: SQLAlchemy batches the rows into multi-row
            # INSERTs. Asking it for the ids in parameter order would make it insert
            # row by row on SQLite (no "sentinel" support there); but both databases
            # number the rows of one INSERT in VALUES order, and the batches run in
            # order, so the sorted ids are the ids in parameter order.
            ids = sorted(row[0] for row in connection.execute(self.sql.insert_job, params))
            if len(ids) != len(params):
                raise SqlqError(f"inserted {len(ids)} of {len(params)} jobs; rolled back")
            self._write_events(
                connection,
                [
                    self._event(
                        job_id,
                        Event.ENQUEUED,
                        SYSTEM_ACTOR,
                        {"queue": p["p_queue"], "type": p["p_type"]},
                    )
                    for job_id, p in zip(ids, params, strict=True)
                ],
            )
        return ids

    # --------------------------------------------------------------------- claim

    def claim(
        self,
        worker_id: str,
        *,
        queues: Sequence[str] = ("default",),
        limit: int = 1,
        lease_seconds: int | None = None,
        start: bool = False,
    ) -> list[Lease]:
        """Lease up to ``limit`` ready jobs to ``worker_id``: highest priority, then oldest.

        Each claimed job gets a fresh lease token, ``lease_expires_at = now +
        lease_seconds`` and a CLAIMED event. With ``start=True`` the jobs go straight to
        RUNNING (attempt opened, STARTED event), saving a round trip per job. Returns
        the leases sorted by job id, or an empty list when nothing is ready. Never claims
        more than ``limit``, and never hands one job to two claimers.
        """
        validation.require_name("worker_id", worker_id, WORKER_ID_MAX)
        queue_names = validation.claim_queues(queues, QUEUE_MAX)
        limit = validation.claim_limit(limit)
        seconds = validation.lease_seconds(
            self.default_lease_seconds if lease_seconds is None else lease_seconds
        )
        tokens = [secrets.token_urlsafe(24) for _ in range(limit)]
        statement, params = self.sql.claim_for(queue_names, start=start)
        params.update(
            p_limit=limit,
            p_worker=worker_id,
            p_lease_seconds=seconds,
            tokens=self.dialect.bind_tokens(tokens),
        )
        with self._write() as connection:
            result = connection.execute(statement, params)
            rows = result.all()
            if not rows:
                return []
            changed = self.dialect.rows_changed(connection, result)
            if changed != len(rows) or len(rows) > limit:
                # Every claimed row must get its CLAIMED event below; a row changed but
                # not returned would be a job held by nobody. Roll the claim back.
                raise SqlqError(
                    f"claim changed {changed} row(s) but returned {len(rows)} (limit "
                    f"{limit}); rolled back, nothing was claimed"
                )
            leases = [self._lease_from_row(row, worker_id, started=start) for row in rows]
            events = []
            for lease in leases:
                events.append(
                    self._event(
                        lease.job_id,
                        Event.CLAIMED,
                        worker_id,
                        {"attempt": lease.attempt, "lease_seconds": seconds},
                    )  # fmt: skip
                )
                if start:
                    events.append(
                        self._event(
                            lease.job_id, Event.STARTED, worker_id, {"attempt": lease.attempt}
                        )
                    )
            if start:
                connection.execute(
                    self.sql.open_attempt,
                    [
                        {
                            "p_job_id": lease.job_id,
                            "p_attempt": lease.attempt,
                            "p_worker": worker_id,
                        }
                        for lease in leases
                    ],
                )
            self._write_events(connection, events)
        leases.sort(key=lambda lease: lease.job_id)
        return leases

    @staticmethod
    def _lease_from_row(row: Any, worker_id: str, *, started: bool) -> Lease:
        return Lease(
            job_id=row.id,
            token=row.lease_token,
            attempt=row.attempt_count if started else row.attempt_count + 1,
            type=row.type,
            queue=row.queue,
            worker_id=worker_id,
            payload_json=row.payload,
            payload_ref=row.payload_ref,
            retry_count=row.retry_count,
            max_retries=row.max_retries,
            max_runtime_seconds=row.max_runtime_seconds,
            lease_expires_at=row.lease_expires_at,
            deadline_at=row.deadline_at,
            started=started,
            last_heartbeat_event=time.monotonic(),
        )

    # ------------------------------------------------------- calls under a lease

    def _lease_params(self, lease: Lease) -> dict[str, Any]:
        if not isinstance(lease, Lease):
            raise InvalidInput(f"expected a Lease returned by claim(), got {lease!r}")
        return {"p_id": lease.job_id, "p_token": lease.token}

    def start(self, lease: Lease) -> Lease:
        """Move a CLAIMED job to RUNNING, open its attempt row, write STARTED."""
        params = self._lease_params(lease)
        with self._write() as connection:
            row = connection.execute(self.sql.start, params).one_or_none()
            if row is None:
                raise LeaseLost(lease.job_id)
            lease.attempt = row.attempt_count
            lease.deadline_at = row.deadline_at
            connection.execute(
                self.sql.open_attempt,
                {"p_job_id": lease.job_id, "p_attempt": lease.attempt, "p_worker": lease.worker_id},
            )
            self._write_events(
                connection,
                [
                    self._event(
                        lease.job_id, Event.STARTED, lease.worker_id, {"attempt": lease.attempt}
                    )
                ],
            )
        lease.started = True
        return lease

    def heartbeat(self, lease: Lease, lease_seconds: int | None = None) -> int:
        """Renew the lease; return the new ``lease_expires_at``.

        Raises :class:`~sqlq_orm.errors.MaxRuntimeExceeded` once the job is past its
        max runtime (the lease is then not renewed, so the sweeper can end it), and
        :class:`~sqlq_orm.errors.LeaseLost` if the lease is no longer this worker's.
        Writes no event, except a HEARTBEAT at most every ``heartbeat_event_interval``.
        """
        params = self._lease_params(lease)
        params["p_lease_seconds"] = validation.lease_seconds(
            self.default_lease_seconds if lease_seconds is None else lease_seconds
        )
        with self._write() as connection:
            expires_at = connection.execute(self.sql.heartbeat, params).scalar_one_or_none()
            if expires_at is None:
                state = connection.execute(self.sql.lease_state, params).one_or_none()
                if state is not None and state[1] and state[0] in HELD and state[2]:
                    raise MaxRuntimeExceeded(lease.job_id, lease.max_runtime_seconds)
                raise LeaseLost(lease.job_id)
            due = time.monotonic() - lease.last_heartbeat_event >= self.heartbeat_event_interval
            if due:
                self._write_events(
                    connection,
                    [
                        self._event(
                            lease.job_id,
                            Event.HEARTBEAT,
                            lease.worker_id,
                            {"lease_expires_at": expires_at},
                        )
                    ],
                )
        if due:
            lease.last_heartbeat_event = time.monotonic()
        lease.lease_expires_at = expires_at
        return int(expires_at)

    def succeed(self, lease: Lease, result_ref: str | None = None) -> None:
        """Finish a RUNNING job as SUCCEEDED, close its attempt, write SUCCEEDED.

        Raises :class:`~sqlq_orm.errors.LeaseLost` (writing nothing) if the lease is no
        longer held, and :class:`~sqlq_orm.errors.InvalidTransition` if the lease was
        never started (only a running job can succeed).
        """
        params = self._lease_params(lease)
        if not lease.started:
            raise InvalidTransition(
                lease.job_id, JobStatus.CLAIMED.value, "succeed (start it first)"
            )
        params["p_result_ref"] = validation.optional_name("result_ref", result_ref, REF_MAX)
        with self._write() as connection:
            if connection.execute(self.sql.succeed, params).rowcount != 1:
                raise LeaseLost(lease.job_id)
            self._close_attempt(connection, lease, AttemptStatus.SUCCEEDED, None, None)
            self._write_events(
                connection,
                [
                    self._event(
                        lease.job_id, Event.SUCCEEDED, lease.worker_id, {"attempt": lease.attempt}
                    )
                ],
            )

    def succeed_many(self, leases: Sequence[Lease]) -> list[Lease]:
        """Finish a batch of RUNNING jobs as SUCCEEDED in one transaction.

        Each job is guarded exactly as in :meth:`succeed` (its id, its lease token,
        status RUNNING); the whole batch is one ``UPDATE ... RETURNING``, one
        ``executemany`` closing the attempts and one writing the SUCCEEDED events.
        Returns the leases that were no longer held (each would have raised
        :class:`~sqlq_orm.errors.LeaseLost` in :meth:`succeed`); nothing is written
        for them, and the rest still succeed. Leases that were never started raise
        :class:`~sqlq_orm.errors.InvalidTransition` and nothing is written.
        """
        by_id: dict[int, Lease] = {}
        for lease in leases:
            self._lease_params(lease)
            if not lease.started:
                raise InvalidTransition(
                    lease.job_id, JobStatus.CLAIMED.value, "succeed (start it first)"
                )
            if lease.job_id in by_id:
                raise InvalidInput(f"succeed_many got job {lease.job_id} twice")
            by_id[lease.job_id] = lease
        if not by_id:
            return []
        pairs = [(lease.job_id, lease.token) for lease in by_id.values()]
        with self._write() as connection:
            done = {
                row[0]
                for row in connection.execute(
                    self.sql.succeed_batch, {"p_ids": list(by_id), "p_pairs": pairs}
                )
            }
            finished = [lease for lease in by_id.values() if lease.job_id in done]
            if finished:
                connection.execute(
                    self.sql.close_attempt_upsert,
                    [
                        {
                            "p_job_id": lease.job_id,
                            "p_attempt": lease.attempt,
                            "p_worker": lease.worker_id,
                            "p_attempt_status": AttemptStatus.SUCCEEDED.value,
                            "p_code": None,
                            "p_detail": None,
                        }
                        for lease in finished
                    ],
                )
                self._write_events(
                    connection,
                    [
                        self._event(
                            lease.job_id,
                            Event.SUCCEEDED,
                            lease.worker_id,
                            {"attempt": lease.attempt},
                        )
                        for lease in finished
                    ],
                )
        return [lease for lease in by_id.values() if lease.job_id not in done]

    def fail(
        self,
        lease: Lease,
        error_code: str,
        error_detail: str | None = None,
        *,
        retryable: bool = True,
    ) -> JobStatus:
        """Record a failed run; return where the job went (QUEUED or FAILED).

        With retries left and ``retryable``, the job goes back to QUEUED with
        ``retry_count + 1`` and ``run_at`` pushed out by the retry policy
        (RETRY_SCHEDULED event); otherwise it ends FAILED (FAILED event).
        ``error_code`` must be ``CATEGORY:SUBCATEGORY``; ``error_detail`` is cut to a
        short summary. A claimed job that was never started may be failed too (say,
        its payload cannot be read); it has no attempt row to close.
        """
        self._lease_params(lease)
        code = error_codes.normalize_error_code(error_code)
        detail = error_codes.summarize_detail(error_detail)
        with self._write() as connection:
            status = self._end_attempt_with_failure(
                connection,
                job_id=lease.job_id,
                token=lease.token,
                seen_status=JobStatus.RUNNING if lease.started else JobStatus.CLAIMED,
                attempt=lease.attempt,
                worker_id=lease.worker_id,
                retry_count=lease.retry_count,
                max_retries=lease.max_retries if retryable else lease.retry_count,
                code=code,
                detail=detail,
                actor=lease.worker_id,
            )
            if status is None:
                raise LeaseLost(lease.job_id)
        return status

    def release(self, lease: Lease, reason: str = "released by worker") -> None:
        """Give an unfinished job back to the queue now, without spending a retry.

        For graceful shutdown: the attempt (if started) is closed as RELEASED and a
        RELEASED event records ``reason``.
        """
        params = self._lease_params(lease)
        with self._write() as connection:
            if connection.execute(self.sql.release, params).rowcount != 1:
                raise LeaseLost(lease.job_id)
            if lease.started:
                connection.execute(
                    self.sql.close_open_attempt,
                    {
                        "p_job_id": lease.job_id,
                        "p_attempt": lease.attempt,
                        "p_attempt_status": AttemptStatus.RELEASED.value,
                        "p_code": None,
                        "p_detail": error_codes.summarize_detail(reason),
                    },
                )
            self._write_events(
                connection,
                [self._event(lease.job_id, Event.RELEASED, lease.worker_id, {"reason": reason})],
            )

    def _close_attempt(
        self,
        connection: Connection,
        lease: Lease,
        status: AttemptStatus,
        code: str | None,
        detail: str | None,
    ) -> None:
        connection.execute(
            self.sql.close_attempt_upsert,
            {
                "p_job_id": lease.job_id,
                "p_attempt": lease.attempt,
                "p_worker": lease.worker_id,
                "p_attempt_status": status.value,
                "p_code": code,
                "p_detail": detail,
            },
        )

    def _end_attempt_with_failure(
        self,
        connection: Connection,
        *,
        job_id: int,
        token: str,
        seen_status: JobStatus,
        attempt: int,
        worker_id: str | None,
        retry_count: int,
        max_retries: int,
        code: str,
        detail: str | None,
        actor: str,
        note: dict[str, Any] | None = None,
        deferred: _DeferredWrites | None = None,
    ) -> JobStatus | None:
        """Requeue with backoff or fail a held job; None if the guard did not match.

        Shared by :meth:`fail` and :meth:`sweep`, so a failed run is recorded the same
        way whoever noticed it. ``note`` (RECOVERED, TIMED_OUT) is written just before
        the outcome's event, and only if the guarded update took. With ``deferred``, the
        attempt row and the events are collected there instead, for the caller to write
        in one batch later in the same transaction (the sweeper does).
        """
        params: dict[str, Any] = {
            "p_id": job_id,
            "p_token": token,
            "p_status": seen_status.value,
            "p_code": code,
            "p_detail": detail,
        }
        if retry_count < max_retries:
            delay = self.retry_policy.delay_seconds(retry_count + 1)
            params["p_delay"] = delay
            run_at = connection.execute(self.sql.requeue_for_retry, params).scalar_one_or_none()
            if run_at is None:
                return None
            outcome = JobStatus.QUEUED
            event = self._event(
                job_id,
                Event.RETRY_SCHEDULED,
                actor,
                {
                    "attempt": attempt,
                    "error_code": code,
                    "retry": retry_count + 1,
                    "delay": delay,
                    "run_at": run_at,
                },
            )
        else:
            if connection.execute(self.sql.fail, params).rowcount != 1:
                return None
            outcome = JobStatus.FAILED
            event = self._event(
                job_id, Event.FAILED, actor, {"attempt": attempt, "error_code": code}
            )
        writes = deferred if deferred is not None else _DeferredWrites()
        if seen_status is JobStatus.RUNNING:
            writes.attempts.append(
                {
                    "p_job_id": job_id,
                    "p_attempt": attempt,
                    "p_worker": worker_id,
                    "p_attempt_status": AttemptStatus.FAILED.value,
                    "p_code": code,
                    "p_detail": detail,
                }
            )
        writes.events += [note, event] if note else [event]
        if deferred is None:
            self._flush(connection, writes)
        return outcome

    def _flush(self, connection: Connection, writes: _DeferredWrites) -> None:
        """Write collected attempt closes and events: one ``executemany`` each."""
        if writes.attempts:
            connection.execute(self.sql.close_attempt_upsert, writes.attempts)
        self._write_events(connection, writes.events)

    # --------------------------------------------------------------------- sweep

    def sweep(
        self, *, batch_size: int = 100, max_batches: int | None = None, actor: str = SYSTEM_ACTOR
    ) -> SweepResult:
        """Take back jobs whose lease expired and end RUNNING jobs past max runtime.

        Works in short transactions of up to ``batch_size`` jobs until a batch comes
        back short (or ``max_batches`` is reached). An expired lease is recovered
        (RECOVERED event, then back to QUEUED with ``retry_count + 1``, or FAILED with
        ``LEASE:EXPIRED`` once retries are spent); a run past its max runtime is timed
        out (TIMED_OUT, then the same with ``TIMEOUT:MAX_RUNTIME``). Each row is
        updated only if it still has the status and token the sweeper saw, so a sweep
        racing a finish or a fresh claim never overwrites it.
        """
        batch_size = validation.require_int("batch_size", batch_size, minimum=1)
        total = SweepResult()
        batches = 0
        while max_batches is None or batches < max_batches:
            result = self._sweep_batch(batch_size, actor)
            total += result
            batches += 1
            if result.total < batch_size:
                break
        return total

    def _sweep_batch(self, batch_size: int, actor: str) -> SweepResult:
        expired = timed_out = requeued = failed = 0
        # Attempt closes and events of the whole batch go out as two executemany
        # calls after the guarded updates: a round trip per row saved, twice.
        deferred = _DeferredWrites()
        with self._write() as connection:
            rows = connection.execute(self.sql.expired_leases, {"p_limit": batch_size}).all()
            seen = {row.id for row in rows}
            room = batch_size - len(rows)
            late = []
            if room > 0:
                late = [
                    row
                    for row in connection.execute(self.sql.past_deadline, {"p_limit": room}).all()
                    if row.id not in seen
                ]
            for row, reason in [(r, "expired") for r in rows] + [(r, "timed_out") for r in late]:
                status = JobStatus(row.status)
                if reason == "expired":
                    code = error_codes.LEASE_EXPIRED
                    detail = f"lease held by {row.claimed_by} expired at {row.lease_expires_at}"
                    seen_lease = {
                        "worker": row.claimed_by,
                        "was": status.value,
                        "lease_expires_at": row.lease_expires_at,
                    }
                    note = self._event(row.id, Event.RECOVERED, actor, seen_lease)
                else:
                    code = error_codes.MAX_RUNTIME
                    detail = (
                        f"ran past its max runtime of {row.max_runtime_seconds}s "
                        f"on {row.claimed_by}"
                    )
                    seen_run = {
                        "worker": row.claimed_by,
                        "max_runtime_seconds": row.max_runtime_seconds,
                    }
                    note = self._event(row.id, Event.TIMED_OUT, actor, seen_run)
                outcome = self._end_attempt_with_failure(
                    connection,
                    job_id=row.id,
                    token=row.lease_token,
                    seen_status=status,
                    # A claim that never started has no attempt row; name the one it
                    # would have opened, as its lease did.
                    attempt=row.attempt_count + 1
                    if status is JobStatus.CLAIMED
                    else row.attempt_count,
                    worker_id=row.claimed_by,
                    retry_count=row.retry_count,
                    max_retries=row.max_retries,
                    code=code,
                    detail=detail,
                    actor=actor,
                    note=note,
                    deferred=deferred,
                )
                if outcome is None:
                    # The row moved since we read it (it is locked, so this should not
                    # happen); the guard kept us off it and nothing was written for it.
                    continue
                if reason == "expired":
                    expired += 1
                else:
                    timed_out += 1
                if outcome is JobStatus.QUEUED:
                    requeued += 1
                else:
                    failed += 1
            self._flush(connection, deferred)
        if expired or timed_out:
            log.info(
                "sweep: %d expired lease(s), %d timed out; %d requeued, %d failed",
                expired, timed_out, requeued, failed,
            )  # fmt: skip
        return SweepResult(expired, timed_out, requeued, failed)

    # ------------------------------------------------------------ cancel / retry

    def cancel(self, job_id: int, *, actor: str = SYSTEM_ACTOR, reason: str | None = None) -> None:
        """Cancel an unfinished job. A worker holding it loses its lease.

        Raises :class:`~sqlq_orm.errors.JobNotFound` or
        :class:`~sqlq_orm.errors.InvalidTransition` (already finished).
        """
        validation.require_int("job_id", job_id)
        with self._write() as connection:
            status, attempt_count, _ = self._locked_status(connection, job_id)
            if status in TERMINAL:
                raise InvalidTransition(job_id, status.value, "cancel")
            connection.execute(self.sql.cancel, {"p_id": job_id, "p_status": status.value})
            if status is JobStatus.RUNNING:
                connection.execute(
                    self.sql.close_open_attempt,
                    {
                        "p_job_id": job_id,
                        "p_attempt": attempt_count,
                        "p_attempt_status": AttemptStatus.CANCELLED.value,
                        "p_code": None,
                        "p_detail": error_codes.summarize_detail(reason),
                    },
                )
            detail = {"was": status.value}
            if reason:
                detail["reason"] = error_codes.summarize_detail(reason) or ""
            self._write_events(connection, [self._event(job_id, Event.CANCELLED, actor, detail)])

    def retry(self, job_id: int, *, actor: str = SYSTEM_ACTOR) -> None:
        """Requeue a FAILED or CANCELLED job now, with a fresh retry budget.

        Its attempts and events stay; the next run is a new attempt number.
        """
        validation.require_int("job_id", job_id)
        with self._write() as connection:
            status, _, _ = self._locked_status(connection, job_id)
            if status not in (JobStatus.FAILED, JobStatus.CANCELLED):
                raise InvalidTransition(job_id, status.value, "retry")
            try:
                with connection.begin_nested():
                    connection.execute(
                        self.sql.manual_retry, {"p_id": job_id, "p_status": status.value}
                    )
            except IntegrityError:
                raise InvalidTransition(
                    job_id, status.value, "retry (another unfinished job has its dedupe_key)"
                ) from None
            self._write_events(
                connection, [self._event(job_id, Event.RETRIED, actor, {"was": status.value})]
            )

    def _locked_status(
        self, connection: Connection, job_id: int
    ) -> tuple[JobStatus, int, str | None]:
        row = connection.execute(self.sql.lock_job, {"p_id": job_id}).one_or_none()
        if row is None:
            raise JobNotFound(job_id)
        return JobStatus(row.status), row.attempt_count, row.claimed_by

    # ----------------------------------------------------------- worker registry

    def register_worker(
        self, worker_id: str, *, hostname: str, pid: int, queues: Sequence[str], concurrency: int
    ) -> None:
        """Record (upsert) that a worker is alive; call on every worker tick."""
        validation.require_name("worker_id", worker_id, WORKER_ID_MAX)
        with self._write() as connection:
            connection.execute(
                self.sql.upsert_worker,
                {
                    "p_worker": worker_id,
                    "p_hostname": hostname,
                    "p_pid": pid,
                    "p_queues": ",".join(queues),
                    "p_concurrency": concurrency,
                },
            )

    def deregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry (graceful shutdown)."""
        with self._write() as connection:
            connection.execute(self.sql.delete_worker, {"p_worker": worker_id})

    # --------------------------------------------------------------------- reads

    def counts_by_status(self) -> dict[str, int]:
        """How many jobs are in each status (statuses with none are included as 0)."""
        with self.read() as connection:
            found = dict(connection.execute(self.sql.count_by_status).all())
        return {status.value: int(found.get(status.value, 0)) for status in JobStatus}

    def get_job(self, job_id: int) -> Any:
        """Return the job (with ``attempts`` and ``events`` loaded) or raise JobNotFound."""
        from sqlalchemy.orm import selectinload

        job_model = self.models.job
        with self.session() as session:
            job = session.get(
                job_model,
                job_id,
                options=[selectinload(job_model.attempts), selectinload(job_model.events)],
            )
            if job is None:
                raise JobNotFound(job_id)
            return job

    # ------------------------------------------------ observability and retention

    def stats(
        self,
        *,
        top_n: int = 10,
        stuck_limit: int = 10,
        windows: Sequence[int] = (300, 3600),
        worker_stale_seconds: int = 60,
        policy: Any = None,
    ) -> Any:
        """Counts, stuck jobs, retries, failure reasons, latency, throughput, retention.

        Read-only (never takes SQLite's write lock); returns
        :class:`~sqlq_orm.observability.QueueStats`. See
        :func:`sqlq_orm.observability.collect_stats` for the arguments.
        """
        from sqlq_orm import observability

        return observability.collect_stats(
            self,
            top_n=top_n,
            stuck_limit=stuck_limit,
            windows=windows,
            worker_stale_seconds=worker_stale_seconds,
            policy=policy,
        )

    def prune(
        self,
        policy: Any = None,
        *,
        batch_size: int = 5000,
        max_batches: int | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Delete finished jobs past their retention, in batches; return counts per status.

        ``policy`` is a :class:`~sqlq_orm.retention.RetentionPolicy` (default: 30 days
        SUCCEEDED and CANCELLED, 90 days FAILED). Returns
        :class:`~sqlq_orm.retention.PruneResult`; see :func:`sqlq_orm.retention.prune`.
        """
        from sqlq_orm import retention

        return retention.prune(
            self, policy, batch_size=batch_size, max_batches=max_batches, dry_run=dry_run
        )
