"""What handler authors see: the :class:`HandlerRegistry` and the :class:`JobContext`.

A handler is a plain function that takes a :class:`JobContext`::

    registry = HandlerRegistry()

    @registry.handler("send_email")
    def send_email(ctx: JobContext) -> None:
        mailer.send(**ctx.payload)

It succeeds by returning (a returned string is stored as the job's ``result_ref``)
and fails by raising: :class:`~sqlq_orm.errors.JobError` for a classified failure,
anything else for an unclassified one. A long handler polls ``ctx.should_stop`` (or
sleeps with ``ctx.sleep``) so it can stop early once its lease is gone.

A handler may also be a coroutine function; it then runs as a task on the worker's
event loop and gets an :class:`AsyncJobContext`::

    @registry.handler("fetch_feed")
    async def fetch_feed(ctx: AsyncJobContext) -> None:
        async with httpx.AsyncClient() as client:
            await client.get(ctx.payload["url"])
        await ctx.sleep(5)  # wakes early at shutdown

When the worker gives up on such a job (its lease is lost, it ran past its max
runtime, or shutdown's grace period ended) the task is cancelled.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from sqlq_orm.core import validation
from sqlq_orm.core.schedule import (
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_GRACE_SECONDS,
    Missed,
    Schedule,
)
from sqlq_orm.errors import InvalidInput
from sqlq_orm.worker.interrupt import HandlerThread

Handler = Callable[["JobContext"], Any]
"""A job handler: called with the job's context, in a worker thread (or, for a
coroutine function, awaited as a task on the worker's event loop)."""


