""":class:`AsyncQueue`: the :class:`~sqlq_orm.Queue`'s own code, awaited.

An ``AsyncQueue`` holds an ordinary :class:`~sqlq_orm.Queue` on its engine's
``sync_engine`` and runs each operation through SQLAlchemy's greenlet bridge
(:func:`sqlalchemy.util.greenlet_spawn`, what ``AsyncConnection.run_sync`` does): the
synchronous code runs unchanged, and wherever the driver would block (a query, a
commit, a pool checkout) the greenlet hands control back to the event loop. The SQL,
the validation, the fencing and the errors are therefore not copies: they are the
synchronous queue's, statement for statement.

What must not block the loop's thread does not: the driver's IO is awaited; SQLite's
per-engine write turns are an :class:`asyncio.Lock` for async engines
(:class:`~sqlq_orm.db.write_locks.LoopTurns`); the in-process wake-ups only set
``threading.Event`` objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session
from sqlalchemy.util import greenlet_spawn

from sqlq_orm.core import validation
from sqlq_orm.core.backoff import RetryPolicy
from sqlq_orm.core.lease import Lease
from sqlq_orm.core.schedule import Schedule
from sqlq_orm.db.backends import Backend
from sqlq_orm.db.clock import Clock
from sqlq_orm.db.context import QueueContext
from sqlq_orm.db.tables import Models
from sqlq_orm.errors import InvalidInput, LeaseLost, MaxRuntimeExceeded
from sqlq_orm.ops.retention import PruneResult, RetentionPolicy
from sqlq_orm.ops.stats import QueueStats
from sqlq_orm.ops.timeline import RelatedJob
from sqlq_orm.queue.core import (
    DEFAULT_HEARTBEAT_EVENT_INTERVAL,
    DEFAULT_LEASE_SECONDS,
    SYSTEM_ACTOR,
)
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import (
    EnqueuedJob,
    JobFailure,
    JobSpec,
    ScheduleState,
    SweepResult,
    TickResult,
)
from sqlq_orm.schema.states import JobStatus

_R = TypeVar("_R")


def _sync_session(session: AsyncSession | None, method: str) -> Session | None:
    """The synchronous :class:`Session` behind the caller's ``AsyncSession``."""
    if session is None:
        return None
    if not isinstance(session, AsyncSession):
        raise InvalidInput(
            f"AsyncQueue.{method} takes session= as an AsyncSession, got {session!r}; "
            "with a synchronous Session use sqlq_orm.Queue"
        )
    return session.sync_session


