""":class:`Task`: a typed function the worker runs, and the way to enqueue it.

A task is made by :meth:`~sqlq_orm.tasks.registry.TaskRegistry.task`; its
``enqueue`` has the function's own parameters (a ``ParamSpec``), so a type checker
flags a wrong or missing argument at the call, and at run time the call is bound
against the signature before anything is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, cast

from sqlq_orm.errors import InvalidInput, ResultDoesNotMatch
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import EnqueuedJob, JobSpec
from sqlq_orm.tasks.inline import run_when_committed
from sqlq_orm.tasks.middleware import TaskMiddleware, through_enqueue
from sqlq_orm.tasks.signature import TaskSignature
from sqlq_orm.worker.handlers import HandlerRegistry

if TYPE_CHECKING:
    from sqlq_orm.queue.aio import AsyncQueue

P = ParamSpec("P")
R = TypeVar("R")

KeyOption = str | Callable[..., str | None] | None
"""A dedupe or concurrency key: a fixed string, or a function called with the task's
arguments (as the task would be) that returns the key (or None for no key)."""

_UNSET: Any = object()


class TaskQueues(Protocol):
    """Where a task enqueues: its :class:`~sqlq_orm.TaskRegistry`'s queues."""

    @property
    def queue(self) -> Queue: ...

    @property
    def async_queue(self) -> AsyncQueue: ...

    @property
    def middlewares(self) -> Sequence[TaskMiddleware]: ...


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """How a task's jobs are enqueued: the decorator's defaults, then per-call
    overrides from :meth:`Task.options`. Fields mean what they mean in
    :meth:`Queue.enqueue <sqlq_orm.Queue.enqueue>`."""

    queue: str = "default"
    priority: int = 0
    max_retries: int | None = None
    max_runtime_seconds: int | None = None
    dedupe_key: KeyOption = None
    concurrency_key: KeyOption = None
    concurrency_limit: int | None = None
    delay: float | None = None
    run_at: Any = None
    depends_on: Sequence[int] | None = None
    on_parent_failure: str = "cancel"
    columns: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Values for columns the host app added to its job model."""
    session: Any = None
    """Enqueue in the caller's transaction (a ``Session``; an ``AsyncSession`` for
    :meth:`Task.enqueue_async`)."""
    rate_key: KeyOption = None
    """A string or a function of the task's arguments (e.g. the tenant)."""
    dedupe_period: int | None = None
    """Applies to the calls that have a ``dedupe_key`` (see ``Queue.enqueue``)."""


