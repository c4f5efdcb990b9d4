""":class:`AsyncQueue`: the :class:`~sqlq_orm.Queue`'s own code, awaited.

An ``AsyncQueue`` holds an ordinary :class:`~sqlq_orm.Queue` on its engine's
``sync_engine`` and runs each operation through SQLAlchemy's greenlet bridge
(:func:`sqlalchemy.util.greenlet_spawn`, what ``AsyncConnection.run_sync`` does): the
synchronous code runs unchanged, and wherever the driver would block (a query, a
commit, a pool checkout) the greenlet hands control back to the event loop. The SQL,
the validation, the fencing and the errors are therefore not copies: they are the
synchronous queue's, statement for statement.

Each operation is written once, in :class:`~sqlq_orm.Queue`; :class:`AsyncQueue` lists
it with one line, ``name = awaited(Queue.name)``. :class:`awaited` is a typed
descriptor: for mypy and IDEs the attribute has the ``Queue`` method's own parameters
(a ``ParamSpec``) and returns an awaitable of its result; at run time it calls the
synchronous queue's bound method through the greenlet bridge, handing ``session=`` over
as the ``AsyncSession``'s ``sync_session``.

What must not block the loop's thread does not: the driver's IO is awaited; SQLite's
per-engine write turns are an :class:`asyncio.Lock` for async engines
(:class:`~sqlq_orm.db.write_locks.LoopTurns`); the in-process wake-ups only set
``threading.Event`` objects.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, cast, overload

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session
from sqlalchemy.util import await_only, greenlet_spawn

from sqlq_orm.core import validation
from sqlq_orm.core.backoff import RetryPolicy
from sqlq_orm.db.backends import Backend
from sqlq_orm.db.clock import Clock
from sqlq_orm.db.context import QueueContext
from sqlq_orm.db.tables import Models
from sqlq_orm.errors import InvalidInput
from sqlq_orm.queue.core import DEFAULT_HEARTBEAT_EVENT_INTERVAL, DEFAULT_LEASE_SECONDS
from sqlq_orm.queue.queue import Queue

_P = ParamSpec("_P")
_R = TypeVar("_R")

SYNC_ONLY = frozenset({"read", "session", "watch_for_jobs"})
"""``Queue`` methods with no awaitable form: ``read()`` and ``session()`` hand out
synchronous connections and ORM sessions (use the app's own ``AsyncSession`` for
reads), and ``watch_for_jobs`` sets a ``threading.Event`` for a worker's thread.
``tests/unit/test_aio_surface.py`` checks every other public method is here."""


def _sync_session(session: object, method: str) -> Session | None:
    """The synchronous :class:`Session` behind the caller's ``AsyncSession``."""
    if session is None:
        return None
    if not isinstance(session, AsyncSession):
        raise InvalidInput(
            f"AsyncQueue.{method} takes session= as an AsyncSession, got {session!r}; "
            "with a synchronous Session use sqlq_orm.Queue"
        )
    return session.sync_session


def _pause_on_loop(seconds: float, wake: threading.Event) -> None:
    """Pause inside the greenlet bridge, handing the loop back, until ``seconds`` pass or
    ``wake`` is set: it is looked at every 2 ms, a cheap check on the loop."""
    deadline = time.monotonic() + seconds
    while not wake.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        await_only(asyncio.sleep(min(left, 0.002)))


