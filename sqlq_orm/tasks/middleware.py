"""Middleware: one hook point around every task enqueue and every task run.

A middleware subclasses :class:`TaskMiddleware` and overrides what it needs; each hook
gets a ``proceed`` to call (the next middleware, and last the real work) and returns
what it returns, so it can time, log, add context or trace around it::

    class Timing(TaskMiddleware):
        def around_run(self, task, ctx, proceed):
            started = time.monotonic()
            try:
                return proceed()
            finally:
                metrics.observe(task.name, time.monotonic() - started)

    registry.add_middleware(Timing())

Middlewares run in the order they were added, the first outermost. ``around_enqueue``
gets the :class:`~sqlq_orm.JobSpec` about to be written (it may return a changed one
through ``proceed(spec)``); for ``enqueue_async`` its ``proceed`` returns the awaitable.
``around_run`` wraps a plain task's call in the worker's thread, ``around_run_async``
an ``async def`` task's, on the worker's loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from sqlq_orm.queue.types import JobSpec
from sqlq_orm.worker.handlers import JobContext


class Task(Protocol):
    """What a middleware sees of the task (a :class:`~sqlq_orm.Task`)."""

    @property
    def name(self) -> str: ...


class TaskMiddleware:
    """Base class of middlewares: every hook passes straight through."""

    def around_enqueue(self, task: Task, spec: JobSpec, proceed: Callable[[JobSpec], Any]) -> Any:
        """Around writing one job of ``task`` (``spec`` holds its type, payload, options)."""
        return proceed(spec)

    def around_run(self, task: Task, ctx: JobContext, proceed: Callable[[], Any]) -> Any:
        """Around one run of a plain task (arguments are bound; ``proceed()`` calls it)."""
        return proceed()

    async def around_run_async(
        self, task: Task, ctx: JobContext, proceed: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Around one run of an ``async def`` task."""
        return await proceed()


def through_enqueue(
    middlewares: Sequence[TaskMiddleware],
    task: Task,
    spec: JobSpec,
    last: Callable[[JobSpec], Any],
) -> Any:
    """``last(spec)`` inside every middleware's ``around_enqueue``, the first outermost."""
    call = last
    for middleware in reversed(middlewares):
        call = _enqueue_step(middleware, task, call)
    return call(spec)


def _enqueue_step(
    middleware: TaskMiddleware, task: Task, inner: Callable[[JobSpec], Any]
) -> Callable[[JobSpec], Any]:
    return lambda spec: middleware.around_enqueue(task, spec, inner)


def through_run(
    middlewares: Sequence[TaskMiddleware],
    task: Task,
    ctx: JobContext,
    last: Callable[[], Any],
) -> Any:
    """``last()`` inside every middleware's ``around_run``."""
    call = last
    for middleware in reversed(middlewares):
        call = _run_step(middleware, task, ctx, call)
    return call()


def _run_step(
    middleware: TaskMiddleware, task: Task, ctx: JobContext, inner: Callable[[], Any]
) -> Callable[[], Any]:
    return lambda: middleware.around_run(task, ctx, inner)


async def through_run_async(
    middlewares: Sequence[TaskMiddleware],
    task: Task,
    ctx: JobContext,
    last: Callable[[], Awaitable[Any]],
) -> Any:
    """``await last()`` inside every middleware's ``around_run_async``."""
    call = last
    for middleware in reversed(middlewares):
        call = _async_step(middleware, task, ctx, call)
    return await call()


def _async_step(
    middleware: TaskMiddleware,
    task: Task,
    ctx: JobContext,
    inner: Callable[[], Awaitable[Any]],
) -> Callable[[], Awaitable[Any]]:
    return lambda: middleware.around_run_async(task, ctx, inner)
