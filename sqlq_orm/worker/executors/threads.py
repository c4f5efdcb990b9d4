"""The thread pool: handlers run on the worker's own threads (and ``async def`` ones as
tasks on its event loop), the worker's pool since the start.

Cheap to start a job on and right for I/O-bound and async handlers; but Python cannot
stop a thread, so a handler the worker gave up on (past its max runtime, lease lost)
keeps running until it returns, and a crash in one handler ends the whole worker.
"""

from __future__ import annotations

from typing import Any

from sqlq_orm.worker.aio import HandlerLoop
from sqlq_orm.worker.execution import JobExecutor
from sqlq_orm.worker.executors.base import RunServices
from sqlq_orm.worker.pool import HandlerPool
from sqlq_orm.worker.runs import JobRun


class ThreadExecutor:
    """``concurrency`` reused handler threads, plus an event loop for coroutines."""

    kind = "thread"

    def __init__(self, services: RunServices) -> None:
        executor = JobExecutor(
            services.handlers,
            services.runs,
            services.stats,
            services.completer,
            services.prefetch,
            worker_id=services.worker_id,
            starter=services.starter,
        )
        self._loop: HandlerLoop | None = None
        if services.handlers.has_coroutines:
            self._loop = HandlerLoop(executor.execute_async, services.handlers.loop_cleanups)
        self._pool = HandlerPool(services.concurrency, executor.execute, tasks=self._loop)

    def submit(self, runs: list[JobRun]) -> None:
        """Queue ``runs`` for the handler threads (or the loop), in order."""
        self._pool.submit(runs)

    def waiting(self) -> int:
        """How many runs no thread or task has taken yet."""
        return self._pool.waiting()

    def take_waiting(self) -> list[JobRun]:
        """Remove and return the runs no thread or task has taken yet."""
        return self._pool.take_waiting()

    def detach(self, run: JobRun) -> None:
        """A fresh thread takes the place of the one stuck in ``run``'s handler."""
        self._pool.detach(run)

    def stop_at_deadline(self, run: JobRun) -> bool:
        """A thread cannot be stopped from outside: the worker gives up on the run."""
        return False

    def info(self) -> dict[str, Any]:
        """The pool's kind; threads have no children to show."""
        return {"kind": self.kind}

    def close(self) -> None:
        """Let the threads end, and stop the event loop."""
        self._pool.close()
        if self._loop is not None:
            self._loop.close()