class awaited(Generic[_P, _R]):  # noqa: N801 - used like a decorator, named like one
    """An :class:`AsyncQueue` operation derived from a :class:`~sqlq_orm.Queue` method.

    ``enqueue = awaited(Queue.enqueue)`` gives ``AsyncQueue`` an ``enqueue`` with the
    same parameters (types, defaults, keyword-only markers, ``**app_columns``) whose
    call returns a coroutine of the same result. The first access on an instance
    builds the coroutine function around that instance's synchronous queue and keeps
    it in the instance, so later calls cost a dictionary lookup.
    """

    def __init__(self, method: Callable[Concatenate[Any, _P], _R]) -> None:
        self.method = method
        self.name = method.__name__
        self.__doc__ = method.__doc__
        self.__wrapped__ = method

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"{owner.__name__}.{name} = awaited(Queue.{self.name}): names differ")

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(
        self, instance: AsyncQueue, owner: type | None = None
    ) -> Callable[_P, Coroutine[Any, Any, _R]]: ...

    def __get__(
        self, instance: AsyncQueue | None, owner: type | None = None
    ) -> Self | Callable[_P, Coroutine[Any, Any, _R]]:
        if instance is None:
            return self
        bound = getattr(instance.sync_queue, self.name)
        name = self.name
        takes_session = "session" in inspect.signature(bound).parameters

        async def operation(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if not instance._schema_checked:
                # Not at construction: an AsyncEngine can only be read from a coroutine.
                await greenlet_spawn(instance.sync_queue.check_schema)
                instance._schema_checked = True
            if takes_session and kwargs.get("session") is not None:
                cast(dict[str, Any], kwargs)["session"] = _sync_session(kwargs["session"], name)
            return cast(_R, await greenlet_spawn(functools.partial(bound, *args, **kwargs)))

        operation.__name__ = name
        operation.__qualname__ = f"{type(instance).__name__}.{name}"
        operation.__doc__ = self.method.__doc__
        operation.__signature__ = inspect.signature(bound)  # type: ignore[attr-defined]
        instance.__dict__[name] = operation
        return operation


class AsyncQueue:
    """A job queue stored in the tables of ``models``, used from asyncio code.

    ``bind`` is an :class:`~sqlalchemy.ext.asyncio.AsyncEngine` (create it with
    :func:`sqlq_orm.create_async_engine`, or configure a host app's with
    :func:`sqlq_orm.configure_engine` on its ``sync_engine``) or an
    :class:`~sqlalchemy.ext.asyncio.async_sessionmaker` bound to one. The other
    arguments are :class:`~sqlq_orm.Queue`'s. Every operation is the synchronous
    queue's, awaited: same arguments, same results, same errors
    (:class:`~sqlq_orm.errors.InvalidInput`, :class:`~sqlq_orm.errors.LeaseLost`, ...);
    ``session=`` takes an :class:`~sqlalchemy.ext.asyncio.AsyncSession`.

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
        schema: str | None = None,
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
        self._schema_checked = False
        """Whether an operation has checked the schema yet (see :meth:`Queue.check_schema`)."""
        self.sync_queue = Queue(
            bind.sync_engine,
            models=models,
            clock=clock,
            retry_policy=retry_policy,
            default_lease_seconds=default_lease_seconds,
            payload_max_bytes=payload_max_bytes,
            heartbeat_event_interval=heartbeat_event_interval,
            schema=schema,
        )
        # wait() runs in the greenlet bridge: its pauses must hand the loop back.
        self.sync_queue._pause = _pause_on_loop

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

    # Every Queue operation, awaitable: one line each (see ``awaited``). A new Queue
    # method is added here the same way, or to SYNC_ONLY with the reason.

    enqueue = awaited(Queue.enqueue)
    enqueue_many = awaited(Queue.enqueue_many)
    enqueue_chain = awaited(Queue.enqueue_chain)
    enqueue_fan_in = awaited(Queue.enqueue_fan_in)
    claim = awaited(Queue.claim)
    start = awaited(Queue.start)
    heartbeat = awaited(Queue.heartbeat)
    heartbeat_many = awaited(Queue.heartbeat_many)
    succeed = awaited(Queue.succeed)
    succeed_many = awaited(Queue.succeed_many)
    fail = awaited(Queue.fail)
    fail_many = awaited(Queue.fail_many)
    release = awaited(Queue.release)
    release_many = awaited(Queue.release_many)
    start_many = awaited(Queue.start_many)
    snooze = awaited(Queue.snooze)
    sweep = awaited(Queue.sweep)
    cancel = awaited(Queue.cancel)
    retry = awaited(Queue.retry)
    get_job = awaited(Queue.get_job)
    dependencies_of = awaited(Queue.dependencies_of)
    counts_by_status = awaited(Queue.counts_by_status)
    stats = awaited(Queue.stats)
    prune = awaited(Queue.prune)
    register_worker = awaited(Queue.register_worker)
    deregister_worker = awaited(Queue.deregister_worker)
    register_schedules = awaited(Queue.register_schedules)
    enqueue_due_slots = awaited(Queue.enqueue_due_slots)
    list_schedules = awaited(Queue.list_schedules)
    remove_schedule = awaited(Queue.remove_schedule)
    seconds_until_next_job = awaited(Queue.seconds_until_next_job)
    check_schema = awaited(Queue.check_schema)
    result = awaited(Queue.result)
    wait = awaited(Queue.wait)
    pause_queue = awaited(Queue.pause_queue)
    resume_queue = awaited(Queue.resume_queue)
    set_rate_limit = awaited(Queue.set_rate_limit)
    clear_rate_limit = awaited(Queue.clear_rate_limit)
    paused_queues = awaited(Queue.paused_queues)
    queue_states = awaited(Queue.queue_states)
    discard = awaited(Queue.discard)
    cancel_jobs = awaited(Queue.cancel_jobs)
    retry_jobs = awaited(Queue.retry_jobs)
    discard_jobs = awaited(Queue.discard_jobs)
    pause_schedule = awaited(Queue.pause_schedule)
    resume_schedule = awaited(Queue.resume_schedule)
    run_schedule_now = awaited(Queue.run_schedule_now)