def is_coroutine_handler(function: Any) -> bool:
    """Whether ``function`` is an ``async def`` handler (or an object whose
    ``__call__`` is one), to be awaited on the worker's event loop."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - an async __call__ is the test
    )


class HandlerRegistry:
    """Handlers by job type. The worker looks each claimed job's ``type`` up here."""

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        self._coroutines: set[str] = set()
        self._loop_cleanups: list[Callable[[], Awaitable[Any]]] = []
        self._schedules: dict[str, Schedule] = {}
        self._leases: dict[str, int] = {}
        for job_type, function in (handlers or {}).items():
            self.register(job_type, function)

    def worker_starting(self, queue: Any) -> None:
        """Called once by a :class:`~sqlq_orm.Worker` as it starts with this registry,
        after it registered itself; does nothing here. A
        :class:`~sqlq_orm.TaskRegistry` warns about stored jobs its tasks cannot run."""

    def set_lease_seconds(self, job_type: str, seconds: int) -> None:
        """Hold ``job_type``'s jobs with leases of ``seconds`` instead of the worker's
        ``lease_seconds`` (a task's ``lease=``): its heartbeats renew them for that long,
        and the worker heartbeats often enough for the shortest such lease."""
        self._leases[job_type] = validation.lease_seconds(seconds)

    def lease_seconds_of(self, job_type: str) -> int | None:
        """``job_type``'s own lease length, or None (the worker's)."""
        return self._leases.get(job_type)

    def retry_delay_of(self, job_type: str, retry_number: int) -> float | None:
        """Seconds before retry ``retry_number`` (1 for the first) of a ``job_type`` job
        the sweeper took back, or None for the queue's retry policy (always, here; a
        :class:`~sqlq_orm.TaskRegistry` answers with the task's ``backoff=``)."""
        return None

    @property
    def lease_lengths(self) -> dict[str, int]:
        """Every job type with its own lease length."""
        return dict(self._leases)

    def register(self, job_type: str, function: Handler) -> Handler:
        """Make ``function`` the handler of ``job_type``; return it unchanged."""
        if not isinstance(job_type, str) or not job_type.strip():
            raise InvalidInput(f"job type must be a non-empty string, got {job_type!r}")
        if not callable(function):
            raise InvalidInput(f"handler for {job_type!r} must be callable, got {function!r}")
        if job_type in self._handlers and self._handlers[job_type] is not function:
            raise InvalidInput(
                f"job type {job_type!r} already has a handler "
                f"({_name(self._handlers[job_type])}); register each type once"
            )
        self._handlers[job_type] = function
        if is_coroutine_handler(function):
            self._coroutines.add(job_type)
        return function

    def handler(self, job_type: str) -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`register`: ``@registry.handler("send_email")``."""

        def decorate(function: Handler) -> Handler:
            return self.register(job_type, function)

        return decorate

    def periodic(
        self,
        cron: str,
        job_type: str,
        *,
        payload: Any = None,
        name: str | None = None,
        queue: str = "default",
        timezone: str = "UTC",
        priority: int = 0,
        max_retries: int | None = None,
        max_runtime_seconds: int | None = None,
        missed: Missed | str = Missed.LATEST,
        grace_seconds: int = DEFAULT_GRACE_SECONDS,
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
    ) -> Schedule:
        """Enqueue ``job_type`` with ``payload`` at every slot of ``cron`` in ``timezone``.

        ``cron`` has five fields (``"0 3 * * *"``: 03:00 every day), read in the IANA
        ``timezone``; DST follows cron's rules (see :mod:`sqlq_orm.core.cron`). Workers
        using this registry run the scheduler, and each slot is enqueued once however
        many run. ``name`` (default: the job type) identifies the schedule; name each
        schedule of one type. After a downtime ``missed`` decides what happens to the
        slots that passed: ``"latest"`` (default) enqueues the most recent one once,
        ``"skip"`` enqueues none later than ``grace_seconds``, ``"all"`` enqueues every
        one up to ``catch_up_limit`` (the newest). Returns the
        :class:`~sqlq_orm.core.schedule.Schedule`; bad input raises
        :class:`~sqlq_orm.errors.InvalidInput`.
        """
        schedule = Schedule.declare(
            cron,
            job_type,
            payload=payload,
            name=name,
            queue=queue,
            timezone=timezone,
            priority=priority,
            max_retries=max_retries,
            max_runtime_seconds=max_runtime_seconds,
            missed=missed,
            grace_seconds=grace_seconds,
            catch_up_limit=catch_up_limit,
        )
        if schedule.name in self._schedules:
            raise InvalidInput(
                f"a schedule named {schedule.name!r} is already declared "
                f"({self._schedules[schedule.name].cron.expression!r}); pass name= to tell "
                "two schedules of one job type apart"
            )
        self._schedules[schedule.name] = schedule
        return schedule

    @property
    def schedules(self) -> list[Schedule]:
        """Every schedule declared with :meth:`periodic`, by name."""
        return [self._schedules[name] for name in sorted(self._schedules)]

    def get(self, job_type: str) -> Handler | None:
        """The handler of ``job_type``, or None if there is none."""
        return self._handlers.get(job_type)

    def on_loop_shutdown(
        self, cleanup: Callable[[], Awaitable[Any]]
    ) -> Callable[[], Awaitable[Any]]:
        """Await ``cleanup()`` on the worker's event loop just before it stops.

        For what ``async def`` handlers keep on that loop between jobs, such as an
        ``AsyncEngine``'s pooled connections (``await engine.dispose()``): they belong
        to the loop and cannot be closed once it is gone. Usable as a decorator.
        """
        if not callable(cleanup):
            raise InvalidInput(f"on_loop_shutdown needs a coroutine function, got {cleanup!r}")
        self._loop_cleanups.append(cleanup)
        return cleanup

    @property
    def loop_cleanups(self) -> list[Callable[[], Awaitable[Any]]]:
        """What :meth:`on_loop_shutdown` registered, in order."""
        return list(self._loop_cleanups)

    def is_coroutine(self, job_type: str) -> bool:
        """Whether ``job_type``'s handler is an ``async def`` (run on the event loop)."""
        return job_type in self._coroutines

    @property
    def has_coroutines(self) -> bool:
        """Whether any handler is an ``async def``: the worker then starts an event loop."""
        return bool(self._coroutines)

    @property
    def types(self) -> list[str]:
        """Every registered job type, sorted."""
        return sorted(self._handlers)

    def __contains__(self, job_type: object) -> bool:
        return job_type in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self.types)

    def __len__(self) -> int:
        return len(self._handlers)


