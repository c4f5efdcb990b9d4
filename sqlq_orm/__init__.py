"""sqlq_orm: a job queue inside your application's own database, on SQLAlchemy 2.x.

Leases with heartbeats, fencing tokens, retries with backoff, a per-job max runtime,
and a queryable history of every attempt and event. SQLite by default; PostgreSQL
(``FOR UPDATE SKIP LOCKED``) for many workers on many machines.
"""

from sqlq_orm import invariants, migrate  # modules: sqlq_orm.migrate.upgrade(url)
from sqlq_orm.clock import Clock, DatabaseClock, PinnedClock
from sqlq_orm.dialects import configure_engine, create_engine
from sqlq_orm.errors import (
    InvalidInput,
    InvalidTransition,
    JobError,
    JobNotFound,
    LeaseLost,
    MaxRuntimeExceeded,
    SqlqError,
)
from sqlq_orm.handlers import HandlerRegistry, JobContext
from sqlq_orm.lease import Lease
from sqlq_orm.mixins import JobAttemptMixin, JobEventMixin, JobMixin, WorkerMixin
from sqlq_orm.models import Base, Job, JobAttempt, JobEvent, WorkerRecord
from sqlq_orm.observability import JobTimeline, QueueStats, job_timeline
from sqlq_orm.retention import PruneResult, RetentionPolicy
from sqlq_orm.retry import RetryPolicy
from sqlq_orm.service import EnqueuedJob, JobSpec, Models, Queue, SweepResult
from sqlq_orm.states import AttemptStatus, Event, JobStatus
from sqlq_orm.worker import Worker, WorkerStats

__all__ = [
    "AttemptStatus",
    "Base",
    "Clock",
    "DatabaseClock",
    "EnqueuedJob",
    "Event",
    "HandlerRegistry",
    "InvalidInput",
    "InvalidTransition",
    "Job",
    "JobAttempt",
    "JobAttemptMixin",
    "JobContext",
    "JobError",
    "JobEvent",
    "JobEventMixin",
    "JobMixin",
    "JobNotFound",
    "JobSpec",
    "JobTimeline",
    "JobStatus",
    "Lease",
    "LeaseLost",
    "MaxRuntimeExceeded",
    "Models",
    "PinnedClock",
    "PruneResult",
    "Queue",
    "QueueStats",
    "RetentionPolicy",
    "RetryPolicy",
    "SqlqError",
    "SweepResult",
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
