"""Hearing other processes' finishes, for ``Queue.wait``.

A run that ends in this process wakes its waiters at once (:mod:`sqlq_orm.db.wakeups`).
One that ends in another process is heard here by one daemon thread per job table
and process, started by the first ``wait`` and gone once nobody has waited for
:data:`LINGER_SECONDS`: on PostgreSQL it ``LISTEN`` s on the table's finish channel
(the finishing transaction's ``NOTIFY`` carries the job ids; over ``listen_url``
behind a transaction pooler), on SQLite it reads ``PRAGMA data_version`` every
:data:`SQLITE_POLL_SECONDS` and, when another connection has committed, wakes every
waiter to read its job again. MariaDB has neither: its waits poll.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref

from sqlalchemy.engine import Engine

from sqlq_orm.db.context import QueueContext
from sqlq_orm.db.wakeups import Wakeups
from sqlq_orm.queue.core import FINISH_LISTENERS_TTL

log = logging.getLogger("sqlq_orm.wakeups")

SQLITE_POLL_SECONDS = 0.001
"""How often the SQLite listener reads ``PRAGMA data_version`` (microseconds each; no
table is read unless it changed)."""
LINGER_SECONDS = 2.0
"""How long the listener stays up once nobody waits (so a caller waiting on one job
after another does not reconnect each time)."""
RETRY_AFTER_SECONDS = 30.0
"""After a listener failed to open, waits poll this long before one is tried again."""
_SLICE = 0.25  # longest single wait on the connection: how soon an idle listener leaves

_LOCK = threading.Lock()
_LISTENERS: dict[Wakeups, FinishListener] = {}
_FAILED_AT: dict[Wakeups, float] = {}
_CANNOT: weakref.WeakSet[Engine] = weakref.WeakSet()


class FinishListener:
    """The thread hearing one job table's finishes; :attr:`ready` is set once it
    listens (:attr:`listening`) or has given up (polling only)."""

    def __init__(self, context: QueueContext) -> None:
        self.ready = threading.Event()
        self.listening = False
        self.trusted_at = math.inf
        """When every finish elsewhere is announced to it (``time.monotonic()``)."""
        self._context = context
        self._wakeups = context.wakeups
        self._thread = threading.Thread(target=self._run, name="sqlq-finishes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        context = self._context
        open_listener = context.dialect.open_wake_listener
        listener = None
        failed = False
        try:
            if open_listener is not None:
                listener = open_listener(
                    context.engine,
                    context.sql.finish_channel,
                    poll_seconds=SQLITE_POLL_SECONDS,
                    mark=context.sql.finish_listener_mark,
                )
        except Exception as exc:  # noqa: BLE001 - any failure: the waits poll instead
            failed = True
            log.warning(
                "finish listener failed to open (%s: %s); waits poll",
                type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            )  # fmt: skip
        if listener is None:
            self._leave(failed=True, cannot=open_listener is not None and not failed)
            return
        # Finishing transactions in this process know at once; other processes within
        # FINISH_LISTENERS_TTL (until then, waits read their jobs often).
        self._wakeups.finish_listeners_seen = (time.monotonic(), True)
        self.trusted_at = time.monotonic() + (
            FINISH_LISTENERS_TTL if context.sql.finish_waiters is not None else 0.0
        )
        self.listening = True
        self.ready.set()
        try:
            idle_since: float | None = None
            while True:
                heard = listener.wait(_SLICE)
                if heard is None:
                    self._wakeups.notify_every_finish_waiter()
                elif heard:
                    self._wakeups.notify_finished(_job_ids(heard))
                if self._wakeups.has_finish_waiters():
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= LINGER_SECONDS and self._leave_if_idle():
                    return
        except Exception as exc:  # noqa: BLE001 - the connection broke: waits poll
            # The next wait opens a new one (or, if that fails, waits poll a while).
            log.log(
                logging.WARNING if self._wakeups.has_finish_waiters() else logging.INFO,
                "finish listener lost its connection (%s); waits poll until the next opens",
                type(exc).__name__,
            )
            self._leave(failed=False)
        finally:
            self.listening = False
            listener.close()

    def _leave_if_idle(self) -> bool:
        # Under the module lock, so a wait that subscribed before this look keeps the
        # listener, and one that subscribes after it starts a new one.
        with _LOCK:
            if self._wakeups.has_finish_waiters():
                return False
            if _LISTENERS.get(self._wakeups) is self:
                del _LISTENERS[self._wakeups]
            return True

    def _leave(self, *, failed: bool, cannot: bool = False) -> None:
        with _LOCK:
            if _LISTENERS.get(self._wakeups) is self:
                del _LISTENERS[self._wakeups]
            if cannot:
                # An engine that cannot listen (an in-memory database, a driver
                # without notifications) never will: its waits poll from now on. Another
                # engine on the same table may (its listener then serves both).
                _CANNOT.add(self._context.engine)
            elif failed:
                _FAILED_AT[self._wakeups] = time.monotonic()
        self.ready.set()

    def heard_everywhere(self) -> bool:
        """Whether it listens and every process's finishes are announced to it by now."""
        return self.listening and time.monotonic() >= self.trusted_at


def _job_ids(payloads: frozenset[str]) -> list[int]:
    ids = []
    for payload in payloads:
        for part in payload.split(","):
            if part.isdigit():
                ids.append(int(part))
    return ids


def finish_listener(context: QueueContext) -> FinishListener | None:
    """The running listener of ``context``'s job table, started if need be; None where
    waits must poll (no way to listen here, or the last attempt failed lately).

    Call it after subscribing the wait (``Wakeups.wait_for_finish``)."""
    if context.dialect.open_wake_listener is None:
        return None
    wakeups = context.wakeups
    with _LOCK:
        listener = _LISTENERS.get(wakeups)
        if listener is not None:
            return listener
        if context.engine in _CANNOT:
            return None
        failed_at = _FAILED_AT.get(wakeups)
        if failed_at is not None and time.monotonic() - failed_at < RETRY_AFTER_SECONDS:
            return None
        listener = _LISTENERS[wakeups] = FinishListener(context)
        return listener
