""":func:`perform`: run one task's function now, without a queue or a database.

::

    assert perform(add, 2, 3) == 5
    with pytest.raises(sqlq_orm.Snooze):
        perform(poll_export, export_id=7, attempt=3)

The arguments go through what ``.enqueue()`` does to them (bound against the
signature, encoded by the task's codec, a JSON round trip), so a wrong or non-JSON
argument raises :class:`~sqlq_orm.errors.InvalidInput` here as it would there; then
the task's runner (the handler the worker calls) decodes them, runs the registry's
middleware and the function, and the return value comes back as
``task.result(job_id)`` would give it. A :class:`~sqlq_orm.errors.JobError` or
:class:`~sqlq_orm.errors.Snooze` the function raises propagates as raised, and so
does any other exception (not its ``EXCEPTION:...`` classification).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Mapping
from typing import Any, ParamSpec, TypeVar

from sqlq_orm.core.results import JobResult
from sqlq_orm.errors import InvalidInput
from sqlq_orm.tasks.runner import TaskRunner
from sqlq_orm.tasks.task import Task
from sqlq_orm.worker.handlers import AsyncJobContext, JobContext

P = ParamSpec("P")
R = TypeVar("R")

CONTEXT_KEYWORDS = ("job_id", "attempt", "columns")
""":func:`perform`'s own keywords: the context's job id, attempt and app columns."""

PERFORM_WORKER_ID = "sqlq-perform"
PERFORM_LEASE_SECONDS = 3600


def perform(task: Task[P, R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``task`` with these arguments now, in this thread, and return its result.

    ``job_id`` (default 1), ``attempt`` (default 1) and ``columns`` (the app's job
    columns, a mapping) are taken out of ``kwargs`` for the ``JobContext`` the task
    gets; a task with a parameter of one of these names is refused here: call
    :func:`perform_call` instead. An ``async def`` task is run to its end on a new
    event loop (not from inside a running one: await :func:`perform_async` there).
    """
    clash = [name for name in CONTEXT_KEYWORDS if name in task.signature.parameters]
    if clash:
        raise InvalidInput(
            f"task {task.name!r} has a parameter named {clash[0]!r}, which perform() "
            "takes for the job's context; call perform_call(task, args, kwargs, ...) instead"
        )
    context = {name: kwargs.pop(name) for name in CONTEXT_KEYWORDS if name in kwargs}
    return perform_call(task, args, kwargs, **context)


def perform_call(
    task: Task[P, R],
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    job_id: int = 1,
    attempt: int = 1,
    columns: Mapping[str, Any] | None = None,
) -> R:
    """:func:`perform` with the call's arguments given as ``args`` and ``kwargs``, so
    that the context's keywords never clash with the task's own parameters."""
    runner, ctx = _prepared(task, args, kwargs or {}, job_id, attempt, columns)
    if isinstance(ctx, AsyncJobContext):
        return asyncio.run(_awaited(task, runner, ctx))
    try:
        returned = runner(ctx)
    except BaseException as exc:  # noqa: BLE001 - re-raised as the function raised it
        raise _as_raised(exc) from None
    return _result(task, job_id, returned)


async def perform_async(
    task: Task[P, R],
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    job_id: int = 1,
    attempt: int = 1,
    columns: Mapping[str, Any] | None = None,
) -> R:
    """:func:`perform_call` awaited, for an ``async def`` task from a running loop."""
    runner, ctx = _prepared(task, args, kwargs or {}, job_id, attempt, columns)
    return await _awaited(task, runner, ctx)


async def _awaited(task: Task[Any, R], runner: TaskRunner, ctx: JobContext) -> R:
    try:
        returned = await runner(ctx)
    except BaseException as exc:  # noqa: BLE001 - re-raised as the function raised it
        raise _as_raised(exc) from None
    return _result(task, ctx.job_id, returned)


def _prepared(
    task: Task[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    job_id: int,
    attempt: int,
    columns: Mapping[str, Any] | None,
) -> tuple[TaskRunner, JobContext]:
    if not isinstance(task, Task):
        raise InvalidInput(f"perform() runs a task (made by registry.task), got {task!r}")
    runner = getattr(task.registry, "get", lambda name: None)(task.name)
    if not isinstance(runner, TaskRunner):
        raise InvalidInput(f"task {task.name!r} is not registered with its registry")
    signature = task.signature
    payload = signature.payload_of(signature.arguments_of(tuple(args), kwargs))
    # As the queue stores it: what does not survive JSON fails here, as at enqueue.
    payload = json.loads(json.dumps(payload))
    max_retries = task.defaults.max_retries
    context_type = AsyncJobContext if asyncio.iscoroutinefunction(task.function) else JobContext
    ctx = context_type(
        job_id=job_id,
        attempt=attempt,
        type=task.name,
        queue=task.defaults.queue,
        payload=payload,
        payload_ref=None,
        worker_id=PERFORM_WORKER_ID,
        retries_left=max(0, (max_retries if max_retries is not None else 0) - (attempt - 1)),
        retry_count=attempt - 1,
        lease_seconds=PERFORM_LEASE_SECONDS,
        leased_at=time.monotonic(),
        shutdown=threading.Event(),
        columns=dict(columns or {}),
    )
    return runner, ctx


def _as_raised(exc: BaseException) -> BaseException:
    """What the task's function raised: the runner turns a plain exception into a
    classified ``JobError`` (``raise ... from`` the original), which a test does not
    want to see instead of its own."""
    cause = exc.__cause__
    return cause if cause is not None and cause is not exc else exc


def _result(task: Task[Any, R], job_id: int, returned: Any) -> R:
    if not isinstance(returned, JobResult):
        return returned  # type: ignore[no-any-return]
    try:
        stored = json.loads(json.dumps(returned.value))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"task {task.name!r} returned a value that cannot be stored as JSON ({exc})"
        ) from None
    return task._value(job_id, stored)
