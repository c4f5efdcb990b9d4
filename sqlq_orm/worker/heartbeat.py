"""The heartbeat thread: renews every lease a worker holds, says the worker is alive,
and stops jobs at their max runtime.

Every ``interval`` seconds one round renews every held lease with one statement
(:meth:`~sqlq_orm.Queue.heartbeat_many`, each lease still fenced by its token) and then
upserts the worker's liveness row. A round gives up on a job (see
:meth:`~sqlq_orm.worker.runs.RunTable.abandon`) when the heartbeat is refused
(``LeaseLost``), when the job is past its max runtime (``MaxRuntimeExceeded``: the
lease is no longer renewed, so the sweeper ends it with ``TIMEOUT:MAX_RUNTIME``), or
when no heartbeat got through for a whole lease: the worker *self-fences*, measured
with ``time.monotonic()`` from the last heartbeat that succeeded.

Max runtime is also watched at each job's own deadline, not only at the next round:
between rounds the thread wakes at the earliest deadline of the jobs it holds and
gives up on those past it the same way (``should_stop`` turns true, the outcome is
discarded, and the sweeper ends the job with ``TIMEOUT:MAX_RUNTIME``).

A heartbeat that meets a dead pooled connection (the server's idle timeout, a
restarted proxy) is sent once more on a fresh one before it counts as missed: the
database is up, only that connection was gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from sqlq_orm.errors import LeaseLost, MaxRuntimeExceeded
from sqlq_orm.queue.queue import Queue
from sqlq_orm.worker.outcomes import one_line
from sqlq_orm.worker.runs import JobRun, RunTable

log = logging.getLogger("sqlq_orm.worker")

T = TypeVar("T")


def once_more_if_disconnected(call: Callable[[], T], what: str) -> T:
    """``call()``, repeated once if it failed only because its connection was dead.

    SQLAlchemy marks such an error ``connection_invalidated`` and drops the pooled
    connections of that age, so the second call gets a fresh one. Any other error,
    or a second failure, is raised.
    """
    try:
        return call()
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        log.info("%s met a dead connection (%s); retrying on a fresh one", what, one_line(str(exc)))
    return call()


class Heartbeat:
    """Renews the leases in ``runs`` every ``interval`` seconds, in its own thread.

    ``touch_liveness`` is called at the end of every round (it upserts the worker's
    registry row and must not raise).
    """

    def __init__(
        self,
        queue: Queue,
        runs: RunTable,
        *,
        lease_seconds: int,
        interval: float,
        touch_liveness: Callable[[], None],
    ) -> None:
        self.queue = queue
        self.runs = runs
        self.lease_seconds = lease_seconds
        self.interval = interval
        self.touch_liveness = touch_liveness
        self._done = threading.Event()
        self._wakeup = threading.Event()  # stop asked for, or a new deadline to watch
        self._thread = threading.Thread(target=self._loop, name="sqlq-heartbeat", daemon=True)
        self.stop_at_deadline: Callable[[JobRun], bool] = lambda run: False
        """Asked first for a run past its deadline: True if the executor stopped it
        itself (and records ``TIMEOUT:MAX_RUNTIME``); else the worker gives up on it."""

    def start(self) -> None:
        """Start the heartbeat thread."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the current round (waiting up to ``timeout`` seconds for it)."""
        self._done.set()
        self._wakeup.set()
        self._thread.join(timeout=timeout)

    def watch_deadline(self) -> None:
        """A run with a max-runtime deadline was added: look at the deadlines again."""
        self._wakeup.set()

    def _loop(self) -> None:
        next_round = time.monotonic() + self.interval
        while not self._done.is_set():
            if time.monotonic() >= next_round:
                try:
                    self.beat_once()
                except Exception:  # noqa: BLE001 - the heartbeat thread must survive anything
                    log.exception("heartbeat round failed")
                next_round = time.monotonic() + self.interval
                continue
            # Cleared before looking, so a run added meanwhile still wakes the wait.
            self._wakeup.clear()
            earliest = self.stop_overdue()
            wake_at = next_round if earliest is None else min(next_round, earliest)
            self._wakeup.wait(max(0.0, wake_at - time.monotonic()))

    def stop_overdue(self) -> float | None:
        """Give up on the running jobs past their deadline; return the next deadline."""
        now = time.monotonic()
        upcoming: list[float] = []
        for run in self.runs.held():
            if run.deadline is None:
                continue
            if now < run.deadline:
                upcoming.append(run.deadline)
            elif self.stop_at_deadline(run):
                run.deadline = None  # stopped by its executor: not asked again
            else:
                reason = str(MaxRuntimeExceeded(run.lease.job_id, run.lease.max_runtime_seconds))
                self.runs.abandon(run, reason, runtime_exceeded=True)
        return min(upcoming, default=None)

    def beat_once(self) -> None:
        """One round: renew every held lease with one statement, then record that the
        worker is alive."""
        held = []
        for run in self.runs.held():
            if run.context._given_up:
                self.runs.abandon(run, run.context.stop_reason or "given up")
            else:
                held.append(run)
        if held:
            self._renew(held)
        self.touch_liveness()

    def _renew(self, held: list[JobRun]) -> None:
        # Sent even when overdue: if the database still takes it, nobody has taken
        # the job over and the lease is ours again.
        sent = time.monotonic()
        # One statement per lease length: the worker's, and each task's own lease=.
        by_length: dict[int, list[JobRun]] = {}
        for run in held:
            length = int(run.context.lease_seconds)
            by_length.setdefault(length, []).append(run)
        results: dict[int, int | LeaseLost | MaxRuntimeExceeded] = {}
        for length, runs in by_length.items():
            results.update(self._renew_for(runs, length))
        for run in held:
            result = results.get(run.lease.job_id)
            if isinstance(result, MaxRuntimeExceeded):
                self.runs.abandon(run, str(result), runtime_exceeded=True)
                continue
            if isinstance(result, LeaseLost):
                # FINISHING or DONE: our own succeed/fail got there first.
                self.runs.abandon(run, str(result))
                continue
            if result is not None:
                run.context._renewed(sent)
            reason = run.context.stop_reason  # self-fences once a whole lease went by
            if reason is not None:
                self.runs.abandon(run, reason)

    def _renew_for(
        self, runs: list[JobRun], lease_seconds: int
    ) -> dict[int, int | LeaseLost | MaxRuntimeExceeded]:
        try:
            return once_more_if_disconnected(
                lambda: self.queue.heartbeat_many([run.lease for run in runs], lease_seconds),
                f"heartbeat of {len(runs)} lease(s)",
            )
        except SQLAlchemyError as exc:
            log.warning("heartbeat of %d lease(s) failed (%s)", len(runs), one_line(str(exc)))
            return {}
