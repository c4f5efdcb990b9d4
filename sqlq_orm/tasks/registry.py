""":class:`TaskRegistry`: a :class:`~sqlq_orm.HandlerRegistry` that also makes tasks,
bound to the queue its tasks enqueue into.

::

    queue = sqlq_orm.Queue(engine)
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(queue="mail", max_retries=5)
    def send_email(to: str, subject: str = "Hello") -> None:
        ...

    send_email.enqueue(to="a@example.com")          # checked against the signature
    sqlq_orm.Worker(queue, registry).run()          # runs send_email(to=..., subject=...)

A task is a handler like any other to the worker; plain handlers
(:meth:`~sqlq_orm.HandlerRegistry.handler`) live in the same registry.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

from sqlq_orm.core import validation
from sqlq_orm.core.backoff import Backoff, backoff_of
from sqlq_orm.errors import InvalidInput, SqlqError
from sqlq_orm.queue.queue import Queue
from sqlq_orm.schema.mixins import TYPE_MAX
from sqlq_orm.tasks.drift import find_drift
from sqlq_orm.tasks.failures import FailurePolicy, exception_classes
from sqlq_orm.tasks.middleware import TaskMiddleware
from sqlq_orm.tasks.runner import AsyncTaskRunner, TaskRunner
from sqlq_orm.tasks.signature import ARGUMENTS_DO_NOT_BIND, TaskSignature
from sqlq_orm.tasks.task import KeyOption, Task, TaskOptions
from sqlq_orm.worker.handlers import (
    AsyncJobContext,
    Handler,
    HandlerRegistry,
    JobContext,
    is_coroutine_handler,
)

if TYPE_CHECKING:
    from sqlq_orm.queue.aio import AsyncQueue

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger("sqlq_orm.tasks")

DRIFT_CHECK_LIMIT = 1000
"""Stored payloads a worker checks per task at start-up (the oldest unfinished first)."""


class TaskDecorator:
    """What ``registry.task(...)`` returns: applied to a function, it makes the task.

    For type checkers a leading :class:`~sqlq_orm.JobContext` (or
    :class:`~sqlq_orm.AsyncJobContext`) parameter is not part of the task's
    arguments, and an ``async def`` task's result is what it returns when awaited.
    """

    def __init__(
        self,
        registry: TaskRegistry,
        name: str | None,
        options: TaskOptions,
        failures: FailurePolicy | None = None,
        lease: int | None = None,
        redact: Sequence[str] = (),
    ) -> None:
        self.registry = registry
        self.name = name
        self.options = options
        self.failures = failures
        self.lease = lease
        self.redact = redact

    @overload
    def __call__(
        self, function: Callable[Concatenate[AsyncJobContext, P], Awaitable[R]]
    ) -> Task[P, R]: ...
    @overload
    def __call__(
        self, function: Callable[Concatenate[JobContext, P], Awaitable[R]]
    ) -> Task[P, R]: ...
    @overload
    def __call__(self, function: Callable[Concatenate[JobContext, P], R]) -> Task[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, Awaitable[R]]) -> Task[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, R]) -> Task[P, R]: ...
    def __call__(self, function: Callable[..., Any]) -> Task[Any, Any]:
        return self.registry.add_task(
            function,
            name=self.name,
            options=self.options,
            failures=self.failures,
            lease=self.lease,
            redact=self.redact,
        )


class TaskRegistry(HandlerRegistry):
    """Handlers and tasks by job type, and the queue the tasks enqueue into.

    ``queue`` is a :class:`~sqlq_orm.Queue` or an :class:`~sqlq_orm.AsyncQueue` (or
    None, then :meth:`bind` one before the first enqueue). Nothing is global: each
    task enqueues through its own registry's queue.
    """

    def __init__(
        self,
        queue: Queue | AsyncQueue | None = None,
        *,
        handlers: Mapping[str, Handler] | None = None,
        inline: bool = False,
    ) -> None:
        super().__init__(handlers)
        self.inline = bool(inline)
        """Run each task's job in the enqueuing thread once its transaction commits
        (:mod:`sqlq_orm.tasks.inline`), instead of leaving it to a worker."""
        self._queue: Queue | None = None
        self._async_queue: AsyncQueue | None = None
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._failures: dict[str, FailurePolicy] = {}  # tasks with a backoff of their own
        self._middlewares: list[TaskMiddleware] = []
        if queue is not None:
            self.bind(queue)

    def bind(self, queue: Queue | AsyncQueue) -> TaskRegistry:
        """Make ``queue`` the one this registry's tasks enqueue into; return the registry.

        An :class:`~sqlq_orm.AsyncQueue` serves ``enqueue_async`` (and ``enqueue``,
        through its synchronous queue); a :class:`~sqlq_orm.Queue` serves ``enqueue``.
        """
        if isinstance(queue, Queue):
            self._queue = queue
            return self
        aio = sys.modules.get("sqlq_orm.queue.aio.queue")  # loaded if an AsyncQueue exists
        if aio is not None and isinstance(queue, aio.AsyncQueue):
            self._async_queue = queue
            self._queue = queue.sync_queue
            return self
        raise InvalidInput(f"a TaskRegistry binds a Queue or an AsyncQueue, got {queue!r}")

    @property
    def queue(self) -> Queue:
        """The :class:`~sqlq_orm.Queue` the tasks enqueue into."""
        if self._queue is None:
            raise SqlqError(
                "this TaskRegistry has no queue to enqueue into: make it with "
                "TaskRegistry(queue) or call registry.bind(queue) first"
            )
        return self._queue

    @property
    def bound_queue(self) -> Queue | None:
        """The :class:`~sqlq_orm.Queue` this registry is bound to, or None (not bound
        yet). ``sqlq worker --handlers`` takes its engine and models from it."""
        return self._queue

    @property
    def async_queue(self) -> AsyncQueue:
        """The :class:`~sqlq_orm.AsyncQueue` the tasks' ``enqueue_async`` uses."""
        if self._async_queue is None:
            raise SqlqError(
                "this TaskRegistry has no AsyncQueue for enqueue_async: make it with "
                "TaskRegistry(async_queue) or call registry.bind(async_queue) first"
            )
        return self._async_queue

    @contextmanager
    def inline_mode(self, inline: bool = True) -> Iterator[TaskRegistry]:
        """``with registry.inline_mode(): ...``: :attr:`inline` for the block, as it
        was afterwards."""
        before, self.inline = self.inline, bool(inline)
        try:
            yield self
        finally:
            self.inline = before

    def add_middleware(self, middleware: TaskMiddleware) -> TaskMiddleware:
        """Run ``middleware`` around every enqueue and every run of this registry's
        tasks (see :mod:`sqlq_orm.tasks.middleware`); the first added is outermost."""
        if not isinstance(middleware, TaskMiddleware):
            raise InvalidInput(f"a middleware must be a TaskMiddleware, got {middleware!r}")
        self._middlewares.append(middleware)
        return middleware

    @property
    def middlewares(self) -> list[TaskMiddleware]:
        """The middlewares, outermost first (the live list the tasks read)."""
        return self._middlewares

    @property
    def tasks(self) -> dict[str, Task[Any, Any]]:
        """Every task, by its type name."""
        return dict(self._tasks)

    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_retries: int | None = None,
        max_runtime_seconds: int | None = None,
        dedupe_key: KeyOption = None,
        concurrency_key: KeyOption = None,
        concurrency_limit: int | None = None,
        delay: float | None = None,
        depends_on: Sequence[int] | None = None,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
        no_retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
        backoff: Backoff | float | Callable[[int], float] | None = None,
        lease: int | None = None,
        rate_key: KeyOption = None,
        dedupe_period: int | None = None,
        redact: Sequence[str] = (),
    ) -> TaskDecorator:
        """Decorator: make the function a task, with these options as its defaults.

        ``name`` is the job type (default: the function's import path,
        ``module.qualname``); pass it to keep old jobs runnable after a rename or a
        move. ``dedupe_key``, ``concurrency_key`` and ``rate_key`` are strings or
        functions of the task's arguments. The other options mean what they mean in
        :meth:`Queue.enqueue <sqlq_orm.Queue.enqueue>`; each call can override them
        with :meth:`Task.options`. ``retry_on`` (only these exceptions are retried)
        and ``no_retry_on`` (these never are) take exception classes; a plain
        exception fails the run with an error code named after its class
        (``EXCEPTION:KEY_ERROR``, see :mod:`sqlq_orm.tasks.failures`).

        ``backoff`` is how long this task's failed runs wait before a retry, instead
        of the queue's :class:`~sqlq_orm.RetryPolicy`: a shape
        (:class:`~sqlq_orm.RetryPolicy` for exponential with jitter,
        :class:`~sqlq_orm.FixedBackoff`, :class:`~sqlq_orm.LinearBackoff`), a number
        of seconds (fixed), or a function ``(retry_number) -> seconds`` (1 for the
        first retry). It is checked here: a wrong one raises
        :class:`~sqlq_orm.InvalidInput` naming the task.

        ``lease`` (whole seconds, at least 2) is how long this task's jobs stay held
        without a heartbeat, instead of the worker's ``lease_seconds``: longer for a
        task whose heartbeats may come late, shorter to get its jobs back sooner after
        a worker dies. The worker claims these jobs with that lease (in the claim's
        transaction), renews them for that long, heartbeats within a third of the
        shortest, and self-fences after it.

        ``redact`` names parameters whose values are kept out of what is displayed
        (a password, a token): ``sqlq show``, the dashboard, :func:`~sqlq_orm.job_timeline`
        and the library's own messages about an argument show ``[redacted]``; the
        handler still gets the value, which is stored in the job's payload like the
        others (see :mod:`sqlq_orm.core.redaction`). A name that is not a parameter
        raises :class:`~sqlq_orm.InvalidInput`.
        """
        options = TaskOptions(
            queue=queue,
            priority=priority,
            max_retries=max_retries,
            max_runtime_seconds=max_runtime_seconds,
            dedupe_key=dedupe_key,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            delay=delay,
            depends_on=depends_on,
            rate_key=rate_key,
            dedupe_period=dedupe_period,
        )
        failures = FailurePolicy(
            retry_on=None if retry_on is None else exception_classes(retry_on, "retry_on"),
            no_retry_on=exception_classes(no_retry_on, "no_retry_on"),
            backoff=None
            if backoff is None
            else backoff_of(backoff, f"task {name!r}" if name else "registry.task(backoff=...)"),
        )
        if lease is not None:
            try:
                lease = validation.lease_seconds(lease)
            except InvalidInput as exc:
                owner = f"task {name!r}" if name else "registry.task(lease=...)"
                raise InvalidInput(f"{owner}: lease={lease!r} refused: {exc}") from None
        return TaskDecorator(self, name, options, failures, lease, redact)

    def add_task(
        self,
        function: Callable[..., Any],
        *,
        name: str | None,
        options: TaskOptions,
        failures: FailurePolicy | None = None,
        lease: int | None = None,
        redact: Sequence[str] = (),
    ) -> Task[Any, Any]:
        """Register ``function`` as a task (what the decorator does); return the task."""
        if not callable(function):
            raise InvalidInput(f"a task must be a function, got {function!r}")
        task_name = name if name is not None else default_task_name(function)
        validation.require_name("task name", task_name, TYPE_MAX)
        for key in ("dedupe_key", "concurrency_key", "rate_key"):
            value = getattr(options, key)
            if value is not None and not (isinstance(value, str) or callable(value)):
                raise InvalidInput(
                    f"task {task_name!r}: {key} must be a string or a function of the "
                    f"task's arguments, got {value!r}"
                )
        signature = TaskSignature(function, task_name, redact)
        runner_class = AsyncTaskRunner if is_coroutine_handler(function) else TaskRunner
        runner = runner_class(function, signature, failures, self._middlewares)
        self.register(task_name, runner)
        if failures is not None and failures.backoff is not None:
            self._failures[task_name] = failures
        if lease is not None:
            self.set_lease_seconds(task_name, lease)
        task: Task[Any, Any] = Task(
            function, name=task_name, registry=self, options=options, signature=signature
        )
        runner.task = task
        self._tasks[task_name] = task
        return task

    def worker_starting(self, queue: Any) -> None:
        """Warn, once per task, about queued jobs whose stored arguments no longer bind
        to the task's signature (a deploy changed it): they would fail one by one with
        ``ARGUMENTS_DO_NOT_BIND``. Reads at most :data:`DRIFT_CHECK_LIMIT` payloads per
        task; ``sqlq check --handlers`` reads them all."""
        if not self._tasks:
            return
        for drift in find_drift(queue, self, limit=DRIFT_CHECK_LIMIT, tasks_only=True):
            log.warning(
                "task %s: %d unfinished job(s) (of the oldest %d checked) whose stored "
                "arguments no longer bind to its signature; they will fail with %s (e.g. "
                "%s). See sqlq check --handlers",
                drift.type,
                drift.count,
                DRIFT_CHECK_LIMIT,
                ARGUMENTS_DO_NOT_BIND,
                "; ".join(f"job {job_id}: {why}" for job_id, why in drift.examples[:2]),
            )

    def retry_delay_of(self, job_type: str, retry_number: int) -> float | None:
        """The task's ``backoff=`` for retry ``retry_number`` of a job the sweeper took
        back (its lease expired, or it ran past its max runtime); None for a job type
        without one (the queue's retry policy)."""
        failures = self._failures.get(job_type)
        if failures is None:
            return None
        try:
            return failures.delay(job_type, retry_number)
        except InvalidInput:  # the sweeper has no run to fail: the queue's policy
            log.exception("a swept job's retry waits the queue's retry policy instead")
            return None

    def get_task(self, name: str) -> Task[Any, Any] | None:
        """The task of type ``name``, or None."""
        return self._tasks.get(name)


def default_task_name(function: Callable[..., Any]) -> str:
    """A function's import path, ``module.qualname``: the job type of its task."""
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not module or not qualname:
        raise InvalidInput(f"{function!r} has no import path; pass the task a name=")
    if module == "__main__":
        raise InvalidInput(
            f"task {qualname!r} is defined in the script being run (__main__), whose "
            "import path a worker importing the module would not share; pass name="
        )
    return f"{module}.{qualname}"
