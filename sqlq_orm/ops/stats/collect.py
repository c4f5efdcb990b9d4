"""Read-only answers to the questions an operator asks a queue, with data.

1. How many jobs are in each state, per queue and per type?
2. Which in-progress job has been silent the longest, on which worker, and is that
   worker alive?
3. What does the retry distribution look like, and which type keeps failing?
4. What are the failure reasons (Top-N by ``error_code``)?
5. How long is data kept, and how much is due for pruning?

Plus queue latency (age of the oldest ready job), leases that expired but are not
swept yet, throughput and failure rate over recent windows, and p50/p95 attempt
durations per type.

Everything runs in one read-only transaction (:func:`consistent_read`): SQLite's write
lock is never taken, and on PostgreSQL every query sees the same snapshot. "Now" is
read once from the queue's clock and bound into every query, so all numbers are as of
one instant (and tests can pin it). Each query is shaped to use an index declared in
:mod:`sqlq_orm.schema.mixins`; :class:`StatsQueries` and :class:`TimelineQueries` hand the
exact statements to ``tests/test_explain.py``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, case, func, literal, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from sqlq_orm.core import validation
from sqlq_orm.db.statements import Tables
from sqlq_orm.errors import JobNotFound
from sqlq_orm.ops.retention import DAY, RetentionPolicy
from sqlq_orm.schema.states import HELD, TERMINAL, AttemptStatus, JobStatus

if TYPE_CHECKING:
    from sqlq_orm.queue.queue import Queue

DEFAULT_WINDOWS: tuple[int, ...] = (300, 3600)
"""Throughput windows in seconds: the last 5 and 60 minutes."""

DEFAULT_WORKER_STALE_SECONDS = 60
"""A worker not seen for longer than this is reported as silent (maybe dead)."""

DEFAULT_TOP_N = 10
DEFAULT_STUCK_LIMIT = 10

HELD_VALUES = sorted(s.value for s in HELD)
TERMINAL_VALUES = sorted(s.value for s in TERMINAL)
ACTIVE_VALUES = sorted(s.value for s in (JobStatus.QUEUED, *HELD))
# Jobs whose retry_count still says something: not finished well, not given up on.
RETRY_DISTRIBUTION_VALUES = sorted([*ACTIVE_VALUES, JobStatus.FAILED.value])
FINISHED_RUN_VALUES = sorted([JobStatus.SUCCEEDED.value, JobStatus.FAILED.value])
CLOSED_ATTEMPT_VALUES = sorted([AttemptStatus.SUCCEEDED.value, AttemptStatus.FAILED.value])

PERCENTILES = (50, 95)


# ---------------------------------------------------------------------- results


class WorkerState(enum.StrEnum):
    """What the worker registry says about the worker holding a job."""

    ALIVE = "alive"  #: registered and seen within the stale threshold
    SILENT = "silent"  #: registered but not seen for longer than the threshold
    UNREGISTERED = "unregistered"  #: no row in the registry (gone, or never registered)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StateCounts:
    """Question 1: how many jobs are in each state."""

    by_status: dict[str, int]
    """Every status, zeros included."""
    by_queue: dict[str, dict[str, int]]
    """queue -> status -> count (statuses with jobs only)."""
    by_type: dict[str, dict[str, int]]
    """type -> status -> count (statuses with jobs only)."""

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


@dataclass(frozen=True)
class QueueLatency:
    """How long the oldest ready job of one queue has been waiting."""

    queue: str
    ready: int
    """QUEUED jobs whose ``run_at`` has come."""
    scheduled: int
    """QUEUED jobs held back until a later ``run_at`` (delays, retry backoff)."""
    oldest_ready_run_at: int | None
    latency_seconds: int
    """``now - min(run_at)`` over the ready jobs; 0 when none is ready."""


@dataclass(frozen=True)
class HeldJob:
    """Question 2: an in-progress (CLAIMED or RUNNING) job and the worker holding it."""

    id: int
    queue: str
    type: str
    status: str
    attempt: int
    claimed_by: str | None
    created_at: int
    claimed_at: int | None
    started_at: int | None
    heartbeat_at: int | None
    lease_expires_at: int | None
    silent_seconds: int
    """``now - COALESCE(heartbeat_at, created_at)``: time since the last proof of life."""
    held_seconds: int | None
    """``now - claimed_at``: how long the worker has held it."""
    lease_expired: bool
    """The lease ran out and the sweeper has not taken the job back yet."""
    worker_state: WorkerState
    worker_hostname: str | None
    worker_pid: int | None
    worker_last_seen_at: int | None


@dataclass(frozen=True)
class LeaseHealth:
    """Leases the sweeper should act on but has not (yet)."""

    expired: int
    """Held jobs with ``lease_expires_at <= now``."""
    oldest_expired_at: int | None
    past_deadline: int
    """RUNNING jobs past ``deadline_at`` (their max runtime)."""


@dataclass(frozen=True)
class RetryBucket:
    """Question 3: how many jobs of ``type`` have been retried ``retry_count`` times."""

    type: str
    retry_count: int
    unfinished: int
    """QUEUED, CLAIMED or RUNNING jobs (still being retried)."""
    failed: int
    """Jobs that ended FAILED after that many retries."""

    @property
    def count(self) -> int:
        return self.unfinished + self.failed


@dataclass(frozen=True)
class TypeHealth:
    """Question 3: which type keeps failing."""

    type: str
    failed_total: int
    """Jobs of this type in FAILED now."""
    retrying: int
    """Unfinished jobs of this type with ``retry_count > 0``."""
    max_retry_count: int
    succeeded_recent: int
    failed_recent: int
    window_seconds: int
    """``*_recent`` count jobs finished within this many seconds."""

    @property
    def failure_rate_recent(self) -> float | None:
        finished = self.succeeded_recent + self.failed_recent
        return None if finished == 0 else self.failed_recent / finished


@dataclass(frozen=True)
class ErrorCodeCount:
    """Question 4: one failure reason and how many jobs carry it."""

    error_code: str | None
    failed: int
    """Jobs that ended FAILED with this code."""
    retrying: int
    """Unfinished jobs whose last attempt failed with this code."""

    @property
    def total(self) -> int:
        return self.failed + self.retrying


@dataclass(frozen=True)
class Throughput:
    """Jobs finished within the last ``window_seconds``, by outcome."""

    window_seconds: int
    succeeded: int
    failed: int
    cancelled: int

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    @property
    def failure_rate(self) -> float | None:
        """``failed / (succeeded + failed)``; None when nothing ran to an end."""
        ran = self.succeeded + self.failed
        return None if ran == 0 else self.failed / ran

    @property
    def per_minute(self) -> float:
        return self.finished * 60 / self.window_seconds


@dataclass(frozen=True)
class DurationStats:
    """Attempt durations (seconds) of one type, nearest-rank percentiles."""

    type: str
    attempts: int
    p50: int
    p95: int
    max: int


@dataclass(frozen=True)
class WorkerView:
    """A registered worker and how many jobs it holds."""

    id: str
    hostname: str
    pid: int
    queues: str
    concurrency: int
    started_at: int
    last_seen_at: int
    seen_seconds_ago: int
    state: WorkerState
    held_jobs: int


@dataclass(frozen=True)
class RetentionStatus:
    """Question 5: how long one terminal status is kept and what is due for pruning."""

    status: str
    keep_days: int
    """-1 keeps forever."""
    jobs: int
    oldest_finished_at: int | None
    oldest_age_seconds: int | None
    due_for_prune: int
    """Jobs finished before the policy's cutoff (what ``prune`` would delete now)."""


