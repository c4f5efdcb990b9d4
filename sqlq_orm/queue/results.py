"""Results: :meth:`~Results.result` reads what a job returned, :meth:`~Results.wait`
waits for it.

A job's result is what its handler returned as a
:class:`~sqlq_orm.core.results.JobResult` (a task's return value), stored as JSON with
the job (``Queue.succeed(lease, result=...)``), and pruned with it. A job that ended
FAILED or CANCELLED has no result: asking raises
:class:`~sqlq_orm.errors.JobFailed` with its error code and detail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlq_orm.core import validation
from sqlq_orm.core.results import decode_result
from sqlq_orm.errors import JobFailed, JobNotFound, ResultNotReady, WaitTimeout
from sqlq_orm.queue.core import QueueCore
from sqlq_orm.queue.finish_listener import finish_listener
from sqlq_orm.schema.states import JobStatus

_FIRST_PAUSE = 0.005
_PAUSE_GROWTH = 1.5
_LONGEST_PAUSE = 0.02
"""Where nothing hears other processes' finishes (MariaDB, an in-memory SQLite
database, a listener that failed), a wait reads the job by its primary key after
5 ms, then ever less often, up to every 20 ms: a job finished by a worker in another
process is seen within about 20 ms, at one indexed read per pause."""
_LONGEST_PAUSE_LISTENING = 0.5
"""With a finish listener up (:mod:`sqlq_orm.queue.finish_listener`) the wake-up is the
news; the reads between are a safety net for ends that send none (a job cancelled
with its failed parent, or by a bulk action)."""
_LISTENER_READY_SECONDS = 2.0
"""How long a first wait gives the listener to connect before it reads: a finish
between that read and the ``LISTEN`` would otherwise go unheard until the next read."""


def _pause_until_woken(seconds: float, wake: threading.Event) -> None:
    wake.wait(seconds)


class Results(QueueCore):
    """Reading a job's result, and waiting for it."""

    _pause: Callable[[float, threading.Event], object] = staticmethod(_pause_until_woken)
    """How a wait pauses until the next read: until ``seconds`` pass or the wake-up is
    set (an ``AsyncQueue`` yields to its event loop meanwhile)."""

    def result(self, job_id: int) -> Any:
        """What job ``job_id`` returned (a JSON value; None when it returned none).

        Raises :class:`~sqlq_orm.errors.JobFailed` (carrying ``error_code`` and
        ``error_detail``) for a job that ended FAILED or CANCELLED,
        :class:`~sqlq_orm.errors.ResultNotReady` for one still under way, and
        :class:`~sqlq_orm.errors.JobNotFound` for an unknown (or pruned) id.
        """
        validation.job_id(job_id)
        status, value = self._outcome(job_id)
        if status is None:
            return value
        raise ResultNotReady(job_id, status)

    def wait(self, job_id: int, timeout: float = 30.0) -> Any:
        """Wait until job ``job_id`` has finished, then return :meth:`result`.

        Raises what :meth:`result` raises for a failed or unknown job, and
        :class:`~sqlq_orm.errors.WaitTimeout` (a ``TimeoutError``) when the job has not
        finished within ``timeout`` seconds (``math.inf``: no limit). A timeout that is
        not a number of seconds >= 0 (NaN, a negative number, a string) raises
        :class:`~sqlq_orm.errors.InvalidInput` before anything is read.
        """
        validation.job_id(job_id)
        timeout = validation.wait_timeout(timeout)
        deadline = time.monotonic() + timeout
        pause = _FIRST_PAUSE
        # Subscribed before the first read, so a finish between the read and the pause
        # still wakes it: a run ending in this process (a worker thread, another
        # task) wakes the wait at once, instead of at its next read.
        woken = threading.Event()
        unsubscribe = self.context.wakeups.wait_for_finish(job_id, woken)
        try:
            # Runs ending in other processes wake it too, where the database can say so.
            listener = finish_listener(self.context)
            if listener is not None and not listener.ready.is_set():
                self._pause(min(_LISTENER_READY_SECONDS, timeout), listener.ready)
            while True:
                woken.clear()
                status, value = self._outcome(job_id)
                if status is None:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(job_id, status, timeout)
                self._pause(min(pause, left), woken)
                longest = (
                    _LONGEST_PAUSE_LISTENING
                    if listener is not None and listener.heard_everywhere()
                    else _LONGEST_PAUSE
                )
                pause = min(pause * _PAUSE_GROWTH, longest)
        finally:
            unsubscribe()

    def _outcome(self, job_id: int) -> tuple[str | None, Any]:
        """``(None, result)`` for a job that succeeded, ``(status, None)`` for one under
        way; raises for a failed, cancelled or unknown one."""
        with self.read() as connection:
            row = connection.execute(self.sql.job_outcome, {"p_id": job_id}).first()
        if row is None:
            raise JobNotFound(job_id)
        status, result, error_code, error_detail = row
        if status == JobStatus.SUCCEEDED.value:
            return None, decode_result(result)
        if status in (JobStatus.FAILED.value, JobStatus.CANCELLED.value):
            raise JobFailed(job_id, status, error_code, error_detail)
        return status, None
