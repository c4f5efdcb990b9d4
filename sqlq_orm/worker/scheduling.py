"""The worker's scheduler thread: ticks the registry's recurring schedules.

A worker whose :class:`~sqlq_orm.worker.handlers.HandlerRegistry` declares schedules
(``registry.periodic(...)``) runs a :class:`~sqlq_orm.scheduler.Scheduler` in a
thread of its own, so a slow tick never delays claiming. Every worker may run one:
each slot is still enqueued once.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.errors import SqlqError
from sqlq_orm.queue.queue import Queue
from sqlq_orm.scheduler import Scheduler
from sqlq_orm.worker.handlers import HandlerRegistry
from sqlq_orm.worker.outcomes import one_line

log = logging.getLogger("sqlq_orm.worker")

DEFAULT_TICK_INTERVAL = 1.0
"""Seconds between scheduler ticks; an idle tick is one indexed read."""

_ERROR_LOG_INTERVAL = 60.0  # a failing tick is logged at most this often (seconds)


class SchedulerThread:
    """Ticks ``scheduler`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(
        self, scheduler: Scheduler, *, interval: float = DEFAULT_TICK_INTERVAL, name: str = ""
    ) -> None:
        self.scheduler = scheduler
        self.interval = interval
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"sqlq-scheduler{name and '-' + name}", daemon=True
        )
        self._last_error_log = float("-inf")

    @classmethod
    def for_worker(cls, queue: Queue, handlers: HandlerRegistry, name: str) -> SchedulerThread:
        """The thread for a worker over ``handlers``' schedules (idle if it has none)."""
        return cls(Scheduler(queue, handlers.schedules), name=name)

    def start(self) -> None:
        """Tick once here, then every ``interval`` in a thread (none without schedules).

        The first tick runs in the caller's thread so that a worker has registered its
        schedules and enqueued what is due before it first looks for jobs (a burst
        worker would otherwise leave before its scheduler thread got going).
        """
        if self.scheduler.schedules:
            self.tick_once()
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop ticking and wait up to ``timeout`` seconds for a tick in progress."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.tick_once()

    def tick_once(self) -> None:
        """One tick; database errors are logged (rate-limited) and retried next tick."""
        try:
            result = self.scheduler.tick()
        except (SQLAlchemyError, SqlqError) as exc:
            now = time.monotonic()
            if now - self._last_error_log >= _ERROR_LOG_INTERVAL:
                self._last_error_log = now
                hint = ""
                if isinstance(exc, SQLAlchemyError):
                    hint = " (is the schema at sqlq_0002 or later? run `sqlq migrate`)"
                log.error(
                    "scheduler tick failed: %s; retrying every %.1fs%s",
                    one_line(str(exc)),
                    self.interval,
                    hint,
                )
            return
        if result.job_ids:
            log.info(
                "scheduler enqueued %d job(s) for %d schedule(s)%s",
                len(result.job_ids),
                result.claimed,
                f", {result.skipped} passed over missed slots" if result.skipped else "",
            )