def load_registry(spec: str) -> HandlerRegistry:
    """Import ``"package.module:attribute"`` and return the registry it names.

    The attribute defaults to ``registry``; a mapping of type to function is accepted
    too. The working directory is importable, as it is for ``python -m``.
    """
    module_name, _, attribute = spec.partition(":")
    attribute = attribute or "registry"
    if not module_name:
        raise InvalidInput(f"--handlers must look like 'package.module:registry', got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"cannot import handlers module {module_name!r}: {exc}") from None
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise InvalidInput(
            f"handlers module {module_name!r} has no attribute {attribute!r}"
        ) from None
    if isinstance(found, HandlerRegistry):
        return found
    if isinstance(found, Mapping):
        return HandlerRegistry(found)
    raise InvalidInput(
        f"{spec!r} is a {type(found).__name__}, not a HandlerRegistry or a mapping of "
        "job type to handler"
    )


def _name(function: Any) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', function)}"


class JobContext:
    """Everything a handler gets about the job it runs, and when to give up on it.

    ``should_stop`` turns true when the worker no longer holds the job: its lease was
    lost (reclaimed, cancelled, or no heartbeat got through for a whole lease), the job
    ran past its max runtime, or the worker gave it back at shutdown. Whatever the
    handler does after that is discarded, so a long handler should check it between
    steps. ``shutdown_requested`` turns true as soon as the worker starts shutting
    down; the job may still finish within the grace period.
    """

    def __init__(
        self,
        *,
        job_id: int,
        attempt: int,
        type: str,
        queue: str,
        payload: Any,
        payload_ref: str | None,
        worker_id: str,
        retries_left: int,
        lease_seconds: float,
        leased_at: float,
        shutdown: threading.Event,
        columns: Mapping[str, Any] | None = None,
        retry_count: int = 0,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.type = type
        self.queue = queue
        self.payload = payload
        self.payload_ref = payload_ref
        self.worker_id = worker_id
        self.retries_left = retries_left
        self.retry_count = retry_count
        """Retries spent before this run (0 on the first run; snoozes do not count)."""
        self.columns: Mapping[str, Any] = dict(columns or {})
        """The job's values for the columns the host app added (e.g. ``tenant_id``)."""
        self._lease_seconds = lease_seconds
        self._shutdown = shutdown
        # Made on the first sleep(): most handlers never sleep, and an Event per job
        # is a measurable share of a no-op job's cost.
        self._stop: threading.Event | None = None
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._renewed_at = leased_at  # monotonic time the claim was sent
        self._deadline: float | None = None  # monotonic time of the max runtime, if any
        self._thread: HandlerThread | None = None  # the handler's, while it runs
        self.runtime_exceeded = False
        """True once the job ran past its ``max_runtime_seconds``."""

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job_id}, attempt={self.attempt}, type={self.type!r}, "
            f"queue={self.queue!r})"
        )

    # -- set by the worker ---------------------------------------------------------

    def _renewed(self, at: float) -> None:
        """The lease was renewed by a heartbeat sent at monotonic time ``at``."""
        with self._lock:
            self._renewed_at = max(self._renewed_at, at)

    def _give_up(self, reason: str, *, runtime_exceeded: bool = False) -> bool:
        """Mark the job as no longer ours; return False if it already was.

        Past its max runtime, a handler running on a thread that has not returned a
        second later is interrupted (:class:`~sqlq_orm.errors.MaxRuntimeInterrupt`,
        see :mod:`sqlq_orm.worker.interrupt`).
        """
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            self.runtime_exceeded = self.runtime_exceeded or runtime_exceeded
            stop = self._stop
            thread = self._thread if runtime_exceeded else None
        if stop is not None:
            stop.set()
        if thread is not None:
            thread.interrupt_after()  # a grace to return by itself first
        return True

    def _in_thread(self) -> HandlerThread:
        """The handler is about to run on this thread: what stops it at its max runtime."""
        thread = HandlerThread()
        with self._lock:
            self._thread = thread
            late = self.runtime_exceeded
        if late:
            thread.interrupt()  # given up on at its deadline before it began
        return thread

    def _set_deadline(self, deadline: float | None) -> None:
        """The job's max runtime ends at monotonic time ``deadline`` (None: it has none)."""
        self._deadline = deadline

    def _check_fence(self) -> None:
        """Give up for good once no heartbeat has renewed the lease for a whole lease.

        Sticky on purpose: a handler told to stop may have cut its work short, so a
        late renewal must not turn its early return into a success.
        """
        with self._lock:
            overdue = time.monotonic() - self._renewed_at >= self._lease_seconds
        if overdue:
            self._give_up(f"no heartbeat got through for {self._lease_seconds:g}s (self-fenced)")

    @property
    def lease_seconds(self) -> float:
        """How long the job's lease lasts without a heartbeat (its task's ``lease=``, or
        the worker's ``lease_seconds``)."""
        return self._lease_seconds

    @property
    def _given_up(self) -> bool:
        """Whether the worker has already given up on the job (no time check)."""
        with self._lock:
            return self._reason is not None

    # -- read by the handler --------------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        """Why the worker gave up on this job, or None while it still holds it."""
        self._check_fence()
        with self._lock:
            return self._reason

    @property
    def should_stop(self) -> bool:
        """True once the worker no longer holds this job: stop, nothing will be recorded."""
        return self.stop_reason is not None

    @property
    def lease_lost(self) -> bool:
        """True once the lease is gone for any reason (same as ``should_stop``)."""
        return self.should_stop

    @property
    def time_left(self) -> float | None:
        """Seconds left before the job's ``max_runtime_seconds`` runs out (0.0 once
        past it), or None if it has no max runtime.

        For cooperative checks (huey's ``time_remaining``): a long handler can stop
        cleanly, or size its next step, before the worker gives up on it. Counted from
        just before the worker claimed (or started) the job, on this worker's
        monotonic clock, so it never overstates what is left.
        """
        deadline = self._deadline
        if deadline is None:
            return None
        return max(0.0, deadline - time.monotonic())

    @property
    def shutdown_requested(self) -> bool:
        """True once the worker is shutting down; finish soon or be released."""
        return self._shutdown.is_set()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early if the job should stop.

        Returns ``should_stop``, so a loop can read ``if ctx.sleep(1): return``.
        """
        deadline = time.monotonic() + seconds
        with self._lock:
            if self._stop is None:
                self._stop = threading.Event()
            stop = self._stop
        while not self.should_stop:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # Short waits: a self-fence is noticed by time passing, not by an event.
            stop.wait(min(left, 0.25))
        return self.should_stop


class AsyncJobContext(JobContext):
    """The :class:`JobContext` of an ``async def`` handler, which runs as a task.

    Everything :class:`JobContext` has, with :meth:`sleep` awaitable. When the worker
    gives up on the job (``should_stop`` turns true) the handler's task is cancelled:
    it sees :class:`asyncio.CancelledError` at its next ``await``, and whatever it does
    after that is discarded. A handler that swallows the cancellation keeps running
    and is abandoned like a stuck thread (it counts against ``max_abandoned``).
    """

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None

    def _attach(self, task: asyncio.Task[Any]) -> None:
        """The job's handler runs in ``task`` (on the worker's loop) from now on."""
        with self._lock:
            self._loop = task.get_loop()
            self._task = task

    def _give_up(self, reason: str, *, runtime_exceeded: bool = False) -> bool:
        if not super()._give_up(reason, runtime_exceeded=runtime_exceeded):
            return False
        with self._lock:
            loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            # From any thread (the heartbeat's, the fetcher's, the loop's own).
            loop.call_soon_threadsafe(task.cancel, f"sqlq_orm: {reason}")
        return True

    async def sleep(self, seconds: float) -> bool:  # type: ignore[override]
        """Sleep up to ``seconds``, waking early when the worker starts shutting down.

        Returns ``should_stop``. When the lease is lost the task is cancelled, so the
        sleep ends with :class:`asyncio.CancelledError` instead.
        """
        deadline = time.monotonic() + seconds
        while not self.should_stop and not self.shutdown_requested:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # Short steps: shutdown and a self-fence are noticed by looking, not woken.
            await asyncio.sleep(min(left, 0.25))
        return self.should_stop
