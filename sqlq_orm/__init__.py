"""sqlq_orm: a job queue inside your application's own database, on SQLAlchemy 2.x.

Leases with heartbeats, fencing tokens, retries with backoff, a per-job max runtime,
and a queryable history of every attempt and event. SQLite by default; PostgreSQL
(``FOR UPDATE SKIP LOCKED``) for many workers on many machines.
"""

from typing import TYPE_CHECKING, Any

from sqlq_orm import migrate  # modules: sqlq_orm.migrate.upgrade(url)
from sqlq_orm.core.backoff import FixedBackoff, LinearBackoff, RetryPolicy
from sqlq_orm.core.lease import Lease
from sqlq_orm.core.results import JobResult
from sqlq_orm.core.schedule import Missed, Schedule
from sqlq_orm.db.clock import Clock, DatabaseClock, PinnedClock
from sqlq_orm.db.engine import configure_engine, create_async_engine, create_engine
from sqlq_orm.db.tables import Models
from sqlq_orm.errors import (
    DedupeConflict,
    HandlersStuck,
    InvalidInput,
    InvalidTransition,
    JobError,
    JobFailed,
    JobNotFound,
    LeaseLost,
    MaxRuntimeExceeded,
    MaxRuntimeInterrupt,
    ParentNotSucceeded,
    ResultNotReady,
    Snooze,
    SqlqError,
    SqlqWarning,
    TransactionRolledBack,
    WaitTimeout,
)
from sqlq_orm.ops import invariants
from sqlq_orm.ops.joblist import JobFilter
from sqlq_orm.ops.retention import PruneResult, RetentionPolicy
from sqlq_orm.ops.stats import QueueStats
from sqlq_orm.ops.timeline import JobTimeline, RelatedJob, job_timeline
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import (
    BulkResult,
    EnqueuedJob,
    JobFailure,
    JobSpec,
    QueueState,
    ScheduleState,
    SweepResult,
    TickResult,
)
from sqlq_orm.scheduler import Scheduler
from sqlq_orm.schema.controls import QueueControlMixin
from sqlq_orm.schema.mixins import (
    JobAttemptMixin,
    JobDependencyMixin,
    JobEventMixin,
    JobMixin,
    ScheduleMixin,
    WorkerMixin,
)
from sqlq_orm.schema.models import (
    Base,
    Job,
    JobAttempt,
    JobDependency,
    JobEvent,
    QueueControl,
    ScheduleRecord,
    WorkerRecord,
)
from sqlq_orm.schema.states import AttemptStatus, Event, JobStatus
from sqlq_orm.tasks import Task, TaskRegistry
from sqlq_orm.worker.handlers import AsyncJobContext, HandlerRegistry, JobContext
from sqlq_orm.worker.runtime import Worker, WorkerStats

if TYPE_CHECKING:
    from sqlq_orm.queue.aio import AsyncQueue


def __getattr__(name: str) -> Any:
    """``sqlq_orm.AsyncQueue``, imported on first use: SQLAlchemy's asyncio extension
    needs greenlet, which a synchronous install does not have (``sqlq_orm[asyncpg]``,
    ``[aiosqlite]`` and ``[aiomysql]`` bring it)."""
    if name == "AsyncQueue":
        from sqlq_orm.queue.aio import AsyncQueue

        return AsyncQueue
    raise AttributeError(f"module 'sqlq_orm' has no attribute {name!r}")


__all__ = [
    "AsyncJobContext",
    "AsyncQueue",
    "create_async_engine",
    "AttemptStatus",
    "Base",
    "BulkResult",
    "Clock",
    "DatabaseClock",
    "DedupeConflict",
    "EnqueuedJob",
    "Event",
    "HandlerRegistry",
    "HandlersStuck",
    "InvalidInput",
    "InvalidTransition",
    "ParentNotSucceeded",
    "Job",
    "JobAttempt",
    "JobAttemptMixin",
    "JobContext",
    "JobDependency",
    "JobDependencyMixin",
    "JobError",
    "JobEvent",
    "JobEventMixin",
    "JobFailed",
    "JobFailure",
    "JobFilter",
    "JobMixin",
    "JobNotFound",
    "JobResult",
    "JobSpec",
    "JobTimeline",
    "JobStatus",
    "Lease",
    "LeaseLost",
    "MaxRuntimeExceeded",
    "MaxRuntimeInterrupt",
    "Missed",
    "Models",
    "PinnedClock",
    "PruneResult",
    "Queue",
    "QueueControl",
    "QueueControlMixin",
    "QueueState",
    "QueueStats",
    "RelatedJob",
    "RetentionPolicy",
    "ResultNotReady",
    "RetryPolicy",
    "FixedBackoff",
    "LinearBackoff",
    "Schedule",
    "ScheduleMixin",
    "ScheduleRecord",
    "ScheduleState",
    "Snooze",
    "Scheduler",
    "SqlqError",
    "SqlqWarning",
    "TransactionRolledBack",
    "SweepResult",
    "Task",
    "TaskRegistry",
    "TickResult",
    "WaitTimeout",
    "Worker",
    "WorkerMixin",
    "WorkerRecord",
    "WorkerStats",
    "configure_engine",
    "create_engine",
    "invariants",
    "job_timeline",
    "migrate",
]
