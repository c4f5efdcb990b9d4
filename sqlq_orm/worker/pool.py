"""The handler threads: a bounded pool of reused threads running claimed jobs in order.

Starting a thread per job costs more than a no-op handler, so ``size`` threads are
started as jobs arrive and then reused; jobs wait in claim order (prefetched) until a
thread is free. A thread stuck in a handler the worker gave up on cannot be killed:
:meth:`HandlerPool.detach` takes it out of the count (it ends when its handler
returns) so a fresh thread can take its place, and the worker's ``max_abandoned``
budget bounds how many such threads there can be.

Jobs whose handler is an ``async def`` (:attr:`~sqlq_orm.worker.runs.JobRun.on_loop`)
are started as tasks on the worker's event loop instead (``tasks``), in batches, by
whoever finds them at the head of the line: the fetcher submitting them, a task that
just ended, or a pool thread. A task counts against ``size`` like a busy thread until
it ends, so threads and tasks together never run more than ``size`` handlers.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from sqlq_orm.worker.runs import JobRun

TaskDone = Callable[[JobRun], list[JobRun]]
"""Called on the loop when a task's job is done; returns the runs to start next."""


class TaskStarter(Protocol):
    """Starts runs as tasks on an event loop (:class:`~sqlq_orm.worker.aio.HandlerLoop`)."""

    def start(self, runs: list[JobRun], done: TaskDone) -> None:
        """Start a task per run, from any thread; each calls ``done(run)`` when it ends."""


class HandlerPool:
    """Runs ``execute(run)`` for each submitted run on at most ``size`` pool threads.

    ``execute`` must not raise. Threads are daemons: a hung handler never keeps the
    process from exiting.
    """

    def __init__(
        self,
        size: int,
        execute: Callable[[JobRun], None],
        *,
        tasks: TaskStarter | None = None,
    ) -> None:
        self.size = size
        self._execute = execute
        self._tasks = tasks
        # A plain lock: nothing here takes it twice, and an RLock costs more per job.
        self._condition = threading.Condition(threading.Lock())
        self._waiting: deque[JobRun] = deque()
        self._threads = 0  # pool threads counted against size (detached ones are not)
        self._idle = 0
        self._busy = 0  # pool threads running a job
        self._tasks_running = 0  # tasks running a job on the loop
        self._closed = False
        self._started = 0

    def submit(self, runs: list[JobRun]) -> None:
        """Queue ``runs`` (a claim's batch) for the free threads, in order, starting
        threads while the pool is not full; one hand-over for the whole batch."""
        with self._condition:
            self._waiting.extend(runs)
            batch = self._take_tasks()
            self._condition.notify(len(runs))
            while self._grow():
                pass
        if batch:
            self._start_tasks(batch)

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
            if run.on_loop:
                self._tasks_running -= 1  # its task is no longer the pool's
            else:
                self._threads -= 1
                self._busy -= 1  # its thread is no longer the pool's
            self._condition.notify()
            self._grow()

    def close(self) -> None:
        """Let the threads end once no run is waiting (does not wait for them)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def _take_tasks(self) -> list[JobRun]:
        # Caller holds the condition: the async runs at the head of the line that
        # fit under ``size``, counted busy from now on.
        batch: list[JobRun] = []
        if self._tasks is None:
            return batch
        while self._waiting and self._waiting[0].on_loop and self._running() < self.size:
            batch.append(self._waiting.popleft())
            self._tasks_running += 1
        return batch

    def _running(self) -> int:
        # Caller holds the condition.
        return self._busy + self._tasks_running

    def _start_tasks(self, batch: list[JobRun]) -> None:
        assert self._tasks is not None
        self._tasks.start(batch, self._task_done)

    def _task_done(self, run: JobRun) -> list[JobRun]:
        """A task's job is done: free its place; return the async runs to start next."""
        with self._condition:
            if not run.detached:
                self._tasks_running -= 1
            batch = self._take_tasks()
            if self._waiting and self._running() < self.size:
                self._condition.notify()  # a plain job is next: a thread takes it
            return batch

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
        ran = False  # whether this thread comes back from a run (one lock for both)
        while True:
            with self._condition:
                if ran:
                    self._busy -= 1
                    ran = False
                # Tasks count as busy too: with ``size`` handlers running, wait.
                while not self._closed and (not self._waiting or self._running() >= self.size):
                    self._idle += 1
                    self._condition.wait()
                    self._idle -= 1
                if not self._waiting or self._running() >= self.size:
                    self._threads -= 1
                    return
                batch = self._take_tasks()
                if not batch:
                    run = self._waiting.popleft()
                    self._busy += 1
            if batch:
                self._start_tasks(batch)
                continue
            self._execute(run)
            if run.detached:
                return  # replaced while stuck in the handler; already out of the count
            ran = True
