"""Running one job in its thread: call the handler, then report what it came to.

The handler is called with no transaction open. Its outcome is reported with the
lease (``succeed`` / ``fail``), so a job the worker has meanwhile lost is never
recorded twice: the report raises ``LeaseLost`` and the outcome is discarded.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.core import error_codes
from sqlq_orm.errors import InvalidInput, JobError, LeaseLost
from sqlq_orm.queue.queue import Queue
from sqlq_orm.worker.completer import SuccessBatcher
from sqlq_orm.worker.handlers import HandlerRegistry
from sqlq_orm.worker.outcomes import INVALID_RESULT, Outcome, one_line, outcome_of_exception
from sqlq_orm.worker.runs import JobRun, RunTable
from sqlq_orm.worker.stats import WorkerStats

log = logging.getLogger("sqlq_orm.worker")


class JobExecutor:
    """Runs claimed jobs' handlers and reports their outcomes; one call per job thread.

    ``successes`` (set while the worker runs) groups plain successes into one
    transaction; ``retry_pause`` is how long to wait before reporting again when the
    database is away.
    """

    def __init__(
        self,
        queue: Queue,
        handlers: HandlerRegistry,
        runs: RunTable,
        stats: WorkerStats,
        *,
        worker_id: str,
        retry_pause: float,
    ) -> None:
        self.queue = queue
        self.handlers = handlers
        self.runs = runs
        self.stats = stats
        self.worker_id = worker_id
        self.retry_pause = retry_pause
        self.successes: SuccessBatcher | None = None

    def execute(self, run: JobRun) -> None:
        """Call the handler of ``run``'s job and report its outcome (a thread's target)."""
        try:
            self._finish(run, self._call_handler(run))
        finally:
            self.runs.finished(run)

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
        return Outcome(result_ref=returned if isinstance(returned, str) else None)

    def _finish(self, run: JobRun, outcome: Outcome) -> None:
        reason = self.runs.begin_finishing(run)
        if reason is not None:
            self._discard(run, reason)
            return
        while True:
            try:
                if outcome.succeeded:
                    self._record_success(run, outcome)
                    self.stats.add("succeeded")
                    log.info("%s succeeded", run.describe())
                else:
                    assert outcome.error_code is not None
                    went_to = self.queue.fail(
                        run.lease,
                        outcome.error_code,
                        outcome.error_detail,
                        retryable=outcome.retryable,
                    )
                    self.stats.add("failed")
                    log.warning(
                        "%s failed with %s (%s); job is now %s",
                        run.describe(),
                        outcome.error_code,
                        outcome.error_detail or "no detail",
                        went_to,
                    )
                return
            except LeaseLost as exc:
                self._discard(run, str(exc))
                return
            except InvalidInput as exc:
                # Only what the handler handed back can be invalid here (a result_ref).
                outcome = Outcome(INVALID_RESULT, str(exc), retryable=False)
            except SQLAlchemyError as exc:
                # The database is locked or away. Keep trying while the lease (renewed
                # by the heartbeat thread meanwhile) is surely still ours.
                stop_reason = run.context.stop_reason
                if stop_reason is not None:
                    self._discard(run, stop_reason)
                    return
                log.warning(
                    "%s: could not record its outcome (%s); retrying",
                    run.describe(),
                    one_line(str(exc)),
                )
                time.sleep(self.retry_pause)

    def _record_success(self, run: JobRun, outcome: Outcome) -> None:
        """Report a success; raise LeaseLost or the database error like ``succeed``."""
        if outcome.result_ref is not None or self.successes is None:
            self.queue.succeed(run.lease, result_ref=outcome.result_ref)
            return
        result = self.successes.submit(run.lease)
        if result is SuccessBatcher.LOST:
            raise LeaseLost(run.lease.job_id)
        if isinstance(result, BaseException):
            raise result

    def _discard(self, run: JobRun, reason: str) -> None:
        self.stats.add("discarded")
        log.warning("%s: outcome discarded (%s)", run.describe(), reason)
