"""Running one job: call the handler (on a handler thread, or await it as a task on the
worker's event loop), then hand its outcome over.

The handler is called with no transaction open. Its outcome goes to the
:class:`~sqlq_orm.worker.completer.Completer`, which records it with the lease, in a
group with other jobs' outcomes; a job the worker has meanwhile lost is never recorded
twice (its outcome is discarded).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sqlq_orm.core import error_codes, validation
from sqlq_orm.core.results import JobResult
from sqlq_orm.errors import InvalidInput, JobError, MaxRuntimeInterrupt, Snooze
from sqlq_orm.schema.mixins import REF_MAX
from sqlq_orm.worker.completer import Completer
from sqlq_orm.worker.handlers import AsyncJobContext, Handler, HandlerRegistry
from sqlq_orm.worker.outcomes import INVALID_RESULT, PLAIN_SUCCESS, Outcome, outcome_of_exception
from sqlq_orm.worker.prefetch import PrefetchGauge
from sqlq_orm.worker.runs import JobRun, RunTable
from sqlq_orm.worker.starting import Starter
from sqlq_orm.worker.stats import WorkerStats

log = logging.getLogger("sqlq_orm.worker")


class JobExecutor:
    """Runs claimed jobs' handlers and hands their outcomes to the ``completer``.

    Each handler's duration goes to ``prefetch``, which bounds how many jobs the worker
    claims ahead of its threads.
    """

    def __init__(
        self,
        handlers: HandlerRegistry,
        runs: RunTable,
        stats: WorkerStats,
        completer: Completer,
        prefetch: PrefetchGauge,
        *,
        worker_id: str,
        starter: Starter | None = None,
    ) -> None:
        self.starter = starter  # starts prefetched (CLAIMED) jobs before their handler
        self.prefetch = prefetch
        self.handlers = handlers
        self.runs = runs
        self.stats = stats
        self.completer = completer
        self.worker_id = worker_id

    def execute(self, run: JobRun) -> None:
        """Call the handler of ``run``'s job and hand over its outcome (never raises)."""
        if not run.lease.started and self.starter is not None and not self.starter.start(run):
            return  # its lease was lost, or the database refused the start
        if not self.runs.begin_handler(run):
            return  # given up on while it waited for a thread (lease lost, shutdown)
        began = time.monotonic()
        try:
            outcome = self._call_handler(run)
        finally:
            self.runs.end_handler(run)
            self.prefetch.record(time.monotonic() - began)
        self._hand_over(run, outcome)

    async def execute_async(self, run: JobRun) -> None:
        """Await the ``async def`` handler of ``run``'s job in the current task and
        hand over its outcome (never raises, but for the ``GeneratorExit`` of the
        coroutine itself being closed; a cancellation after the worker gave up on the
        job ends here, its outcome discarded)."""
        context = run.context
        task = asyncio.current_task()
        if isinstance(context, AsyncJobContext) and task is not None:
            context._attach(task)  # from now on, giving up on the job cancels the task
        if (
            not run.lease.started
            and self.starter is not None
            and not await asyncio.to_thread(self.starter.start, run)
        ):
            return  # as in execute(); the start's write is kept off the loop's thread
        if not self.runs.begin_handler(run):
            return
        began = time.monotonic()
        try:
            outcome = await self._await_handler(run)
        finally:
            self.runs.end_handler(run)
            self.prefetch.record(time.monotonic() - began)
        self._hand_over(run, outcome)

    def _hand_over(self, run: JobRun, outcome: Outcome) -> None:
        reason = self.runs.begin_finishing(run)
        if reason is not None:
            self.stats.add("discarded")
            log.warning("%s: outcome discarded (%s)", run.describe(), reason)
            self.runs.finished(run)
            return
        self.completer.submit(run, outcome)

    def _handler_of(self, run: JobRun) -> Handler:
        """The job's handler, with the payload decoded into its context."""
        return handler_of(self.handlers, run, self.worker_id)

    def _call_handler(self, run: JobRun) -> Outcome:
        return call_handler(self.handlers, run, self.worker_id)

    async def _await_handler(self, run: JobRun) -> Outcome:
        return await await_handler(self.handlers, run, self.worker_id)

    @staticmethod
    def _outcome_of_error(run: JobRun, exc: BaseException) -> Outcome:
        outcome = outcome_of_exception(exc)
        if not isinstance(exc, (JobError, Snooze)):  # the handler's own say: no traceback
            log.error("%s raised %s", run.describe(), outcome.error_detail, exc_info=exc)
        return outcome

    @staticmethod
    def _outcome_of_return(returned: Any) -> Outcome:
        if returned is None:
            return PLAIN_SUCCESS
        if isinstance(returned, JobResult):
            # Checked (JSON, size) where it is recorded, by the queue.
            return Outcome(result=returned.value)
        result_ref = returned if isinstance(returned, str) else None
        try:
            validation.optional_name("result_ref", result_ref, REF_MAX)
        except InvalidInput as exc:
            return Outcome(INVALID_RESULT, str(exc), retryable=False)
        return Outcome(result_ref=result_ref)


