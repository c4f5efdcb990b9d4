"""What the stats and the timeline report: plain, frozen dataclasses, no database.

:class:`QueueStats` is the answer :func:`~sqlq_orm.ops.stats.collect.collect_stats`
builds; the other classes are its parts, one per question (see :mod:`sqlq_orm.ops.stats`).
:class:`WorkerState` and :class:`WorkerView` are shared with the job timeline
(:mod:`sqlq_orm.ops.timeline`). The renderers in :mod:`sqlq_orm.ops.render` read these.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

DEFAULT_WINDOWS: tuple[int, ...] = (300, 3600)
"""Throughput windows in seconds: the last 5 and 60 minutes."""

DEFAULT_WORKER_STALE_SECONDS = 60
"""A worker not seen for longer than this is reported as silent (maybe dead)."""

DEFAULT_TOP_N = 10
DEFAULT_STUCK_LIMIT = 10


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
    pool: dict[str, Any] | None = None
    """The worker's pool (``kind``; a process pool's ``children`` with their ``pid`` and
    ``jobs``, and its ``recycles``, ``crashes`` and ``deadline_kills``); None from a
    worker that predates revision sqlq_0015."""

    @property
    def pool_kind(self) -> str:
        """``thread`` or ``process`` (``thread`` for a worker that does not say)."""
        return str((self.pool or {}).get("kind", "thread"))

    @property
    def pool_summary(self) -> str:
        """One line for operators: ``process: 2 children (pid 41 ran 7 jobs, pid 42 ran
        3); 1 recycled, 1 crashed, 0 killed at deadline``; ``thread`` for threads."""
        pool = self.pool or {}
        if "children" not in pool:
            return self.pool_kind
        children = ", ".join(
            f"pid {child.get('pid')} ran {child.get('jobs', 0)} jobs" for child in pool["children"]
        )
        return (
            f"{self.pool_kind}: {len(pool['children'])} children ({children or 'none'}); "
            f"{pool.get('recycles', 0)} recycled, {pool.get('crashes', 0)} crashed, "
            f"{pool.get('deadline_kills', 0)} killed at deadline"
        )

    @classmethod
    def from_row(cls, row: Any, now: int, stale_seconds: int, held_jobs: int) -> WorkerView:
        """The view of one worker-registry row, seen at ``now``."""
        last_seen_at = int(row.last_seen_at)
        return cls(
            id=row.id,
            hostname=row.hostname,
            pid=int(row.pid),
            queues=row.queues,
            concurrency=int(row.concurrency),
            started_at=int(row.started_at),
            last_seen_at=last_seen_at,
            seen_seconds_ago=max(0, now - last_seen_at),
            state=worker_state(last_seen_at, now, stale_seconds),
            held_jobs=held_jobs,
            pool=_pool_of(getattr(row, "pool", None)),
        )


def _pool_of(text: str | None) -> dict[str, Any] | None:
    """A worker row's pool column, parsed; None when absent or not a JSON object."""
    if not text:
        return None
    try:
        pool = json.loads(text)
    except ValueError:
        return None
    return pool if isinstance(pool, dict) else None


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
    paused_queues: list[str] = field(default_factory=list)
    """Queues an operator paused (:meth:`Queue.pause_queue`): no worker starts their jobs."""
    rate_limits: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Rate-limited queues (:meth:`Queue.set_rate_limit`): name -> (starts, per seconds)."""

    @property
    def oldest_ready_latency_seconds(self) -> int:
        """The worst queue latency over all queues (0 when nothing is ready)."""
        return max((q.latency_seconds for q in self.latency), default=0)


@dataclass(frozen=True)
class WorkersReport:
    """The workers' part of :class:`QueueStats`, as of one instant
    (:func:`~sqlq_orm.ops.stats.collect_workers`)."""

    now: int
    workers: list[WorkerView]
    oldest_held: list[HeldJob]
    worker_stale_seconds: int


def worker_state(last_seen_at: int | None, now: int, stale_seconds: int) -> WorkerState:
    """ALIVE, SILENT (not seen for over ``stale_seconds``) or UNREGISTERED (no row)."""
    if last_seen_at is None:
        return WorkerState.UNREGISTERED
    if now - last_seen_at > stale_seconds:
        return WorkerState.SILENT
    return WorkerState.ALIVE
