"""Collect the operator's stats of a queue in one read-only snapshot.

:func:`collect_stats` opens one snapshot transaction
(:meth:`QueueContext.snapshot() <sqlq_orm.db.context.QueueContext.snapshot>`): SQLite's
write lock is never taken, and on PostgreSQL every query sees the same snapshot.
"Now" is read once from the queue's clock and bound into every query
(:class:`~sqlq_orm.ops.stats.queries.StatsQueries`), so all numbers are as of one
instant (and tests can pin it). The helpers below fold the rows into the dataclasses of
:mod:`sqlq_orm.ops.stats.views`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from sqlq_orm.core import validation
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.ops.retention import RetentionPolicy
from sqlq_orm.ops.stats.queries import PERCENTILES, StatsQueries
from sqlq_orm.ops.stats.views import (
    DEFAULT_STUCK_LIMIT,
    DEFAULT_TOP_N,
    DEFAULT_WINDOWS,
    DEFAULT_WORKER_STALE_SECONDS,
    DurationStats,
    ErrorCodeCount,
    HeldJob,
    LeaseHealth,
    QueueLatency,
    QueueStats,
    RetentionStatus,
    RetryBucket,
    StateCounts,
    Throughput,
    TypeHealth,
    WorkersReport,
    WorkerView,
    worker_state,
)
from sqlq_orm.schema.states import JobStatus


def collect_stats(
    queue: QueueContext | HasContext,
    *,
    top_n: int = DEFAULT_TOP_N,
    stuck_limit: int = DEFAULT_STUCK_LIMIT,
    windows: Sequence[int] = DEFAULT_WINDOWS,
    worker_stale_seconds: int = DEFAULT_WORKER_STALE_SECONDS,
    policy: RetentionPolicy | None = None,
) -> QueueStats:
    """Answer the operator's questions about ``queue`` in one read-only transaction.

    ``queue`` is a :class:`~sqlq_orm.Queue` or its
    :class:`~sqlq_orm.db.context.QueueContext`.

    ``top_n`` caps the failure reasons, ``stuck_limit`` the oldest in-progress jobs
    listed; ``windows`` are the throughput windows in seconds (the largest is also
    the window for per-type failure rates and attempt durations); a worker not seen
    for ``worker_stale_seconds`` is reported silent; ``policy`` (default
    :class:`~sqlq_orm.ops.retention.RetentionPolicy`) decides what counts as due for
    pruning. Bad arguments raise :class:`~sqlq_orm.errors.InvalidInput`.
    """
    top_n = validation.require_int("top_n", top_n, minimum=1, maximum=validation.INT32_MAX)
    stuck_limit = validation.require_int(
        "stuck_limit", stuck_limit, minimum=1, maximum=validation.INT32_MAX
    )
    worker_stale_seconds = validation.require_int(
        "worker_stale_seconds", worker_stale_seconds, minimum=1, maximum=validation.INT32_MAX
    )
    windows = [
        validation.require_int("window", w, minimum=1, maximum=validation.INT32_MAX)
        for w in windows
    ]
    if not windows:
        windows = list(DEFAULT_WINDOWS)
    long_window = max(windows)
    policy = policy or RetentionPolicy()

    context = context_of(queue)
    with context.snapshot() as connection:
        now = context.now(connection)
        q = StatsQueries(context.tables, now, context.dialect)
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
        paused = q.paused_queues()
        paused_queues = [] if paused is None else sorted(connection.execute(paused).scalars())
        limited = q.rate_limits()
        rate_limits = (
            {}
            if limited is None
            else {
                name: (int(limit), int(period))
                for name, limit, period in sorted(connection.execute(limited).all())
            }
        )

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
        paused_queues=paused_queues,
        rate_limits=rate_limits,
    )


def collect_workers(
    queue: QueueContext | HasContext,
    *,
    stuck_limit: int = DEFAULT_STUCK_LIMIT,
    worker_stale_seconds: int = DEFAULT_WORKER_STALE_SECONDS,
) -> WorkersReport:
    """Only the workers' part of :func:`collect_stats` (the workers, what each holds,
    the longest-silent held jobs): three indexed reads in one snapshot instead of the
    whole report, for a page (the dashboard's ``/workers``) that shows nothing else."""
    stuck_limit = validation.require_int(
        "stuck_limit", stuck_limit, minimum=1, maximum=validation.INT32_MAX
    )
    worker_stale_seconds = validation.require_int(
        "worker_stale_seconds", worker_stale_seconds, minimum=1, maximum=validation.INT32_MAX
    )
    context = context_of(queue)
    with context.snapshot() as connection:
        now = context.now(connection)
        q = StatsQueries(context.tables, now, context.dialect)
        held_by_worker = {row[0]: int(row[1]) for row in connection.execute(q.held_by_worker())}
        return WorkersReport(
            now=now,
            workers=_workers(connection, q, now, worker_stale_seconds, held_by_worker),
            oldest_held=_oldest_held(connection, q, stuck_limit, worker_stale_seconds),
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
                worker_state=worker_state(row.worker_last_seen_at, now, stale_seconds),
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
        WorkerView.from_row(row, now, stale_seconds, held_by_worker.get(row.id, 0))
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
