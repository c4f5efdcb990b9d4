"""sqlq_orm: a job queue inside your application's own database, on SQLAlchemy 2.x.

Leases with heartbeats, fencing tokens, retries with backoff, a per-job max runtime,
and a queryable history of every attempt and event. SQLite by default; PostgreSQL
(``FOR UPDATE SKIP LOCKED``) for many workers on many machines.
"""

import importlib
from typing import TYPE_CHECKING, Any

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
    ModelsMissColumns,
    ParentNotSucceeded,
    ResultDoesNotMatch,
    ResultNotReady,
    Snooze,
    SqlqError,
    SqlqWarning,
    TransactionRolledBack,
    WaitTimeout,
)

if TYPE_CHECKING:
    from sqlq_orm import migrate
    from sqlq_orm.core.backoff import FixedBackoff, LinearBackoff, RetryPolicy
    from sqlq_orm.core.lease import Lease
    from sqlq_orm.core.results import JobResult
    from sqlq_orm.core.schedule import Missed, Schedule
    from sqlq_orm.db.clock import Clock, DatabaseClock, PinnedClock
    from sqlq_orm.db.engine import configure_engine, create_async_engine, create_engine
    from sqlq_orm.db.tables import Models
    from sqlq_orm.ops import invariants
    from sqlq_orm.ops.joblist import JobFilter
    from sqlq_orm.ops.retention import PruneResult, RetentionPolicy
    from sqlq_orm.ops.stats import QueueStats
    from sqlq_orm.ops.timeline import JobTimeline, RelatedJob, job_timeline
    from sqlq_orm.queue.aio import AsyncQueue
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