class Task(Generic[P, R]):
    """A task function registered with a :class:`TaskRegistry`.

    ``enqueue(...)`` takes the function's arguments (without the leading
    :class:`~sqlq_orm.JobContext`, which the worker supplies) and returns the
    :class:`~sqlq_orm.EnqueuedJob`. The function itself is :attr:`function`, for
    tests that call it directly.
    """

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str,
        registry: TaskQueues,
        options: TaskOptions,
        signature: TaskSignature | None = None,
    ) -> None:
        self.function = function
        self.name = name
        self.registry = registry
        self.defaults = options
        self.signature = signature or TaskSignature(function, name)
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    def __repr__(self) -> str:
        return f"<Task {self.name} {self.signature.signature}>"

    def options(
        self,
        *,
        queue: str = _UNSET,
        priority: int = _UNSET,
        max_retries: int | None = _UNSET,
        max_runtime_seconds: int | None = _UNSET,
        dedupe_key: KeyOption = _UNSET,
        concurrency_key: KeyOption = _UNSET,
        concurrency_limit: int | None = _UNSET,
        delay: float | None = _UNSET,
        run_at: Any = _UNSET,
        depends_on: Sequence[int] | None = _UNSET,
        on_parent_failure: str = _UNSET,
        columns: Mapping[str, Any] = _UNSET,
        session: Any = _UNSET,
        rate_key: KeyOption = _UNSET,
        dedupe_period: int | None = _UNSET,
    ) -> Task[P, R]:
        """This task with some options changed for the calls made through it.

        Returns a new :class:`Task` (this one is unchanged); options not given keep
        the decorator's values. Chain it before ``enqueue``, ``enqueue_async`` or
        ``spec``::

            send_email.options(delay=60, session=session).enqueue(to="a@example.com")

        ``columns`` gives values for the columns the host app added to its job model
        (``Job(JobMixin, Base)`` with e.g. ``tenant_id``), by column name. They are
        stored in those columns, not in the task's arguments; the handler reads them
        as ``ctx.columns``; ``sqlq show``, the dashboard and the job lists filter by
        them. A value the column cannot hold (wrong type, too long, NULL for a
        required column, a foreign key to nothing) raises
        :class:`~sqlq_orm.errors.InvalidInput` naming the column, and nothing is
        written. The queue must have the app's models (``Queue(engine,
        models=MODELS)``)::

            invoice = send_invoice.options(columns={"tenant_id": 7}, session=session)
            invoice.enqueue(order_id=order.id)

        ``session`` enqueues in the caller's transaction (a ``Session``; an
        ``AsyncSession`` for ``enqueue_async``); ``run_at`` (epoch seconds or an
        aware ``datetime``), ``depends_on`` and ``on_parent_failure`` exist only
        here, per call. ``dedupe_key``, ``concurrency_key`` and ``rate_key`` are
        strings or functions of the task's arguments. The other options mean what
        they mean in :meth:`Queue.enqueue <sqlq_orm.Queue.enqueue>`. See the how-to
        page "App columns" (``docs/howto/app-columns.md``).
        """
        given = {k: v for k, v in locals().items() if k != "self" and v is not _UNSET}
        return Task(
            self.function,
            name=self.name,
            registry=self.registry,
            options=dataclasses.replace(self.defaults, **given),
            signature=self.signature,
        )

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """The :class:`~sqlq_orm.JobSpec` of one call, for
        :meth:`Queue.enqueue_many <sqlq_orm.Queue.enqueue_many>` (to mix tasks in one
        transaction). Bad arguments raise :class:`~sqlq_orm.errors.InvalidInput`."""
        return self._spec(args, kwargs)

    def _spec(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> JobSpec:
        options = self.defaults
        payload, dedupe_key, concurrency_key = self._bound(args, kwargs)
        return JobSpec(
            type=self.name,
            payload=payload,
            queue=options.queue,
            priority=options.priority,
            run_at=options.run_at,
            delay=options.delay,
            max_retries=options.max_retries,
            max_runtime_seconds=options.max_runtime_seconds,
            dedupe_key=dedupe_key,
            concurrency_key=concurrency_key,
            concurrency_limit=options.concurrency_limit,
            columns=options.columns,
            depends_on=tuple(options.depends_on or ()),
            on_parent_failure=options.on_parent_failure,
            rate_key=self._key("rate_key", options.rate_key, args, kwargs),
            # The period of the calls that have a dedupe key (others have none to hold).
            dedupe_period=None if dedupe_key is None else options.dedupe_period,
        )

    def _bound(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """The payload of a call, and its dedupe and concurrency keys."""
        payload = self.signature.payload_of(self.signature.arguments_of(args, kwargs))
        options = self.defaults
        return (
            payload,
            self._key("dedupe_key", options.dedupe_key, args, kwargs),
            self._key("concurrency_key", options.concurrency_key, args, kwargs),
        )

    def _key(
        self, what: str, key: KeyOption, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> str | None:
        if key is None or isinstance(key, str):
            return key
        try:
            return key(*args, **kwargs)
        except Exception as exc:
            raise InvalidInput(
                f"task {self.name!r}: its {what} function raised {type(exc).__name__}: {exc}; "
                "nothing was written"
            ) from exc

    def _enqueue_arguments(self, spec: JobSpec) -> dict[str, Any]:
        options = self.defaults
        return {
            "queue": spec.queue,
            "priority": spec.priority,
            "run_at": spec.run_at,
            "delay": spec.delay,
            "max_retries": spec.max_retries,
            "max_runtime_seconds": spec.max_runtime_seconds,
            "dedupe_key": spec.dedupe_key,
            "concurrency_key": spec.concurrency_key,
            "concurrency_limit": spec.concurrency_limit,
            "depends_on": options.depends_on,
            "on_parent_failure": spec.on_parent_failure,
            "session": options.session,
            "rate_key": spec.rate_key,
            "dedupe_period": spec.dedupe_period,
            **spec.columns,
        }

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Enqueue one run of the task with these arguments on the registry's queue.

        The arguments are bound against the function's signature first: a missing,
        unexpected or non-JSON argument raises :class:`~sqlq_orm.errors.InvalidInput`
        naming it, and nothing is written.
        """
        job = self._enqueue(args, kwargs)
        if getattr(self.registry, "inline", False):
            self._run_inline([self.defaults.queue])
        return job

    def _run_inline(self, queues: Iterable[str]) -> None:
        """Inline mode (:mod:`sqlq_orm.tasks.inline`): run the queues' ready jobs once
        the enqueue is committed."""
        handlers = cast(HandlerRegistry, self.registry)  # a TaskRegistry is one
        run_when_committed(self.registry.queue, handlers, queues, self.defaults.session)

    def _enqueue(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> EnqueuedJob:
        middlewares = self.registry.middlewares
        if not middlewares:  # the common path: no JobSpec in between
            payload, dedupe_key, concurrency_key = self._bound(args, kwargs)
            o = self.defaults
            return self.registry.queue.enqueue(
                self.name, payload, queue=o.queue, priority=o.priority, run_at=o.run_at,
                delay=o.delay, max_retries=o.max_retries,
                max_runtime_seconds=o.max_runtime_seconds, dedupe_key=dedupe_key,
                concurrency_key=concurrency_key, concurrency_limit=o.concurrency_limit,
                depends_on=o.depends_on, on_parent_failure=o.on_parent_failure,
                session=o.session,
                rate_key=self._key("rate_key", o.rate_key, args, kwargs),
                dedupe_period=None if dedupe_key is None else o.dedupe_period, **o.columns,
            )  # fmt: skip
        spec = self.spec(*args, **kwargs)
        queue = self.registry.queue
        return cast(
            EnqueuedJob,
            through_enqueue(
                middlewares,
                self,
                spec,
                lambda s: queue.enqueue(s.type, s.payload, **self._enqueue_arguments(s)),
            ),
        )

    def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, EnqueuedJob]:
        """:meth:`enqueue` on the registry's :class:`~sqlq_orm.AsyncQueue`, awaited.

        The arguments are bound (and refused) at the call, before the coroutine runs.
        """
        spec = self.spec(*args, **kwargs)
        queue = self.registry.async_queue
        middlewares = self.registry.middlewares
        if not middlewares:
            return queue.enqueue(spec.type, spec.payload, **self._enqueue_arguments(spec))
        return cast(
            Coroutine[Any, Any, EnqueuedJob],
            through_enqueue(
                middlewares,
                self,
                spec,
                lambda s: queue.enqueue(s.type, s.payload, **self._enqueue_arguments(s)),
            ),
        )

    def specs(self, arguments: Iterable[Mapping[str, Any]]) -> list[JobSpec]:
        """One :class:`~sqlq_orm.JobSpec` per mapping of keyword arguments."""
        specs = []
        for index, call in enumerate(arguments):
            if not isinstance(call, Mapping):
                raise InvalidInput(
                    f"call #{index} of {self.name!r}.enqueue_many must be a mapping of "
                    f"keyword arguments, got {type(call).__name__}"
                )
            try:
                spec = self._spec((), call)
            except InvalidInput as exc:
                raise InvalidInput(f"call #{index}: {exc}") from None
            if self.registry.middlewares:  # proceed returns the spec: one write follows
                spec = through_enqueue(self.registry.middlewares, self, spec, lambda s: s)
            specs.append(spec)
        return specs

    def enqueue_many(self, arguments: Iterable[Mapping[str, Any]]) -> list[EnqueuedJob]:
        """Enqueue one run per mapping of keyword arguments, in one transaction.

        Every call is bound before anything is written; one bad call (named by its
        index) writes none. Returns the jobs in order.
        """
        specs = self.specs(arguments)
        jobs = self.registry.queue.enqueue_many(specs, session=self.defaults.session)
        if getattr(self.registry, "inline", False) and specs:
            queues = {spec.queue for spec in specs}
            self._run_inline(queues)
        return jobs

    async def enqueue_many_async(self, arguments: Iterable[Mapping[str, Any]]) -> list[EnqueuedJob]:
        """:meth:`enqueue_many` on the registry's :class:`~sqlq_orm.AsyncQueue`."""
        specs = self.specs(arguments)
        return await self.registry.async_queue.enqueue_many(specs, session=self.defaults.session)

    def _value(self, job_id: int, stored: Any) -> R:
        """The stored result rebuilt by the return annotation, or
        :class:`~sqlq_orm.errors.ResultDoesNotMatch` (never a raw ``TypeError``)."""
        decode = self.signature.result_converter.decode
        try:
            value = decode(stored) if decode is not None and stored is not None else stored
        except Exception as exc:  # noqa: BLE001 - e.g. Order(**{"bogus": 1}): a TypeError
            raise ResultDoesNotMatch(job_id, self.name, f"{type(exc).__name__}: {exc}") from None
        problem = self.signature.result_problem(value)
        if problem is not None:
            raise ResultDoesNotMatch(job_id, self.name, problem)
        return cast(R, value)

    def result(self, job_id: int) -> R:
        """What the run ``job_id`` returned, rebuilt by the function's return
        annotation (see :meth:`Queue.result <sqlq_orm.Queue.result>` for the errors)."""
        return self._value(job_id, self.registry.queue.result(job_id))

    def wait(self, job_id: int, timeout: float = 30.0) -> R:
        """Wait for the run ``job_id`` to finish and return its result (see
        :meth:`Queue.wait <sqlq_orm.Queue.wait>`)."""
        return self._value(job_id, self.registry.queue.wait(job_id, timeout))

    async def result_async(self, job_id: int) -> R:
        """:meth:`result` through the registry's :class:`~sqlq_orm.AsyncQueue`."""
        return self._value(job_id, await self.registry.async_queue.result(job_id))

    async def wait_async(self, job_id: int, timeout: float = 30.0) -> R:
        """:meth:`wait` through the registry's :class:`~sqlq_orm.AsyncQueue` (its pauses
        hand the event loop back)."""
        return self._value(job_id, await self.registry.async_queue.wait(job_id, timeout))