class AsyncQueue:
    """A job queue stored in the tables of ``models``, used from asyncio code.

    ``bind`` is an :class:`~sqlalchemy.ext.asyncio.AsyncEngine` (create it with
    :func:`sqlq_orm.create_async_engine`, or configure a host app's with
    :func:`sqlq_orm.configure_engine` on its ``sync_engine``) or an
    :class:`~sqlalchemy.ext.asyncio.async_sessionmaker` bound to one. The other
    arguments are :class:`~sqlq_orm.Queue`'s. Every operation is the synchronous
    queue's, awaited: same arguments, same results, same errors
    (:class:`~sqlq_orm.errors.InvalidInput`, :class:`~sqlq_orm.errors.LeaseLost`, ...).

    The synchronous queue on the same database is :attr:`sync_queue`; a
    :class:`~sqlq_orm.Worker` runs jobs enqueued here (its handlers may be
    ``async def``).
    """

    def __init__(
        self,
        bind: AsyncEngine | async_sessionmaker[Any],
        *,
        models: Models | None = None,
        clock: Clock | None = None,
        retry_policy: RetryPolicy | None = None,
        default_lease_seconds: int = DEFAULT_LEASE_SECONDS,
        payload_max_bytes: int = validation.DEFAULT_PAYLOAD_MAX_BYTES,
        heartbeat_event_interval: float = DEFAULT_HEARTBEAT_EVENT_INTERVAL,
    ) -> None:
        if isinstance(bind, async_sessionmaker):
            engine = bind.kw.get("bind")
            if not isinstance(engine, AsyncEngine):
                raise InvalidInput(
                    "the async_sessionmaker passed to AsyncQueue must be bound to an AsyncEngine"
                )
            bind = engine
        if not isinstance(bind, AsyncEngine):
            raise InvalidInput(
                f"AsyncQueue needs an AsyncEngine or an async_sessionmaker, got {bind!r}; "
                "for an Engine use sqlq_orm.Queue"
            )
        self.engine = bind
        self.sync_queue = Queue(
            bind.sync_engine,
            models=models,
            clock=clock,
            retry_policy=retry_policy,
            default_lease_seconds=default_lease_seconds,
            payload_max_bytes=payload_max_bytes,
            heartbeat_event_interval=heartbeat_event_interval,
        )

    @property
    def context(self) -> QueueContext:
        """The synchronous queue's :class:`~sqlq_orm.db.context.QueueContext`."""
        return self.sync_queue.context

    @property
    def models(self) -> Models:
        return self.sync_queue.models

    @property
    def clock(self) -> Clock:
        return self.sync_queue.clock

    @property
    def dialect(self) -> Backend:
        return self.sync_queue.dialect

    async def _run(self, operation: Callable[..., _R], /, *args: Any, **kwargs: Any) -> _R:
        """Run one synchronous queue operation in a greenlet on the running loop."""
        return await greenlet_spawn(operation, *args, **kwargs)

    # ------------------------------------------------------------------ enqueueing

    async def enqueue(
        self,
        type: str,
        payload: Any = None,
        *,
        session: AsyncSession | None = None,
        **options: Any,
    ) -> EnqueuedJob:
        """Enqueue one job; see :meth:`sqlq_orm.Queue.enqueue` for every option.

        With ``session`` (an :class:`~sqlalchemy.ext.asyncio.AsyncSession` on the
        queue's database) the job is written in the caller's transaction and commits
        or rolls back with it; idle workers of this process are woken on commit.
        Keyword options (``queue=``, ``priority=``, ``delay=``, ``dedupe_key=``, the
        app's own columns, ...) are passed to the synchronous queue as they are.
        """
        sync_session = _sync_session(session, "enqueue")
        return await self._run(
            self.sync_queue.enqueue, type, payload, session=sync_session, **options
        )

    async def enqueue_many(
        self,
        jobs: Iterable[JobSpec | Mapping[str, Any]],
        *,
        session: AsyncSession | None = None,
        **options: Any,
    ) -> list[int]:
        """Enqueue many jobs in one transaction; see :meth:`sqlq_orm.Queue.enqueue_many`."""
        sync_session = _sync_session(session, "enqueue_many")
        return await self._run(self.sync_queue.enqueue_many, jobs, session=sync_session, **options)

    async def enqueue_chain(
        self, jobs: Sequence[JobSpec | Mapping[str, Any]], *, session: AsyncSession | None = None
    ) -> list[int]:
        """Enqueue jobs that run one after another; see :meth:`sqlq_orm.Queue.enqueue_chain`."""
        sync_session = _sync_session(session, "enqueue_chain")
        return await self._run(self.sync_queue.enqueue_chain, jobs, session=sync_session)

    async def enqueue_fan_in(
        self,
        parents: Sequence[JobSpec | Mapping[str, Any]],
        then: JobSpec | Mapping[str, Any],
        *,
        session: AsyncSession | None = None,
    ) -> list[int]:
        """Enqueue jobs and one that runs after all of them; see
        :meth:`sqlq_orm.Queue.enqueue_fan_in`."""
        sync_session = _sync_session(session, "enqueue_fan_in")
        return await self._run(self.sync_queue.enqueue_fan_in, parents, then, session=sync_session)

    # ------------------------------------------------------------------ claiming and leases

    async def claim(
        self,
        worker_id: str,
        *,
        queues: Sequence[str] = ("default",),
        limit: int = 1,
        lease_seconds: int | None = None,
        start: bool = False,
    ) -> list[Lease]:
        """Claim up to ``limit`` due jobs; see :meth:`sqlq_orm.Queue.claim`."""
        return await self._run(
            self.sync_queue.claim,
            worker_id,
            queues=queues,
            limit=limit,
            lease_seconds=lease_seconds,
            start=start,
        )

    async def start(self, lease: Lease) -> Lease:
        """Mark a claimed job running; see :meth:`sqlq_orm.Queue.start`."""
        return await self._run(self.sync_queue.start, lease)

    async def heartbeat(self, lease: Lease, lease_seconds: int | None = None) -> int:
        """Extend a lease; see :meth:`sqlq_orm.Queue.heartbeat`."""
        return await self._run(self.sync_queue.heartbeat, lease, lease_seconds)

    async def heartbeat_many(
        self, leases: Sequence[Lease], lease_seconds: int | None = None
    ) -> dict[int, int | LeaseLost | MaxRuntimeExceeded]:
        """Extend many leases at once; see :meth:`sqlq_orm.Queue.heartbeat_many`."""
        return await self._run(self.sync_queue.heartbeat_many, leases, lease_seconds)

    async def succeed(self, lease: Lease, result_ref: str | None = None) -> None:
        """Record success; see :meth:`sqlq_orm.Queue.succeed`."""
        await self._run(self.sync_queue.succeed, lease, result_ref)

    async def succeed_many(self, leases: Sequence[Lease]) -> list[Lease]:
        """Record many successes; see :meth:`sqlq_orm.Queue.succeed_many`."""
        return await self._run(self.sync_queue.succeed_many, leases)

    async def fail(
        self,
        lease: Lease,
        error_code: str,
        error_detail: str | None = None,
        *,
        retryable: bool = True,
    ) -> JobStatus:
        """Record a failure (retry or fail for good); see :meth:`sqlq_orm.Queue.fail`."""
        return await self._run(
            self.sync_queue.fail, lease, error_code, error_detail, retryable=retryable
        )

    async def fail_many(self, failures: Sequence[JobFailure]) -> dict[int, JobStatus | None]:
        """Record many failures; see :meth:`sqlq_orm.Queue.fail_many`."""
        return await self._run(self.sync_queue.fail_many, failures)

    async def release(self, lease: Lease, reason: str = "released by worker") -> None:
        """Give a job back unrun; see :meth:`sqlq_orm.Queue.release`."""
        await self._run(self.sync_queue.release, lease, reason)

    async def release_many(
        self, leases: Sequence[Lease], reason: str = "released by worker"
    ) -> list[Lease]:
        """Give many jobs back; see :meth:`sqlq_orm.Queue.release_many`."""
        return await self._run(self.sync_queue.release_many, leases, reason)

    # ------------------------------------------------------------------ maintenance, admin

    async def sweep(
        self, *, batch_size: int = 100, max_batches: int | None = None, actor: str = SYSTEM_ACTOR
    ) -> SweepResult:
        """Reclaim expired leases in batches; see :meth:`sqlq_orm.Queue.sweep`."""
        return await self._run(
            self.sync_queue.sweep, batch_size=batch_size, max_batches=max_batches, actor=actor
        )

    async def cancel(
        self, job_id: int, *, actor: str = SYSTEM_ACTOR, reason: str | None = None
    ) -> None:
        """Cancel a job; see :meth:`sqlq_orm.Queue.cancel`."""
        await self._run(self.sync_queue.cancel, job_id, actor=actor, reason=reason)

    async def retry(self, job_id: int, *, actor: str = SYSTEM_ACTOR) -> None:
        """Queue a failed or cancelled job again; see :meth:`sqlq_orm.Queue.retry`."""
        await self._run(self.sync_queue.retry, job_id, actor=actor)

    async def get_job(self, job_id: int) -> Any:
        """The job with its ``attempts`` and ``events`` loaded; see
        :meth:`sqlq_orm.Queue.get_job`."""
        return await self._run(self.sync_queue.get_job, job_id)

    async def dependencies_of(self, job_id: int) -> tuple[list[RelatedJob], list[RelatedJob]]:
        """``(parents, children)`` of a job; see :meth:`sqlq_orm.Queue.dependencies_of`."""
        return await self._run(self.sync_queue.dependencies_of, job_id)

    async def counts_by_status(self) -> dict[str, int]:
        """Jobs per status; see :meth:`sqlq_orm.Queue.counts_by_status`."""
        return await self._run(self.sync_queue.counts_by_status)

    async def stats(
        self,
        *,
        top_n: int = 10,
        stuck_limit: int = 10,
        windows: Sequence[int] = (300, 3600),
        worker_stale_seconds: int = 60,
        policy: RetentionPolicy | None = None,
    ) -> QueueStats:
        """Counts, stuck jobs, retries, latency and more; see :meth:`sqlq_orm.Queue.stats`."""
        return await self._run(
            self.sync_queue.stats,
            top_n=top_n,
            stuck_limit=stuck_limit,
            windows=windows,
            worker_stale_seconds=worker_stale_seconds,
            policy=policy,
        )

    async def prune(
        self,
        policy: RetentionPolicy | None = None,
        *,
        batch_size: int = 5000,
        max_batches: int | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        """Delete finished jobs past their retention; see :meth:`sqlq_orm.Queue.prune`."""
        return await self._run(
            self.sync_queue.prune,
            policy,
            batch_size=batch_size,
            max_batches=max_batches,
            dry_run=dry_run,
        )

    # ------------------------------------------------------------------ workers, schedules

    async def register_worker(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
    ) -> None:
        """Record a worker; see :meth:`sqlq_orm.Queue.register_worker`."""
        await self._run(
            self.sync_queue.register_worker,
            worker_id,
            hostname=hostname,
            pid=pid,
            queues=queues,
            concurrency=concurrency,
        )

    async def deregister_worker(self, worker_id: str) -> None:
        """Forget a worker; see :meth:`sqlq_orm.Queue.deregister_worker`."""
        await self._run(self.sync_queue.deregister_worker, worker_id)

    async def register_schedules(self, schedules: Iterable[Schedule]) -> None:
        """Record recurring schedules; see :meth:`sqlq_orm.Queue.register_schedules`."""
        await self._run(self.sync_queue.register_schedules, schedules)

    async def enqueue_due_slots(self, schedules: Mapping[str, Schedule]) -> TickResult:
        """Enqueue the schedules' due slots; see :meth:`sqlq_orm.Queue.enqueue_due_slots`."""
        return await self._run(self.sync_queue.enqueue_due_slots, schedules)

    async def list_schedules(self) -> list[ScheduleState]:
        """The recorded schedules; see :meth:`sqlq_orm.Queue.list_schedules`."""
        return await self._run(self.sync_queue.list_schedules)

    async def remove_schedule(self, name: str) -> bool:
        """Remove a schedule; see :meth:`sqlq_orm.Queue.remove_schedule`."""
        return await self._run(self.sync_queue.remove_schedule, name)
