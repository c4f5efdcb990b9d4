"""The queue: every operation on jobs, leases and workers, behind one class.

Every state change writes its event in the same transaction. Every call made on
behalf of a lease is fenced by the lease token and raises
:class:`~sqlq_orm.errors.LeaseLost` (changing nothing) when the token is stale."""

from __future__ import annotations

from collections.abc import Sequence

from sqlq_orm.ops import retention
from sqlq_orm.ops.retention import PruneResult, RetentionPolicy
from sqlq_orm.ops.stats import QueueStats, collect_stats
from sqlq_orm.queue.admin import Administration
from sqlq_orm.queue.bulk import BulkActions
from sqlq_orm.queue.claiming import Claiming
from sqlq_orm.queue.controls import QueueControls
from sqlq_orm.queue.enqueue import Enqueueing
from sqlq_orm.queue.lease_batches import BatchedLeaseCalls
from sqlq_orm.queue.leases import LeaseCalls
from sqlq_orm.queue.registry import WorkerRegistry
from sqlq_orm.queue.results import Results
from sqlq_orm.queue.schedule_controls import ScheduleControls
from sqlq_orm.queue.snoozing import Snoozing
from sqlq_orm.queue.sweeper import Sweeping
from sqlq_orm.queue.wakeups import JobArrivals


class Queue(
    ScheduleControls,  # (and Schedules) before Enqueueing, which they extend
    Enqueueing,
    Claiming,
    Snoozing,  # before LeaseCalls, which it extends
    LeaseCalls,
    BatchedLeaseCalls,
    Sweeping,
    BulkActions,
    Administration,
    WorkerRegistry,
    JobArrivals,
    Results,
    QueueControls,
):
    """A job queue stored in the tables of ``models`` on ``bind``'s database.

    ``bind`` is an :class:`~sqlalchemy.engine.Engine` (configure it with
    :func:`sqlq_orm.configure_engine`, or create it with :func:`sqlq_orm.create_engine`)
    or a :class:`~sqlalchemy.orm.sessionmaker` bound to one. ``clock`` defaults to the
    database's clock; tests pass a :class:`~sqlq_orm.db.clock.PinnedClock`.

    The operations come in groups, one module each: :mod:`~sqlq_orm.queue.enqueue`,
    :mod:`~sqlq_orm.queue.claiming`, :mod:`~sqlq_orm.queue.leases`,
    :mod:`~sqlq_orm.queue.lease_batches`,
    :mod:`~sqlq_orm.queue.sweeper`, :mod:`~sqlq_orm.queue.admin`, :mod:`~sqlq_orm.queue.bulk`,
    :mod:`~sqlq_orm.queue.registry`, :mod:`~sqlq_orm.queue.wakeups`,
    :mod:`~sqlq_orm.queue.results`,
    :mod:`~sqlq_orm.queue.controls` and
    :mod:`~sqlq_orm.queue.schedules` (:mod:`~sqlq_orm.queue.schedule_controls`); stats and
    pruning come from :mod:`sqlq_orm.ops`.
    """

    def stats(
        self,
        *,
        top_n: int = 10,
        stuck_limit: int = 10,
        windows: Sequence[int] = (300, 3600),
        worker_stale_seconds: int = 60,
        policy: RetentionPolicy | None = None,
    ) -> QueueStats:
        """Counts, stuck jobs, retries, failure reasons, latency, throughput, retention.

        Read-only (never takes SQLite's write lock); returns
        :class:`~sqlq_orm.ops.stats.views.QueueStats`. See
        :func:`sqlq_orm.ops.stats.collect.collect_stats` for the arguments.
        """
        return collect_stats(
            self,
            top_n=top_n,
            stuck_limit=stuck_limit,
            windows=windows,
            worker_stale_seconds=worker_stale_seconds,
            policy=policy,
        )

    def prune(
        self,
        policy: RetentionPolicy | None = None,
        *,
        batch_size: int = 5000,
        max_batches: int | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        """Delete finished jobs past their retention, in batches; return counts per status.

        ``policy`` is a :class:`~sqlq_orm.ops.retention.RetentionPolicy` (default: 30 days
        SUCCEEDED and CANCELLED, 90 days FAILED). Returns
        :class:`~sqlq_orm.ops.retention.PruneResult`; see :func:`sqlq_orm.ops.retention.prune`.
        """
        return retention.prune(
            self, policy, batch_size=batch_size, max_batches=max_batches, dry_run=dry_run
        )