_LAZY: dict[str, tuple[str, str | None]] = {
    "migrate": ("sqlq_orm.migrate", None),
    "invariants": ("sqlq_orm.ops.invariants", None),
    "FixedBackoff": ("sqlq_orm.core.backoff", "FixedBackoff"),
    "LinearBackoff": ("sqlq_orm.core.backoff", "LinearBackoff"),
    "RetryPolicy": ("sqlq_orm.core.backoff", "RetryPolicy"),
    "Lease": ("sqlq_orm.core.lease", "Lease"),
    "JobResult": ("sqlq_orm.core.results", "JobResult"),
    "Missed": ("sqlq_orm.core.schedule", "Missed"),
    "Schedule": ("sqlq_orm.core.schedule", "Schedule"),
    "Clock": ("sqlq_orm.db.clock", "Clock"),
    "DatabaseClock": ("sqlq_orm.db.clock", "DatabaseClock"),
    "PinnedClock": ("sqlq_orm.db.clock", "PinnedClock"),
    "configure_engine": ("sqlq_orm.db.engine", "configure_engine"),
    "create_async_engine": ("sqlq_orm.db.engine", "create_async_engine"),
    "create_engine": ("sqlq_orm.db.engine", "create_engine"),
    "Models": ("sqlq_orm.db.tables", "Models"),
    "JobFilter": ("sqlq_orm.ops.joblist", "JobFilter"),
    "PruneResult": ("sqlq_orm.ops.retention", "PruneResult"),
    "RetentionPolicy": ("sqlq_orm.ops.retention", "RetentionPolicy"),
    "QueueStats": ("sqlq_orm.ops.stats", "QueueStats"),
    "JobTimeline": ("sqlq_orm.ops.timeline", "JobTimeline"),
    "RelatedJob": ("sqlq_orm.ops.timeline", "RelatedJob"),
    "job_timeline": ("sqlq_orm.ops.timeline", "job_timeline"),
    "AsyncQueue": ("sqlq_orm.queue.aio", "AsyncQueue"),
    "Queue": ("sqlq_orm.queue.queue", "Queue"),
    "BulkResult": ("sqlq_orm.queue.types", "BulkResult"),
    "EnqueuedJob": ("sqlq_orm.queue.types", "EnqueuedJob"),
    "JobFailure": ("sqlq_orm.queue.types", "JobFailure"),
    "JobSpec": ("sqlq_orm.queue.types", "JobSpec"),
    "QueueState": ("sqlq_orm.queue.types", "QueueState"),
    "ScheduleState": ("sqlq_orm.queue.types", "ScheduleState"),
    "SweepResult": ("sqlq_orm.queue.types", "SweepResult"),
    "TickResult": ("sqlq_orm.queue.types", "TickResult"),
    "Scheduler": ("sqlq_orm.scheduler", "Scheduler"),
    "QueueControlMixin": ("sqlq_orm.schema.controls", "QueueControlMixin"),
    "JobAttemptMixin": ("sqlq_orm.schema.mixins", "JobAttemptMixin"),
    "JobDependencyMixin": ("sqlq_orm.schema.mixins", "JobDependencyMixin"),
    "JobEventMixin": ("sqlq_orm.schema.mixins", "JobEventMixin"),
    "JobMixin": ("sqlq_orm.schema.mixins", "JobMixin"),
    "ScheduleMixin": ("sqlq_orm.schema.mixins", "ScheduleMixin"),
    "WorkerMixin": ("sqlq_orm.schema.mixins", "WorkerMixin"),
    "Base": ("sqlq_orm.schema.models", "Base"),
    "Job": ("sqlq_orm.schema.models", "Job"),
    "JobAttempt": ("sqlq_orm.schema.models", "JobAttempt"),
    "JobDependency": ("sqlq_orm.schema.models", "JobDependency"),
    "JobEvent": ("sqlq_orm.schema.models", "JobEvent"),
    "QueueControl": ("sqlq_orm.schema.models", "QueueControl"),
    "ScheduleRecord": ("sqlq_orm.schema.models", "ScheduleRecord"),
    "WorkerRecord": ("sqlq_orm.schema.models", "WorkerRecord"),
    "AttemptStatus": ("sqlq_orm.schema.states", "AttemptStatus"),
    "Event": ("sqlq_orm.schema.states", "Event"),
    "JobStatus": ("sqlq_orm.schema.states", "JobStatus"),
    "Task": ("sqlq_orm.tasks", "Task"),
    "TaskRegistry": ("sqlq_orm.tasks", "TaskRegistry"),
    "AsyncJobContext": ("sqlq_orm.worker.handlers", "AsyncJobContext"),
    "HandlerRegistry": ("sqlq_orm.worker.handlers", "HandlerRegistry"),
    "JobContext": ("sqlq_orm.worker.handlers", "JobContext"),
    "Worker": ("sqlq_orm.worker.runtime", "Worker"),
    "WorkerStats": ("sqlq_orm.worker.runtime", "WorkerStats"),
}
"""Where each public name lives: (module, attribute), None for a module itself.

``import sqlq_orm`` imports only the exceptions; every other name is imported on first
use (``sqlq_orm.Queue``, ``from sqlq_orm import Worker``) and kept. So the package
costs what is used: a web process that enqueues never loads the worker, Alembic (only
:mod:`sqlq_orm.migrate` needs it), a dialect it does not talk to, or SQLAlchemy's
asyncio extension (``AsyncQueue``: it needs greenlet, which a synchronous install does
not have; ``sqlq_orm[asyncpg]``, ``[aiosqlite]`` and ``[aiomysql]`` bring it).
``tests/unit/test_startup_imports.py`` checks what stays out."""


def __getattr__(name: str) -> Any:
    """A name of :data:`_LAZY`, imported on first use (then a plain module attribute)."""
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'sqlq_orm' has no attribute {name!r}") from None
    # Any use past the exceptions (a host app's models, its env.py, a queue) installs
    # the guard that keeps a job table's history through Alembic's SQLite rebuilds,
    # on every SQLite engine, whoever made it: a stock env.py makes its own.
    importlib.import_module("sqlq_orm.db.backends.sqlite_rebuilds")
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "ModelsMissColumns",
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
    "ResultDoesNotMatch",
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