def handler_of(handlers: HandlerRegistry, run: JobRun, worker_id: str) -> Handler:
    """``run``'s handler, with the payload decoded into its context (a job type
    nobody handles, or a corrupt payload, raises the ``JobError`` that fails it)."""
    lease = run.lease
    handler = handlers.get(lease.type)
    if handler is None:
        known = ", ".join(handlers.types) or "none"
        raise JobError(
            error_codes.UNKNOWN_TYPE,
            f"no handler for job type {lease.type!r} on worker {worker_id} (known: {known})",
            retryable=False,
        )
    run.context.payload = lease.payload
    return handler


def call_handler(handlers: HandlerRegistry, run: JobRun, worker_id: str) -> Outcome:
    """Call ``run``'s handler here and now, and classify what it came to (never raises).

    The single-run path, with no pool, no lease and no database: the thread pool
    calls it on a handler thread, a process pool's child in its own process.
    """
    context = run.context
    try:
        handler = handler_of(handlers, run, worker_id)
        if run.lease.max_runtime_seconds is None:
            returned = handler(context)
        else:  # interruptible at its max runtime (sqlq_orm.worker.interrupt)
            returned = context._in_thread().call(lambda: handler(context))
    except MaxRuntimeInterrupt:
        log.warning("%s interrupted at its max runtime", run.describe())
        return Outcome(error_codes.MAX_RUNTIME, "interrupted at its max runtime")
    except BaseException as exc:  # noqa: BLE001 - a handler must never kill its thread silently
        return JobExecutor._outcome_of_error(run, exc)
    return JobExecutor._outcome_of_return(returned)


async def await_handler(handlers: HandlerRegistry, run: JobRun, worker_id: str) -> Outcome:
    """:func:`call_handler` for an ``async def`` handler, awaited in the current task."""
    try:
        returned = await handler_of(handlers, run, worker_id)(run.context)
    except BaseException as exc:  # noqa: BLE001 - nor its task
        if isinstance(exc, GeneratorExit):
            # The coroutine itself is being closed: its task was dropped with the
            # loop (an abandoned task, collected after shutdown). Nothing is left
            # to record, and logging a traceback from inside the garbage
            # collector can break whatever the interrupted thread was parsing
            # (Python 3.11's tracebacks parse source, and that parser's
            # recursion count is shared: "AST constructor recursion depth
            # mismatch").
            raise
        if isinstance(exc, asyncio.CancelledError) and run.context._given_up:
            # Cancelled because the worker gave up on it: discarded, not a failure.
            return Outcome(error_code=None)
        return JobExecutor._outcome_of_error(run, exc)
    return JobExecutor._outcome_of_return(returned)
