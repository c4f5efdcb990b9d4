"""Wake-ups for idle workers: hearing that jobs arrived, and when the next one is due.

:meth:`JobArrivals.watch_for_jobs` sets a worker's event when jobs are added to its
queues: at once for an enqueue in this process (:mod:`sqlq_orm.db.wakeups`), and
through a connection of its own for other processes' enqueues (PostgreSQL
``LISTEN``; SQLite ``PRAGMA data_version``). The worker keeps polling as well, so a
listener that fails only costs latency.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from sqlalchemy.engine import Connection

from sqlq_orm.core import validation
from sqlq_orm.db.backends import WakeListener
from sqlq_orm.db.context import QueueContext
from sqlq_orm.queue.core import QueueCore
from sqlq_orm.schema.mixins import QUEUE_MAX

log = logging.getLogger("sqlq_orm.wakeups")

_LISTEN_SLICE = 0.5
"""Longest single wait on the listener: how soon a closed watch notices it."""
_RECONNECT_MIN = 0.5
_RECONNECT_MAX = 30.0


class JobWatch:
    """Sets ``wake`` when jobs are added to ``queues``, until :meth:`close`.

    With ``listen`` (and a database that can), a daemon thread holds one connection
    of its own that hears other processes' commits. If it fails, the failure is
    logged once, the worker falls back to polling, and the thread reconnects with
    backoff (logging when it is back).
    """

    def __init__(
        self,
        context: QueueContext,
        queues: Sequence[str],
        wake: threading.Event,
        *,
        listen: bool = True,
    ) -> None:
        self.queues = frozenset(queues)
        self.wake = wake
        self._context = context
        self._unsubscribe = context.wakeups.subscribe(self.queues, wake)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if listen and context.dialect.open_wake_listener is not None:
            self._thread = threading.Thread(
                target=self._listen, args=(context.dialect.open_wake_listener,),
                name="sqlq-wakeups", daemon=True,
            )  # fmt: skip
            self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop waking ``wake``; end the listener thread (and its connection)."""
        self._unsubscribe()
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def listening(self) -> bool:
        """Whether a listener thread is running (it may be between reconnects)."""
        return self._thread is not None and self._thread.is_alive()

    def _listen(self, open_listener: Callable[..., WakeListener | None]) -> None:
        delay = _RECONNECT_MIN
        failed = False
        while not self._closed.is_set():
            try:
                listener = open_listener(self._context.engine, self._context.sql.wake_channel)
                if listener is None:
                    log.info("no wake-up listener on this engine; polling only")
                    return
                if failed:
                    log.info("wake-up listener reconnected")
                failed, delay = False, _RECONNECT_MIN
                # Jobs may have arrived while it was down.
                self.wake.set()
                try:
                    self._hear(listener)
                finally:
                    listener.close()
            except Exception as exc:  # noqa: BLE001 - any failure: poll, then reconnect
                if not failed:
                    log.warning(
                        "wake-up listener failed (%s: %s); polling until it reconnects",
                        type(exc).__name__,
                        str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                    )
                failed = True
                self._closed.wait(delay)
                delay = min(delay * 2, _RECONNECT_MAX)

    def _hear(self, listener: WakeListener) -> None:
        while not self._closed.is_set():
            heard = listener.wait(_LISTEN_SLICE)
            if heard is None or heard & self.queues:
                self.wake.set()


class JobArrivals(QueueCore):
    """What an idle worker asks: tell me when jobs arrive, and when is the next one due."""

    def watch_for_jobs(
        self, queues: Sequence[str], wake: threading.Event, *, listen: bool = True
    ) -> JobWatch:
        """Set ``wake`` whenever jobs are added to ``queues``, until the watch is closed.

        Enqueues (and retries) in this process wake it once they commit; with
        ``listen``, a connection of its own hears other processes' too. Wake-ups can
        be spurious (SQLite only knows that something was committed); the caller
        still polls now and then.
        """
        names = validation.claim_queues(queues, QUEUE_MAX)
        return JobWatch(self.context, names, wake, listen=listen)

    def seconds_until_next_job(self, queues: Sequence[str] = ("default",)) -> int | None:
        """Seconds until the earliest QUEUED job of ``queues`` is due, by the queue's
        clock (0 or less: one is ready now); None when none is queued."""
        names = validation.claim_queues(queues, QUEUE_MAX)
        with self.read() as connection:
            due = connection.execute(
                self.sql.seconds_until_next_job, {"p_queues": list(names)}
            ).scalar_one()
            dues = [] if due is None else [int(due)]
            if self.tables.queues is not None:
                dues += self._rate_limited_due(connection, list(names))
        return min(dues) if dues else None

    def _rate_limited_due(self, connection: Connection, names: list[str]) -> list[int]:
        """When each rate-limited queue among ``names`` with queued jobs may start one:
        when its earliest job is due, or, if its window has starts, when the oldest
        leaves it (a full key frees then; jobs of keys with room were claimed already).
        Never "now" for a queue held back only by its window: no busy polling."""
        dues: list[int] = []
        limited = connection.execute(self.sql.select_rate_limited, {"p_queues": names}).all()
        for name, _limit, period in limited:
            queued = connection.execute(self.sql.queue_due_in, {"p_queue": name}).scalar_one()
            if queued is None:
                continue
            frees = connection.execute(
                self.sql.window_frees_in, {"p_queue": name, "p_period": int(period)}
            ).scalar_one()
            dues.append(int(queued) if frees is None else max(int(queued), int(frees)))
        return dues
