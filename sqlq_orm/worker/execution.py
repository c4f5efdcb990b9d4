"""Running one job on a handler thread: call the handler, then hand its outcome over.

The handler is called with no transaction open. Its outcome goes to the
:class:`~sqlq_orm.worker.completer.Completer`, which records it with the lease, in a
group with other jobs' outcomes; a job the worker has meanwhile lost is never recorded
twice (its outcome is discarded).
"""

from __future__ import annotations

import logging
import time

from sqlq_orm.core import error_codes, validation
from sqlq_orm.errors import InvalidInput, JobError
from sqlq_orm.schema.mixins import REF_MAX
from sqlq_orm.worker.completer import Completer
from sqlq_orm.worker.handlers import HandlerRegistry
from sqlq_orm.worker.outcomes import INVALID_RESULT, Outcome, outcome_of_exception
from sqlq_orm.worker.prefetch import PrefetchGauge
from sqlq_orm.worker.runs import JobRun, RunTable
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
    ) -> None:
        self.prefetch = prefetch
        self.handlers = handlers
        self.runs = runs
        self.stats = stats
        self.completer = completer
        self.worker_id = worker_id

    def execute(self, run: JobRun) -> None:
        """Call the handler of ``run``'s job and hand over its outcome (never raises)."""
        if not self.runs.begin_handler(run):
            return  # given up on while it waited for a thread (lease lost, shutdown)
        began = time.monotonic()
        try:
            outcome = self._call_handler(run)
        finally:
            self.runs.end_handler(run)
            self.prefetch.record(time.monotonic() - began)
        reason = self.runs.begin_finishing(run)
        if reason is not None:
            self.stats.add("discarded")
            log.warning("%s: outcome discarded (%s)", run.describe(), reason)
            self.runs.finished(run)
            return
        self.completer.submit(run, outcome)

    def _call_handler(self, run: JobRun) -> Outcome:
        lease, context = run.lease, run.context
        try:
            handler = self.handlers.get(lease.type)
            if handler is None:
                known = ", ".join(self.handlers.types) or "none"
                raise JobError(
                    error_codes.UNKNOWN_TYPE,
                    f"no handler for job type {lease.type!r} on worker {self.worker_id} "
                    f"(known: {known})",
                    retryable=False,
                )
            context.payload = lease.payload
            returned = handler(context)
        except JobError as exc:  # classified by the handler: no traceback needed
            return outcome_of_exception(exc)
        except BaseException as exc:  # noqa: BLE001 - a handler must never kill its thread silently
            outcome = outcome_of_exception(exc)
            log.error("%s raised %s", run.describe(), outcome.error_detail, exc_info=exc)
            return outcome
        result_ref = returned if isinstance(returned, str) else None
        try:
            validation.optional_name("result_ref", result_ref, REF_MAX)
        except InvalidInput as exc:
            return Outcome(INVALID_RESULT, str(exc), retryable=False)
        return Outcome(result_ref=result_ref)
