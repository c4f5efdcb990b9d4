"""Records handler outcomes in groups: one transaction per kind for many jobs.

Handler threads hand an outcome over and go on to the next job at once; the
completer's thread takes everything waiting and records it: all plain successes with
one :meth:`~sqlq_orm.Queue.succeed_many`, all failures (retried or final) with one
:meth:`~sqlq_orm.Queue.fail_many`, each job still fenced by its own lease. While one
batch commits the next one gathers, so under load many jobs share a commit and a
lone job waits for nobody. A job whose lease turned out lost is reported on its own
(its outcome discarded); the rest of its batch is recorded. A group write that fails
for a reason that would come back (a value the database refuses) is done again job by
job, and a lone refused outcome fails its job with ``INTERNAL:OUTCOME_REFUSED``: one
job's bad value never costs another its outcome, and is never tried forever.

A run keeps its slot (and its lease keeps being renewed) until its outcome is
recorded. If the database is away, the batch is tried again every ``retry_pause``
seconds while the leases are surely still held; a run that meanwhile self-fenced is
discarded, never recorded late.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlq_orm.core.error_codes import summarize_detail
from sqlq_orm.db.transient import is_transient
from sqlq_orm.errors import InvalidInput, LeaseLost
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import JobFailure
from sqlq_orm.worker.outcomes import (
    INVALID_RESULT,
    INVALID_SNOOZE,
    OUTCOME_REFUSED,
    PLAIN_SUCCESS,
    Outcome,
    one_line,
)
from sqlq_orm.worker.runs import JobRun, RunTable
from sqlq_orm.worker.stats import WorkerStats

log = logging.getLogger("sqlq_orm.worker")

Pending = tuple[JobRun, Outcome]


class Completer:
    """Records the outcomes handler threads :meth:`submit`, in groups, in its own thread.

    With ``threaded=False`` it has no thread: :meth:`submit` records the outcome before
    it returns (running jobs one at a time in the caller's thread,
    :mod:`sqlq_orm.worker.in_process`).
    """

    def __init__(
        self,
        queue: Queue,
        runs: RunTable,
        stats: WorkerStats,
        *,
        retry_pause: float,
        max_batch: int = 500,
        threaded: bool = True,
    ) -> None:
        self._queue = queue
        self._runs = runs
        self._stats = stats
        self._retry_pause = retry_pause
        self._max_batch = max_batch
        self._condition = threading.Condition(threading.Lock())  # never taken twice
        self._waiting: list[Pending] = []
        self._maybe_written: set[int] = set()  # jobs whose recording broke off mid-way
        self._closed = False
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self._loop, name="sqlq-completer", daemon=True)
            self._thread.start()

    def submit(self, run: JobRun, outcome: Outcome) -> None:
        """Record ``outcome`` for ``run`` (a FINISHING run) soon; returns at once (without
        a thread: once recorded)."""
        if self._thread is None:
            self._record([(run, outcome)])
            return
        with self._condition:
            self._waiting.append((run, outcome))
            self._condition.notify()

    def close(self, timeout: float = 30.0) -> None:
        """Record what is waiting, then stop the thread."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        while True:
            with self._condition:
                while not self._waiting and not self._closed:
                    self._condition.wait()
                if not self._waiting:
                    return
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
            try:
                self._record(batch)
            except Exception:  # noqa: BLE001 - the completer must survive anything
                log.exception("recording %d outcomes failed; discarding them", len(batch))
                for run, _ in batch:
                    self._discard(run, "its outcome could not be recorded")

    def _record(self, batch: list[Pending]) -> None:
        successes: list[Pending] = []
        with_result: list[Pending] = []
        snoozes: list[Pending] = []
        failures: list[Pending] = []
        for pending in batch:  # one pass: the batch is mostly plain successes
            outcome = pending[1]
            if outcome is PLAIN_SUCCESS:
                successes.append(pending)
            elif outcome.snoozed:
                snoozes.append(pending)
            elif not outcome.succeeded:
                failures.append(pending)
            elif _has_result(outcome):
                with_result.append(pending)
            else:
                successes.append(pending)
        self._until_recorded(successes, self._record_successes)
        for one in with_result:
            self._until_recorded([one], self._record_success_with_result)
        for one in snoozes:
            self._until_recorded([one], self._record_snooze)
        self._until_recorded(failures, self._record_failures)

    def _until_recorded(
        self, pending: list[Pending], record: Callable[[list[Pending]], None]
    ) -> None:
        """``record(pending)``, again while the database is away and leases are held;
        after an error that would only come back (:func:`is_transient`), job by job."""
        while pending:
            try:
                record(pending)
                self._maybe_written.difference_update(run.lease.job_id for run, _ in pending)
                return
            except Exception as exc:  # noqa: BLE001 - a refusal must not cost the batch
                if not is_transient(exc):
                    self._after_refusal(pending, record, exc)
                    return
                log.warning(
                    "could not record %d outcome(s) (%s); retrying",
                    len(pending),
                    one_line(str(exc)),
                )
                # The COMMIT may have landed before the connection broke: from here on
                # a lost lease may be this very outcome, recorded (see _discard).
                self._maybe_written.update(run.lease.job_id for run, _ in pending)
            still_held = []
            for run, outcome in pending:
                reason = run.context.stop_reason
                if reason is None:
                    still_held.append((run, outcome))
                else:
                    self._discard(run, reason)
            pending = still_held
            if pending:
                time.sleep(self._retry_pause)

    def _after_refusal(
        self, pending: list[Pending], record: Callable[[list[Pending]], None], exc: Exception
    ) -> None:
        """A group write failed for a reason that would come back: record each outcome
        on its own (one job's bad value never costs another its outcome). A lone outcome
        the database refuses fails its job with ``INTERNAL:OUTCOME_REFUSED`` instead; if
        even that is refused, it is discarded (the sweeper takes the job back)."""
        reason = f"{type(exc).__name__}: {one_line(str(exc))}"
        if len(pending) > 1:
            log.warning(
                "recording %d outcome(s) together failed (%s); recording them one by one",
                len(pending),
                reason,
            )
            for one in pending:
                self._until_recorded([one], record)
            return
        [(run, outcome)] = pending
        if outcome.error_code == OUTCOME_REFUSED:
            log.error("%s: even its failure could not be recorded (%s)", run.describe(), reason)
            self._discard(run, "its outcome could not be recorded")
            return
        log.error("%s: its outcome was refused (%s); failing it", run.describe(), reason)
        refused = Outcome(
            OUTCOME_REFUSED,
            summarize_detail(f"recording {_described(outcome)} failed: {reason}"),
            retryable=False,
        )
        self._until_recorded([(run, refused)], self._record_failures)

    def _record_successes(self, pending: list[Pending]) -> None:
        lost = {lease.job_id for lease in self._queue.succeed_many([r.lease for r, _ in pending])}
        succeeded = []
        for run, _ in pending:
            if run.lease.job_id in lost:
                self._discard(run, str(LeaseLost(run.lease.job_id)))
            else:
                succeeded.append(run)
        if not succeeded:
            return
        self._stats.add("succeeded", len(succeeded))
        if log.isEnabledFor(logging.INFO):  # describe() per job costs more than the check
            for run in succeeded:
                log.info("%s succeeded", run.describe())
        self._runs.finished_many(succeeded)

    def _record_success_with_result(self, pending: list[Pending]) -> None:
        [(run, outcome)] = pending
        try:
            self._queue.succeed(run.lease, result_ref=outcome.result_ref, result=outcome.result)
        except LeaseLost as exc:
            self._discard(run, str(exc))
        except InvalidInput as exc:  # a result the queue refuses (not JSON, too big)
            refused = Outcome(INVALID_RESULT, str(exc), retryable=False)
            self._until_recorded([(run, refused)], self._record_failures)
        else:
            self._succeeded(run)

    def _record_snooze(self, pending: list[Pending]) -> None:
        [(run, outcome)] = pending
        try:
            went_to = self._queue.snooze(run.lease, outcome.snooze or 0, outcome.error_detail)
        except LeaseLost as exc:
            self._discard(run, str(exc))
        except InvalidInput as exc:  # a snooze the queue refuses (negative, not a number)
            refused = Outcome(INVALID_SNOOZE, str(exc), retryable=False)
            self._until_recorded([(run, refused)], self._record_failures)
        else:
            self._stats.add("snoozed")
            log.info("%s snoozed %ss -> %s", run.describe(), outcome.snooze, went_to.value)
            self._runs.finished(run)

    def _record_failures(self, pending: list[Pending]) -> None:
        went_to = self._queue.fail_many(
            [
                JobFailure(
                    run.lease,
                    o.error_code or "",
                    o.error_detail,
                    retryable=o.retryable,
                    retry_in=o.retry_in,
                )
                for run, o in pending
            ]
        )
        for run, outcome in pending:
            status = went_to[run.lease.job_id]
            if status is None:
                self._discard(run, str(LeaseLost(run.lease.job_id)))
                continue
            self._stats.add("failed")
            log.warning(
                "%s failed with %s (%s); job is now %s",
                run.describe(),
                outcome.error_code,
                outcome.error_detail or "no detail",
                status,
            )
            self._runs.finished(run)

    def _succeeded(self, run: JobRun) -> None:
        self._stats.add("succeeded")
        if log.isEnabledFor(logging.INFO):  # describe() per job costs more than the check
            log.info("%s succeeded", run.describe())
        self._runs.finished(run)

    def _discard(self, run: JobRun, reason: str) -> None:
        self._stats.add("discarded")
        if run.lease.job_id in self._maybe_written:
            self._maybe_written.discard(run.lease.job_id)
            reason = (
                f"{reason.replace('; nothing was written', '')}; an earlier try to record "
                "it broke off on the connection and may have committed, so whether it "
                f"was written is unknown here: `sqlq show {run.lease.job_id}` tells, and "
                "if it was not, the sweeper retakes the job when its lease expires"
            )
        log.warning("%s: outcome discarded (%s)", run.describe(), reason)
        self._runs.finished(run)


def _described(outcome: Outcome) -> str:
    """What the refused outcome was, for the detail of the failure that replaces it."""
    if outcome.snoozed:
        return "its snooze"
    if outcome.succeeded:
        return "its success"
    return f"its failure {outcome.error_code}"


def _has_result(outcome: Outcome) -> bool:
    """Whether a success has something to store (recorded one at a time)."""
    return outcome.result_ref is not None or outcome.result is not None
