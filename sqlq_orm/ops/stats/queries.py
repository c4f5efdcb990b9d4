"""The statements behind the stats, each shaped to use an index of the schema.

Every query of :func:`~sqlq_orm.ops.stats.collect.collect_stats` is built here by
:class:`StatsQueries`, for one set of tables and one "now"; each method's docstring
names the index (declared in :mod:`sqlq_orm.schema.mixins`) it is meant to use, and
:meth:`StatsQueries.all` hands them to ``tests/test_explain.py`` to prove it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, case, func, literal, select
from sqlalchemy.sql import Select

from sqlq_orm.db.backends import Backend
from sqlq_orm.db.backends.base import materialized_cte
from sqlq_orm.db.tables import Tables
from sqlq_orm.ops.retention import DAY
from sqlq_orm.ops.stats.views import DEFAULT_STUCK_LIMIT
from sqlq_orm.schema.states import HELD, TERMINAL, AttemptStatus, JobStatus

HELD_VALUES = sorted(s.value for s in HELD)
TERMINAL_VALUES = sorted(s.value for s in TERMINAL)
ACTIVE_VALUES = sorted(s.value for s in (JobStatus.QUEUED, *HELD))
# Jobs whose retry_count still says something: not finished well, not given up on.
RETRY_DISTRIBUTION_VALUES = sorted([*ACTIVE_VALUES, JobStatus.FAILED.value])
FINISHED_RUN_VALUES = sorted([JobStatus.SUCCEEDED.value, JobStatus.FAILED.value])
CLOSED_ATTEMPT_VALUES = sorted([AttemptStatus.SUCCEEDED.value, AttemptStatus.FAILED.value])

PERCENTILES = (50, 95)


class StatsQueries:
    """The statements behind :class:`QueueStats`, built for one set of tables and ``now``.

    ``now`` is a plain integer bound into each statement, read once from the queue's
    clock, so every number in one report is as of the same instant.
    """

    def __init__(self, tables: Tables, now: int, dialect: Backend | None = None) -> None:
        self.tables = tables
        self.now = now
        self.dialect = dialect
        """The database's backend (how to materialize a CTE); None: PostgreSQL's and
        SQLite's way, for callers from before MariaDB."""

    # Q1 ------------------------------------------------------------------------
    def counts_by_queue(self) -> Select[Any]:
        """Covered by ``ix_*_claim`` (queue, status, ...): an index-only scan."""
        j = self.tables.jobs.c
        return select(j.queue, j.status, func.count()).group_by(j.queue, j.status)

    def paused_queues(self) -> Select[Any] | None:
        """The paused queues' names (a small table, read whole); None without one."""
        queues = self.tables.queues
        if queues is None:
            return None
        return select(queues.c.name).where(queues.c.paused_at.is_not(None))

    def rate_limits(self) -> Select[Any] | None:
        """The rate-limited queues with their limits; None without a control table."""
        queues = self.tables.queues
        if queues is None:
            return None
        q = queues.c
        return select(q.name, q.rate_limit, q.rate_period).where(q.rate_limit.is_not(None))

    def counts_by_type(self) -> Select[Any]:
        """Covered by ``ix_*_status_type`` (status, type, retry_count): an index-only
        scan, grouped in the index's order (status first), so nothing is sorted."""
        j = self.tables.jobs.c
        return select(j.type, j.status, func.count()).group_by(j.status, j.type)

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
        """Held jobs, read on the partial ``ix_*_lease`` and ordered by last sign of life.

        The held set is bounded by the workers' capacity, so ordering it is cheap (no
        index order can serve ``COALESCE(heartbeat_at, created_at)`` across two
        statuses anyway). ``lease_expires_at IS NOT NULL`` changes no answer (a job has
        a lease exactly while it is held: the schema's CHECKs) but lets SQLite and
        PostgreSQL use the partial index, whose WHERE it matches.
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
            .where(j.status.in_(HELD_VALUES), j.lease_expires_at.is_not(None))
            .order_by(last_sign, j.id)
            .limit(limit)
        )

    def expired_leases(self) -> Select[int, Any]:
        """The sweeper's predicate, on the partial ``ix_*_lease`` (status,
        lease_expires_at): ``lease_expires_at <= now`` implies its WHERE."""
        j = self.tables.jobs.c
        return select(func.count(), func.min(j.lease_expires_at)).where(
            j.status.in_(HELD_VALUES), j.lease_expires_at <= self.now
        )

    def past_deadline(self) -> Select[Any]:
        """The sweeper's max-runtime predicate, on the partial ``ix_*_deadline``
        (status, deadline_at): ``deadline_at <= now`` implies its WHERE."""
        j = self.tables.jobs.c
        return select(func.count()).where(
            j.status == JobStatus.RUNNING.value, j.deadline_at <= self.now
        )

    def held_by_worker(self) -> Select[Any]:
        """Held jobs per worker, on the partial ``ix_*_lease`` (see :meth:`oldest_held`)."""
        j = self.tables.jobs.c
        return (
            select(j.claimed_by, func.count())
            .where(j.status.in_(HELD_VALUES), j.lease_expires_at.is_not(None))
            .group_by(j.claimed_by)
        )

    def workers(self) -> Select[Any]:
        w = self.tables.workers.c
        return select(
            w.id, w.hostname, w.pid, w.queues, w.concurrency, w.started_at, w.last_seen_at, w.pool
        ).order_by(w.id)

    # Q3 ------------------------------------------------------------------------
    def retry_distribution(self) -> Select[Any]:
        """Unfinished and FAILED jobs, covered by ``ix_*_status_type`` (status, type,
        retry_count): no job row is read."""
        j = self.tables.jobs.c
        return (
            select(j.type, j.retry_count, j.status, func.count())
            .where(j.status.in_(RETRY_DISTRIBUTION_VALUES))
            .group_by(j.status, j.type, j.retry_count)
        )

    def recently_finished(self, window_seconds: int) -> Any:
        """Jobs that ran to an end in the window, read on ``ix_*_finished``.

        A MATERIALIZED CTE, so the planner reads the window's few rows by
        (status, finished_at) first: asked to GROUP BY type straight from the table,
        SQLite walked all of the (type, status) index instead (1.5 s at a million rows,
        20 ms this way).
        """
        j = self.tables.jobs.c
        materialize = self.dialect.materialize if self.dialect else materialized_cte
        return materialize(
            select(j.id, j.type, j.status).where(
                j.status.in_(FINISHED_RUN_VALUES), j.finished_at > self.now - window_seconds
            ),
            "recently_finished",
        )

    def recent_outcomes_by_type(self, window_seconds: int) -> Select[Any]:
        """Jobs that ran to an end in the window, by type and status."""
        recent = self.recently_finished(window_seconds)
        return select(recent.c.type, recent.c.status, func.count()).group_by(
            recent.c.type, recent.c.status
        )

    # Q4 ------------------------------------------------------------------------
    def failed_by_code(self) -> Select[Any]:
        """Covered by the partial ``ix_*_failed_code`` (status, error_code), whose
        predicate the WHERE repeats: every FAILED job has a code (``fail`` requires
        one; the sweeper's and the dependency cascade's are fixed)."""
        j = self.tables.jobs.c
        return (
            select(j.error_code, func.count())
            .where(j.status == JobStatus.FAILED.value, j.error_code.is_not(None))
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
        """``min(finished_at)`` is the first entry of the partial ``ix_*_finished`` for
        the status (``min`` skips NULLs, so its predicate changes no answer)."""
        j = self.tables.jobs.c
        return select(func.min(j.finished_at)).where(j.status == status, j.finished_at.is_not(None))

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
