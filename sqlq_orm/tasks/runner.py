"""How the worker runs a task: a handler that turns the job's stored arguments back
into a call of the task function.

The worker knows handlers only (``handler(ctx)``); a task is registered as one of
these runners, so the worker needs nothing task-specific. A job whose stored
arguments no longer bind to the function (a deploy changed its signature) fails at
once, not retried, with :data:`~sqlq_orm.tasks.signature.ARGUMENTS_DO_NOT_BIND`; a
run whose return value does not match the return annotation fails, not retried, with
:data:`RESULT_DOES_NOT_MATCH`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlq_orm.core.results import JobResult
from sqlq_orm.errors import JobError
from sqlq_orm.tasks.failures import FailurePolicy
from sqlq_orm.tasks.middleware import TaskMiddleware, through_run, through_run_async
from sqlq_orm.tasks.signature import ARGUMENTS_DO_NOT_BIND, ArgumentsDoNotBind, TaskSignature
from sqlq_orm.worker.handlers import AsyncJobContext, JobContext

if TYPE_CHECKING:
    from sqlq_orm.tasks.task import Task

RESULT_DOES_NOT_MATCH = "INVALID_RESULT:DOES_NOT_MATCH_ANNOTATION"
"""The error code of a run whose return value does not match the task's return
annotation (not retried: the same code would return the same kind of value)."""


def _annotation(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else repr(hint).replace("typing.", "")


class TaskRunner:
    """The handler of a plain (``def``) task."""

    def __init__(
        self,
        function: Callable[..., Any],
        signature: TaskSignature,
        failures: FailurePolicy | None = None,
        middlewares: Sequence[TaskMiddleware] = (),
    ) -> None:
        self.function = function
        self.signature = signature
        self.failures = failures or FailurePolicy()
        self.middlewares = middlewares  # the registry's list: later additions count
        self.task: Task[Any, Any] | None = None  # set once the Task exists
        first = next(iter(inspect.signature(function).parameters.values()), None)
        self._context_by_keyword = (
            signature.context is not None
            and first is not None
            and first.kind is inspect.Parameter.KEYWORD_ONLY
        )

    def __repr__(self) -> str:
        return f"<task {self.signature.task_name}>"

    def arguments(self, ctx: JobContext) -> tuple[list[Any], dict[str, Any]]:
        """The call for ``ctx``'s job, or a non-retryable :class:`JobError`."""
        try:
            args, kwargs = self.signature.call_of(ctx.payload)
        except ArgumentsDoNotBind as exc:
            raise JobError(ARGUMENTS_DO_NOT_BIND, str(exc), retryable=False) from None
        context = self.signature.context
        if context is not None:
            if self._context_by_keyword:
                kwargs[context] = ctx
            else:
                args.insert(0, ctx)
        return args, kwargs

    def stored(self, value: Any) -> JobResult | None:
        """The return value as the job's result (None: nothing to store), or a
        non-retryable :class:`JobError` (:data:`RESULT_DOES_NOT_MATCH`) when it does
        not match the return annotation: the job ends FAILED, not SUCCEEDED with a
        result nobody can read back as promised."""
        problem = self.signature.result_problem(value)
        if problem is not None:
            raise JobError(
                RESULT_DOES_NOT_MATCH,
                f"task {self.signature.task_name!r} returned a value that does not match "
                f"its return annotation {_annotation(self.signature.result_hint)}: {problem}",
                retryable=False,
            )
        if value is None:
            return None
        encode = self.signature.result_converter.encode
        return JobResult(encode(value) if encode is not None else value)

    def __call__(self, ctx: JobContext) -> Any:
        args, kwargs = self.arguments(ctx)
        try:
            if self.middlewares and self.task is not None:
                returned = through_run(
                    self.middlewares, self.task, ctx, lambda: self.function(*args, **kwargs)
                )
            else:
                returned = self.function(*args, **kwargs)
        except Exception as exc:
            raise self.failures.classify(
                exc, self.signature.task_name, ctx.retry_count + 1
            ) from exc
        # A returned string is the task's result, not a result_ref (as for a handler).
        return self.stored(returned)


class AsyncTaskRunner(TaskRunner):
    """The handler of an ``async def`` task, awaited on the worker's event loop."""

    async def __call__(self, ctx: AsyncJobContext) -> Any:  # type: ignore[override]
        args, kwargs = self.arguments(ctx)
        try:
            if self.middlewares and self.task is not None:
                returned = await through_run_async(
                    self.middlewares, self.task, ctx, lambda: self.function(*args, **kwargs)
                )
            else:
                returned = await self.function(*args, **kwargs)
        except Exception as exc:
            raise self.failures.classify(
                exc, self.signature.task_name, ctx.retry_count + 1
            ) from exc
        return self.stored(returned)
