"""The worker's event loop: ``async def`` handlers run here as tasks, many at once.

The fetcher, the completer and the heartbeat stay threads (the one pipeline, see
:mod:`sqlq_orm.worker.runtime`); only the handlers of coroutine functions run on this
loop, one task per job, started in batches by the
:class:`~sqlq_orm.worker.pool.HandlerPool`, which counts them against the worker's
``concurrency`` together with its threads. When a task ends, the pool hands it the
next async runs in line, so a stream of async jobs never waits on a thread.

A task the worker gave up on is cancelled (see
:class:`~sqlq_orm.worker.handlers.AsyncJobContext`). One that swallows the
cancellation keeps running, abandoned like a stuck thread; and a coroutine that
blocks (``time.sleep`` in an ``async def``) stalls every task on the loop, but not the
heartbeats, which keep their own thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from sqlq_orm.worker.pool import TaskDone
from sqlq_orm.worker.runs import JobRun

log = logging.getLogger("sqlq_orm.worker")

STOP_WAIT_SECONDS = 5.0
"""How long :meth:`HandlerLoop.close` waits for the loop's thread to end."""


class HandlerLoop:
    """An event loop on a daemon thread of its own, running one task per job.

    ``execute`` is :meth:`~sqlq_orm.worker.execution.JobExecutor.execute_async`: it
    awaits the handler and hands the outcome over, and never raises. ``cleanups``
    (``HandlerRegistry.on_loop_shutdown``) are awaited on the loop before it stops.
    """

    def __init__(
        self,
        execute: Callable[[JobRun], Coroutine[Any, Any, None]],
        cleanups: Sequence[Callable[[], Awaitable[Any]]] = (),
    ) -> None:
        self._execute = execute
        self._cleanups = list(cleanups)
        self.loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[None]] = set()  # strong references while they run
        self._thread = threading.Thread(target=self._serve, name="sqlq-handler-loop", daemon=True)
        self._thread.start()

    def start(self, runs: list[JobRun], done: TaskDone) -> None:
        """Start a task per run (from any thread); each calls ``done(run)`` when over."""
        self.loop.call_soon_threadsafe(self._start_now, runs, done)

    def close(self) -> None:
        """Stop the loop (tasks still running are left, like stuck threads).

        The loop is stopped, not closed: connections that handlers pooled on it (an
        ``AsyncEngine`` of the app's) close themselves when they are collected, and
        on a closed loop that would raise instead.
        """
        if not self._thread.is_alive():
            return
        if self._cleanups:
            done = asyncio.run_coroutine_threadsafe(self._clean_up(), self.loop)
            try:
                done.result(STOP_WAIT_SECONDS)
            except TimeoutError:
                log.warning(
                    "the handlers' loop clean-up did not finish in %.0fs", STOP_WAIT_SECONDS
                )
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_WAIT_SECONDS)
        if self._thread.is_alive():
            log.warning("the handler event loop did not stop: a coroutine blocks it")

    async def _clean_up(self) -> None:
        for cleanup in self._cleanups:
            try:
                await cleanup()
            except Exception:  # noqa: BLE001 - one failing clean-up must not skip the rest
                log.exception("loop clean-up %r failed", cleanup)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _start_now(self, runs: list[JobRun], done: TaskDone) -> None:
        for run in runs:
            task = self.loop.create_task(self._run(run, done), name=f"sqlq-{run.describe()}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, run: JobRun, done: TaskDone) -> None:
        try:
            await self._execute(run)
        finally:
            following = done(run)
            if following:
                self._start_now(following, done)