@dataclass(frozen=True)
class QueueStats:
    """Everything :func:`collect_stats` found, as of ``now`` (epoch seconds)."""

    now: int
    counts: StateCounts
    latency: list[QueueLatency]
    oldest_held: list[HeldJob]
    leases: LeaseHealth
    retries: list[RetryBucket]
    types: list[TypeHealth]
    errors: list[ErrorCodeCount]
    throughput: list[Throughput]
    durations: list[DurationStats]
    duration_window_seconds: int
    workers: list[WorkerView]
    retention: list[RetentionStatus]
    worker_stale_seconds: int = DEFAULT_WORKER_STALE_SECONDS

    @property
    def oldest_ready_latency_seconds(self) -> int:
        """The worst queue latency over all queues (0 when nothing is ready)."""
        return max((q.latency_seconds for q in self.latency), default=0)


# ----------------------------------------------------------------------- queries


class StatsQueries:
    """The statements behind :class:`QueueStats`, built for one set of tables and ``now``.

    ``now`` is a plain integer bound into each statement, read once from the queue's
    clock, so every number in one report is as of the same instant.
    """

    def __init__(self, tables: Tables, now: int) -> None:
        self.tables = tables
        self.now = now

    # Q1 ------------------------------------------------------------------------
    def counts_by_queue(self) -> Select[Any]:
        """Covered by ``ix_*_claim`` (queue, status, ...): an index-only scan."""
        j = self.tables.jobs.c
        return select(j.queue, j.status, func.count()).group_by(j.queue, j.status)

    def counts_by_type(self) -> Select[Any]:
        """Covered by ``ix_*_type_status`` (type, status): an index-only scan."""
        j = self.tables.jobs.c
        return select(j.type, j.status, func.count()).group_by(j.type, j.status)

    def latency(self, queue: str) -> Select[Any]:
        """The QUEUED range of one queue in ``ix_*_claim``, which also holds ``run_at``."""
        j = self.tables.jobs.c
        ready = j.run_at <= self.now
        return select(
            func.min(case((ready, j.run_at))),
            func.coalesce(func.sum(case((ready, 1), else_=0)), 0),
            func.count(),
        ).where(j.queue == queue, j.status == JobStatus.QUEUED.value)

    # Q2 ------------------------------------------------------------------------
    def oldest_held(self, limit: int) -> Select[Any]:
        """Held jobs by ``ix_*_running_age`` (status, heartbeat_at, created_at).

        The held set is bounded by the workers' capacity, so ordering it is cheap.
        """
        jobs, workers = self.tables.jobs, self.tables.workers
        j, w = jobs.c, workers.c
        last_sign = func.coalesce(j.heartbeat_at, j.created_at)
        return (
            select(
                j.id,
                j.queue,
                j.type,
                j.status,
                j.attempt_count,
                j.retry_count,
                j.claimed_by,
                j.created_at,
                j.claimed_at,
                j.started_at,
                j.heartbeat_at,
                j.lease_expires_at,
                w.hostname.label("worker_hostname"),
                w.pid.label("worker_pid"),
                w.last_seen_at.label("worker_last_seen_at"),
            )
            .select_from(jobs.outerjoin(workers, w.id == j.claimed_by))
            .where(j.status.in_(HELD_VALUES))
            .order_by(last_sign, j.id)
            .limit(limit)
        )

    def expired_leases(self) -> Select[Any]:
        """The sweeper's predicate, on ``ix_*_lease`` (status, lease_expires_at)."""
        j = self.tables.jobs.c
        return select(func.count(), func.min(j.lease_expires_at)).where(
            j.status.in_(HELD_VALUES), j.lease_expires_at <= self.now
        )

    def past_deadline(self) -> Select[Any]:
        """The sweeper's max-runtime predicate, on ``ix_*_deadline`` (status, deadline_at)."""
        j = self.tables.jobs.c
        return select(func.count()).where(
            j.status == JobStatus.RUNNING.value, j.deadline_at <= self.now
        )

    def held_by_worker(self) -> Select[Any]:
        j = self.tables.jobs.c
        return (
            select(j.claimed_by, func.count())
            .where(j.status.in_(HELD_VALUES))
            .group_by(j.claimed_by)
        )

    def workers(self) -> Select[Any]:
        w = self.tables.workers.c
        return select(
            w.id, w.hostname, w.pid, w.queues, w.concurrency, w.started_at, w.last_seen_at
        ).order_by(w.id)

    # Q3 ------------------------------------------------------------------------
    def retry_distribution(self) -> Select[Any]:
        """Unfinished and FAILED jobs, reached through a status-leading index."""
        j = self.tables.jobs.c
        return (
            select(j.type, j.retry_count, j.status, func.count())
            .where(j.status.in_(RETRY_DISTRIBUTION_VALUES))
            .group_by(j.type, j.retry_count, j.status)
        )

    def recently_finished(self, window_seconds: int) -> Any:
        """Jobs that ran to an end in the window, read on ``ix_*_finished``.

        A MATERIALIZED CTE, so the planner reads the window's few rows by
        (status, finished_at) first: asked to GROUP BY type straight from the table,
        SQLite walks all of ``ix_*_type_status`` instead (1.5 s at a million rows,
        20 ms this way).
        """
        j = self.tables.jobs.c
        return (
            select(j.id, j.type, j.status)
            .where(j.status.in_(FINISHED_RUN_VALUES), j.finished_at > self.now - window_seconds)
            .cte("recently_finished")
            .prefix_with("MATERIALIZED")
        )

    def recent_outcomes_by_type(self, window_seconds: int) -> Select[Any]:
        """Jobs that ran to an end in the window, by type and status."""
        recent = self.recently_finished(window_seconds)
        return select(recent.c.type, recent.c.status, func.count()).group_by(
            recent.c.type, recent.c.status
        )

    # Q4 ------------------------------------------------------------------------
    def failed_by_code(self) -> Select[Any]:
        """Covered by ``ix_*_failed_code`` (status, error_code)."""
        j = self.tables.jobs.c
        return (
            select(j.error_code, func.count())
            .where(j.status == JobStatus.FAILED.value)
            .group_by(j.error_code)
        )

    def retrying_by_code(self) -> Select[Any]:
        """Unfinished jobs whose last run failed (the service keeps its code until success)."""
        j = self.tables.jobs.c
        return (
            select(j.error_code, func.count())
            .where(j.status.in_(ACTIVE_VALUES), j.error_code.is_not(None))
            .group_by(j.error_code)
        )

    # throughput and durations --------------------------------------------------
    def throughput(self, window_seconds: int) -> Select[Any]:
        """Covered by ``ix_*_finished`` (status, finished_at)."""
        j = self.tables.jobs.c
        return (
            select(j.status, func.count())
            .where(j.status.in_(TERMINAL_VALUES), j.finished_at > self.now - window_seconds)
            .group_by(j.status)
        )

    def durations(self, window_seconds: int) -> Select[Any]:
        """Nearest-rank p50/p95/max of attempt durations per type, portably.

        Driven from jobs that ran to an end within the window (``ix_*_finished``) to
        their attempts (``uq_*_job_attempt``); window functions number each type's
        durations, and only the rows at the wanted ranks come back. The rank of the
        p-th percentile of n values is ``ceil(p * n / 100)``, computed in integers.
        """
        attempts = self.tables.attempts
        a = attempts.c
        recent = self.recently_finished(window_seconds)
        duration = (a.finished_at - a.started_at).label("duration")
        ranked = (
            select(
                recent.c.type.label("type"),
                duration,
                func.row_number()
                .over(partition_by=recent.c.type, order_by=(a.finished_at - a.started_at))
                .label("rn"),
                func.count().over(partition_by=recent.c.type).label("n"),
            )
            .select_from(recent.join(attempts, a.job_id == recent.c.id))
            .where(
                a.status.in_(CLOSED_ATTEMPT_VALUES),
                a.finished_at.is_not(None),
            )
            .subquery("ranked")
        )
        n = ranked.c.n
        wanted = [(literal(p, Integer) * n + 99) // 100 for p in PERCENTILES]
        return (
            select(ranked.c.type, ranked.c.duration, ranked.c.rn, n)
            .where(ranked.c.rn.in_([*wanted, n]))
            .order_by(ranked.c.type, ranked.c.rn)
        )

    # Q5 ------------------------------------------------------------------------
    def oldest_finished(self, status: str) -> Select[Any]:
        """``min(finished_at)`` is the first entry of ``ix_*_finished`` for the status."""
        j = self.tables.jobs.c
        return select(func.min(j.finished_at)).where(j.status == status)

    def due_for_prune(self, status: str, cutoff: int) -> Select[Any]:
        """Exactly what ``prune`` would delete, counted on ``ix_*_finished``."""
        j = self.tables.jobs.c
        return select(func.count()).where(j.status == status, j.finished_at < cutoff)

    def all(
        self, *, stuck_limit: int = DEFAULT_STUCK_LIMIT, window_seconds: int = 3600
    ) -> list[tuple[str, Any]]:
        """Every statement :func:`collect_stats` can run, named, for ``EXPLAIN`` tests."""
        cutoff = self.now - 30 * DAY
        return [
            ("stats.counts_by_queue", self.counts_by_queue()),
            ("stats.counts_by_type", self.counts_by_type()),
            ("stats.latency", self.latency("default")),
            ("stats.oldest_held", self.oldest_held(stuck_limit)),
            ("stats.expired_leases", self.expired_leases()),
            ("stats.past_deadline", self.past_deadline()),
            ("stats.held_by_worker", self.held_by_worker()),
            ("stats.retry_distribution", self.retry_distribution()),
            ("stats.recent_outcomes_by_type", self.recent_outcomes_by_type(window_seconds)),
            ("stats.failed_by_code", self.failed_by_code()),
            ("stats.retrying_by_code", self.retrying_by_code()),
            ("stats.throughput", self.throughput(window_seconds)),
            ("stats.durations", self.durations(window_seconds)),
            ("stats.oldest_finished", self.oldest_finished(JobStatus.SUCCEEDED.value)),
            ("stats.due_for_prune", self.due_for_prune(JobStatus.SUCCEEDED.value, cutoff)),
        ]


@contextmanager
def consistent_read(queue: Queue) -> Iterator[Connection]:
    """A read-only transaction whose queries all see one snapshot.

    Like :meth:`Queue.read() <sqlq_orm.queue.queue.Queue.read>` (SQLite: ``BEGIN
    DEFERRED``, never the write lock), but on PostgreSQL at REPEATABLE READ, so the
    numbers of one report agree with each other (a job moving between two queries is
    not counted twice). A read-only REPEATABLE READ transaction never fails to commit.
    """
    engine = queue.engine.execution_options(**queue.dialect.snapshot_options)
    with engine.connect() as connection, connection.begin():
        yield connection


def read_now(queue: Queue, connection: Connection) -> int:
    """Read "now" (epoch seconds) from the queue's clock, in SQL."""
    return int(connection.execute(select(queue.clock.sql_now())).scalar_one())


# ------------------------------------------------------------------------- stats


def _worker_state(last_seen_at: int | None, now: int, stale_seconds: int) -> WorkerState:
    if last_seen_at is None:
        return WorkerState.UNREGISTERED
    if now - last_seen_at > stale_seconds:
        return WorkerState.SILENT
    return WorkerState.ALIVE


def collect_stats(
    queue: Queue,
    *,
    top_n: int = DEFAULT_TOP_N,
    stuck_limit: int = DEFAULT_STUCK_LIMIT,
    windows: Sequence[int] = DEFAULT_WINDOWS,
    worker_stale_seconds: int = DEFAULT_WORKER_STALE_SECONDS,
    policy: RetentionPolicy | None = None,
) -> QueueStats:
    """Answer the operator's questions about ``queue`` in one read-only transaction.

    ``top_n`` caps the failure reasons, ``stuck_limit`` the oldest in-progress jobs
    listed; ``windows`` are the throughput windows in seconds (the largest is also
    the window for per-type failure rates and attempt durations); a worker not seen
    for ``worker_stale_seconds`` is reported silent; ``policy`` (default
    :class:`~sqlq_orm.ops.retention.RetentionPolicy`) decides what counts as due for
    pruning. Bad arguments raise :class:`~sqlq_orm.errors.InvalidInput`.
    """
    top_n = validation.require_int("top_n", top_n, minimum=1)
    stuck_limit = validation.require_int("stuck_limit", stuck_limit, minimum=1)
    worker_stale_seconds = validation.require_int(
        "worker_stale_seconds", worker_stale_seconds, minimum=1
    )
    windows = [validation.require_int("window", w, minimum=1) for w in windows]
    if not windows:
        windows = list(DEFAULT_WINDOWS)
    long_window = max(windows)
    policy = policy or RetentionPolicy()

    with consistent_read(queue) as connection:
        now = read_now(queue, connection)
        q = StatsQueries(queue.tables, now)
        counts = _state_counts(connection, q)
        latency = _latency(connection, q, counts)
        held_by_worker = {row[0]: int(row[1]) for row in connection.execute(q.held_by_worker())}
        oldest_held = _oldest_held(connection, q, stuck_limit, worker_stale_seconds)
        expired, oldest_expired = connection.execute(q.expired_leases()).one()
        past_deadline = connection.execute(q.past_deadline()).scalar_one()
        retries = _retry_distribution(connection, q)
        recent = connection.execute(q.recent_outcomes_by_type(long_window)).all()
        errors = _error_codes(connection, q, top_n)
        throughput = [_throughput(connection, q, w) for w in sorted(set(windows))]
        durations = _durations(connection, q, long_window)
        workers = _workers(connection, q, now, worker_stale_seconds, held_by_worker)
        retention = _retention(connection, q, policy, counts)

    return QueueStats(
        now=now,
        counts=counts,
        latency=latency,
        oldest_held=oldest_held,
        leases=LeaseHealth(
            expired=int(expired),
            oldest_expired_at=None if oldest_expired is None else int(oldest_expired),
            past_deadline=int(past_deadline),
        ),
        retries=retries,
        types=_type_health(counts, retries, recent, long_window),
        errors=errors,
        throughput=throughput,
        durations=durations,
        duration_window_seconds=long_window,
        workers=workers,
        retention=retention,
        worker_stale_seconds=worker_stale_seconds,
    )


def _state_counts(connection: Connection, q: StatsQueries) -> StateCounts:
    by_status = {status.value: 0 for status in JobStatus}
    by_queue: dict[str, dict[str, int]] = {}
    for queue_name, status, count in connection.execute(q.counts_by_queue()):
        by_queue.setdefault(queue_name, {})[status] = int(count)
        by_status[status] = by_status.get(status, 0) + int(count)
    by_type: dict[str, dict[str, int]] = {}
    for type_name, status, count in connection.execute(q.counts_by_type()):
        by_type.setdefault(type_name, {})[status] = int(count)
    return StateCounts(
        by_status=by_status,
        by_queue=dict(sorted(by_queue.items())),
        by_type=dict(sorted(by_type.items())),
    )


def _latency(connection: Connection, q: StatsQueries, counts: StateCounts) -> list[QueueLatency]:
    # One probe per queue with a backlog: each is a range of ix_*_claim, where a
    # single GROUP BY queue would have to read the whole index (status is second).
    result = []
    for queue_name, statuses in counts.by_queue.items():
        if not statuses.get(JobStatus.QUEUED.value):
            continue
        oldest, ready, queued = connection.execute(q.latency(queue_name)).one()
        result.append(
            QueueLatency(
                queue=queue_name,
                ready=int(ready),
                scheduled=int(queued) - int(ready),
                oldest_ready_run_at=None if oldest is None else int(oldest),
                latency_seconds=0 if oldest is None else max(0, q.now - int(oldest)),
            )
        )
    return result


def _oldest_held(
    connection: Connection, q: StatsQueries, limit: int, stale_seconds: int
) -> list[HeldJob]:
    now = q.now
    held = []
    for row in connection.execute(q.oldest_held(limit)):
        last_sign = row.heartbeat_at if row.heartbeat_at is not None else row.created_at
        held.append(
            HeldJob(
                id=int(row.id),
                queue=row.queue,
                type=row.type,
                status=row.status,
                # A CLAIMED job's attempt opens when it starts: report the coming one.
                attempt=int(row.attempt_count)
                + (1 if row.status == JobStatus.CLAIMED.value else 0),
                claimed_by=row.claimed_by,
                created_at=int(row.created_at),
                claimed_at=row.claimed_at,
                started_at=row.started_at,
                heartbeat_at=row.heartbeat_at,
                lease_expires_at=row.lease_expires_at,
                silent_seconds=max(0, now - int(last_sign)),
                held_seconds=None if row.claimed_at is None else max(0, now - row.claimed_at),
                lease_expired=row.lease_expires_at is not None and row.lease_expires_at <= now,
                worker_state=_worker_state(row.worker_last_seen_at, now, stale_seconds),
                worker_hostname=row.worker_hostname,
                worker_pid=row.worker_pid,
                worker_last_seen_at=row.worker_last_seen_at,
            )
        )
    return held


def _retry_distribution(connection: Connection, q: StatsQueries) -> list[RetryBucket]:
    folded: dict[tuple[str, int], list[int]] = {}
    for type_name, retry_count, status, count in connection.execute(q.retry_distribution()):
        pair = folded.setdefault((type_name, int(retry_count)), [0, 0])
        pair[1 if status == JobStatus.FAILED.value else 0] += int(count)
    return [
        RetryBucket(type=type_name, retry_count=retry_count, unfinished=pair[0], failed=pair[1])
        for (type_name, retry_count), pair in sorted(folded.items())
    ]


def _type_health(
    counts: StateCounts,
    retries: list[RetryBucket],
    recent: Sequence[Any],
    window_seconds: int,
) -> list[TypeHealth]:
    recent_counts = {(row[0], row[1]): int(row[2]) for row in recent}
    health = []
    for type_name, statuses in counts.by_type.items():
        buckets = [b for b in retries if b.type == type_name]
        health.append(
            TypeHealth(
                type=type_name,
                failed_total=statuses.get(JobStatus.FAILED.value, 0),
                retrying=sum(b.unfinished for b in buckets if b.retry_count > 0),
                max_retry_count=max((b.retry_count for b in buckets if b.count), default=0),
                succeeded_recent=recent_counts.get((type_name, JobStatus.SUCCEEDED.value), 0),
                failed_recent=recent_counts.get((type_name, JobStatus.FAILED.value), 0),
                window_seconds=window_seconds,
            )
        )
    # The type failing most (recently, then in total, then retrying) comes first.
    health.sort(key=lambda t: (-t.failed_recent, -t.failed_total, -t.retrying, t.type))
    return health


def _error_codes(connection: Connection, q: StatsQueries, top_n: int) -> list[ErrorCodeCount]:
    failed = {row[0]: int(row[1]) for row in connection.execute(q.failed_by_code())}
    retrying = {row[0]: int(row[1]) for row in connection.execute(q.retrying_by_code())}
    codes = [
        ErrorCodeCount(error_code=code, failed=failed.get(code, 0), retrying=retrying.get(code, 0))
        for code in {*failed, *retrying}
    ]
    codes.sort(key=lambda c: (-c.total, -c.failed, c.error_code or ""))
    return codes[:top_n]


def _throughput(connection: Connection, q: StatsQueries, window_seconds: int) -> Throughput:
    found = {row[0]: int(row[1]) for row in connection.execute(q.throughput(window_seconds))}
    return Throughput(
        window_seconds=window_seconds,
        succeeded=found.get(JobStatus.SUCCEEDED.value, 0),
        failed=found.get(JobStatus.FAILED.value, 0),
        cancelled=found.get(JobStatus.CANCELLED.value, 0),
    )


def percentile_rank(percent: int, n: int) -> int:
    """The 1-based nearest rank of the ``percent``-th percentile of ``n`` sorted values."""
    return (percent * n + 99) // 100


def _durations(connection: Connection, q: StatsQueries, window_seconds: int) -> list[DurationStats]:
    by_type: dict[str, dict[int, int]] = {}
    sizes: dict[str, int] = {}
    for type_name, duration, rank, n in connection.execute(q.durations(window_seconds)):
        by_type.setdefault(type_name, {})[int(rank)] = int(duration)
        sizes[type_name] = int(n)
    result = []
    for type_name, ranks in by_type.items():
        n = sizes[type_name]
        p50, p95 = (ranks[percentile_rank(p, n)] for p in PERCENTILES)
        result.append(DurationStats(type=type_name, attempts=n, p50=p50, p95=p95, max=ranks[n]))
    return result


def _workers(
    connection: Connection,
    q: StatsQueries,
    now: int,
    stale_seconds: int,
    held_by_worker: dict[str | None, int],
) -> list[WorkerView]:
    return [
        WorkerView(
            id=row.id,
            hostname=row.hostname,
            pid=int(row.pid),
            queues=row.queues,
            concurrency=int(row.concurrency),
            started_at=int(row.started_at),
            last_seen_at=int(row.last_seen_at),
            seen_seconds_ago=max(0, now - int(row.last_seen_at)),
            state=_worker_state(int(row.last_seen_at), now, stale_seconds),
            held_jobs=held_by_worker.get(row.id, 0),
        )
        for row in connection.execute(q.workers())
    ]


def _retention(
    connection: Connection, q: StatsQueries, policy: RetentionPolicy, counts: StateCounts
) -> list[RetentionStatus]:
    result = []
    for status in policy.statuses():
        oldest = connection.execute(q.oldest_finished(status.value)).scalar_one()
        cutoff = policy.cutoff(status, q.now)
        due = (
            0
            if cutoff is None
            else connection.execute(q.due_for_prune(status.value, cutoff)).scalar_one()
        )
        result.append(
            RetentionStatus(
                status=status.value,
                keep_days=policy.days_for(status),
                jobs=counts.by_status.get(status.value, 0),
                oldest_finished_at=None if oldest is None else int(oldest),
                oldest_age_seconds=None if oldest is None else max(0, q.now - int(oldest)),
                due_for_prune=int(due),
            )
        )
    return result


# -------------------------------------------------------------------- job timeline


@dataclass(frozen=True)
class JobView:
    """A job's current state as ``sqlq show`` prints it (never its lease token)."""

    id: int
    queue: str
    type: str
    status: str
    priority: int
    payload: Any
    """Decoded JSON (the raw text if it does not decode)."""
    payload_ref: str | None
    result_ref: str | None
    dedupe_key: str | None
    created_at: int
    run_at: int
    claimed_at: int | None
    started_at: int | None
    heartbeat_at: int | None
    lease_expires_at: int | None
    deadline_at: int | None
    finished_at: int | None
    claimed_by: str | None
    attempt_count: int
    retry_count: int
    max_retries: int
    max_runtime_seconds: int | None
    error_code: str | None
    error_detail: str | None


@dataclass(frozen=True)
class AttemptView:
    """One run of the job."""

    attempt: int
    worker_id: str | None
    status: str
    started_at: int
    finished_at: int | None
    duration_seconds: int | None
    """``finished_at - started_at``; for an open attempt, how long it has run so far."""
    error_code: str | None
    error_detail: str | None


@dataclass(frozen=True)
class EventView:
    """One entry of the job's timeline."""

    ts: int
    event: str
    actor: str
    detail: Any
    """Decoded JSON detail (the raw text if it does not decode, None if absent)."""


@dataclass(frozen=True)
class JobTimeline:
    """Everything known about one job, as of ``now``."""

    now: int
    job: JobView
    attempts: list[AttemptView]
    events: list[EventView]
    worker: WorkerView | None
    """The worker holding the job, if it is held and the worker is registered."""
    worker_state: WorkerState | None
    """None when nobody holds the job."""


_JOB_VIEW_COLUMNS = [name for name in JobView.__dataclass_fields__]


class TimelineQueries:
    """The statements behind :func:`job_timeline`, each on a key or an index."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def job(self, job_id: int) -> Select[Any]:
        """By primary key; the lease token is never selected."""
        j = self.tables.jobs.c
        return select(*(j[name] for name in _JOB_VIEW_COLUMNS)).where(j.id == job_id)

    def attempts(self, job_id: int) -> Select[Any]:
        """On ``uq_*_job_attempt`` (job_id, attempt)."""
        a = self.tables.attempts.c
        return (
            select(
                a.attempt,
                a.worker_id,
                a.status,
                a.started_at,
                a.finished_at,
                a.error_code,
                a.error_detail,
            )
            .where(a.job_id == job_id)
            .order_by(a.attempt)
        )

    def events(self, job_id: int) -> Select[Any]:
        """On ``ix_*_job_ts`` (job_id, ts)."""
        e = self.tables.events.c
        return (
            select(e.ts, e.event, e.actor, e.detail).where(e.job_id == job_id).order_by(e.ts, e.id)
        )

    def worker(self, worker_id: str) -> Select[Any]:
        w = self.tables.workers.c
        return select(
            w.id, w.hostname, w.pid, w.queues, w.concurrency, w.started_at, w.last_seen_at
        ).where(w.id == worker_id)

    def held_by(self, worker_id: str) -> Select[Any]:
        """The held set (small) through a status-leading index."""
        j = self.tables.jobs.c
        return select(func.count()).where(j.status.in_(HELD_VALUES), j.claimed_by == worker_id)

    def all(self) -> list[tuple[str, Any]]:
        """Every statement :func:`job_timeline` runs, named, for ``EXPLAIN`` tests."""
        return [
            ("show.job", self.job(1)),
            ("show.attempts", self.attempts(1)),
            ("show.events", self.events(1)),
            ("show.held_by", self.held_by("w-1")),
        ]


def _decode(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def job_timeline(
    queue: Queue, job_id: int, *, worker_stale_seconds: int = DEFAULT_WORKER_STALE_SECONDS
) -> JobTimeline:
    """Return job ``job_id`` with its attempts, its events and the worker holding it.

    Raises :class:`~sqlq_orm.errors.JobNotFound` when there is no such job.
    """
    validation.require_int("job_id", job_id)
    q = TimelineQueries(queue.tables)
    with consistent_read(queue) as connection:
        now = read_now(queue, connection)
        row = connection.execute(q.job(job_id)).one_or_none()
        if row is None:
            raise JobNotFound(job_id)
        values = dict(row._mapping)
        values["payload"] = _decode(values["payload"])
        job = JobView(**values)
        attempts = [
            AttemptView(
                attempt=int(a.attempt),
                worker_id=a.worker_id,
                status=a.status,
                started_at=int(a.started_at),
                finished_at=a.finished_at,
                duration_seconds=(
                    (a.finished_at if a.finished_at is not None else now) - int(a.started_at)
                ),
                error_code=a.error_code,
                error_detail=a.error_detail,
            )
            for a in connection.execute(q.attempts(job_id))
        ]
        events = [
            EventView(ts=int(e.ts), event=e.event, actor=e.actor, detail=_decode(e.detail))
            for e in connection.execute(q.events(job_id))
        ]
        worker = None
        state = None
        if job.status in HELD_VALUES and job.claimed_by is not None:
            found = connection.execute(q.worker(job.claimed_by)).one_or_none()
            if found is not None:
                held = connection.execute(q.held_by(job.claimed_by)).scalar_one()
                worker = WorkerView(
                    id=found.id,
                    hostname=found.hostname,
                    pid=int(found.pid),
                    queues=found.queues,
                    concurrency=int(found.concurrency),
                    started_at=int(found.started_at),
                    last_seen_at=int(found.last_seen_at),
                    seen_seconds_ago=max(0, now - int(found.last_seen_at)),
                    state=_worker_state(int(found.last_seen_at), now, worker_stale_seconds),
                    held_jobs=int(held),
                )
            state = _worker_state(
                None if found is None else int(found.last_seen_at), now, worker_stale_seconds
            )
    return JobTimeline(
        now=now, job=job, attempts=attempts, events=events, worker=worker, worker_state=state
    )
