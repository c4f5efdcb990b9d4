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

Modules:

- :mod:`~sqlq_orm.ops.stats.views`: the answers, as frozen dataclasses (no database);
- :mod:`~sqlq_orm.ops.stats.queries`: :class:`StatsQueries`, every statement, each
  shaped to use an index declared in :mod:`sqlq_orm.schema.mixins`;
- :mod:`~sqlq_orm.ops.stats.collect`: :func:`collect_stats`, which runs them in one
  read-only snapshot and folds the rows into the views.

May import: :mod:`sqlq_orm.errors`, :mod:`sqlq_orm.schema`, :mod:`sqlq_orm.core`,
:mod:`sqlq_orm.db` and :mod:`sqlq_orm.ops.retention` (for the retention policy). Never
:mod:`sqlq_orm.queue`: it takes a :class:`~sqlq_orm.db.context.QueueContext` (or
anything carrying one, like a :class:`~sqlq_orm.Queue`).
"""

from sqlq_orm.ops.stats.collect import collect_stats, collect_workers, percentile_rank
from sqlq_orm.ops.stats.queries import StatsQueries
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
    WorkerState,
    WorkerView,
)

__all__ = [
    "DEFAULT_STUCK_LIMIT",
    "DEFAULT_TOP_N",
    "DEFAULT_WINDOWS",
    "DEFAULT_WORKER_STALE_SECONDS",
    "DurationStats",
    "ErrorCodeCount",
    "HeldJob",
    "LeaseHealth",
    "QueueLatency",
    "QueueStats",
    "RetentionStatus",
    "RetryBucket",
    "StateCounts",
    "StatsQueries",
    "Throughput",
    "TypeHealth",
    "WorkerState",
    "WorkerView",
    "WorkersReport",
    "collect_stats",
    "collect_workers",
    "percentile_rank",
]
