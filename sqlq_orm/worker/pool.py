"""The handler threads: a bounded pool of reused threads running claimed jobs in order.

Starting a thread per job costs more than a no-op handler, so ``size`` threads are
started as jobs arrive and then reused; jobs wait in claim order (prefetched) until a
thread is free. A thread stuck in a handler the worker gave up on cannot be killed:
:meth:`HandlerPool.detach` takes it out of the count (it ends when its handler
returns) so a fresh thread can take its place, and the worker's ``max_abandoned``
budget bounds how many such threads there can be.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from sqlq_orm.worker.runs import JobRun


class HandlerPool:
    """Runs ``execute(run)`` for each submitted run on at most ``size`` pool threads.

    ``execute`` must not raise. Threads are daemons: a hung handler never keeps the
    process from exiting.
    """

    def __init__(self, size: int, execute: Callable[[JobRun], None]) -> None:
        self.size = size
        self._execute = execute
        self._condition = threading.Condition()
        self._waiting: deque[JobRun] = deque()
        self._threads = 0  # pool threads counted against size (detached ones are not)
        self._idle = 0
        self._busy = 0  # pool threads running a job
        self._closed = False
        self._started = 0

    def submit(self, runs: list[JobRun]) -> None:
        """Queue ``runs`` (a claim's batch) for the free threads, in order, starting
        threads while the pool is not full; one hand-over for the whole batch."""
        with self._condition:
            self._waiting.extend(runs)
            self._condition.notify(len(runs))
            while self._grow():
                pass

    def waiting(self) -> int:
        """How many submitted runs no thread has taken yet."""
        with self._condition:
            return len(self._waiting)

    def take_waiting(self) -> list[JobRun]:
        """Remove and return the runs no thread has taken yet (at shutdown)."""
        with self._condition:
            taken = list(self._waiting)
            self._waiting.clear()
            return taken

    def detach(self, run: JobRun) -> None:
        """``run`` was given up on inside its handler: its thread leaves the pool.

        The thread ends once the handler returns; a fresh one takes its place now if
        jobs are waiting. Called with the run table's lock held (never takes it).
        """
        with self._condition:
            if run.detached:
                return
            run.detached = True
            self._threads -= 1
            self._busy -= 1  # its thread is no longer the pool's
            self._grow()

    def close(self) -> None:
        """Let the threads end once no run is waiting (does not wait for them)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def _grow(self) -> bool:
        # Caller holds the condition. A new thread only when no idle one will take
        # the waiting runs: threads are cheap to keep, not to start.
        starting = self._threads - self._busy - self._idle  # started, not yet waiting
        if (
            self._closed
            or self._threads >= self.size
            or self._idle + starting >= len(self._waiting)
        ):
            return False
        self._threads += 1
        self._started += 1
        threading.Thread(
            target=self._loop, name=f"sqlq-handler-{self._started}", daemon=True
        ).start()
        return True

    def _loop(self) -> None:
        while True:
            with self._condition:
                while not self._waiting and not self._closed:
                    self._idle += 1
                    self._condition.wait()
                    self._idle -= 1
                if not self._waiting:
                    self._threads -= 1
                    return
                run = self._waiting.popleft()
                self._busy += 1
            self._execute(run)
            if run.detached:
                return  # replaced while stuck in the handler; already out of the count
            with self._condition:
                self._busy -= 1
