"""One lock per SQLite engine for this process's queue writes.

SQLite lets one writer in at a time. A second one waits in SQLite's busy handler, which
sleeps between tries (1, 2, 5, 10, 15, 20, 25 ms and on), so two of the queue's own
threads writing at once (a worker's fetcher, completer, heartbeat and sweeper; an
app's enqueuing threads) would lose milliseconds to each other on every collision.
Within one process they queue on this lock instead, handed over the moment the holder
commits. The lock belongs to the engine (every queue on it shares it): other engines
and processes, and an app's own sessions, still meet SQLite's lock and its
``busy_timeout``, as before.

A thread waits for the lock at most ``wait`` seconds and then goes on without it, to
SQLite's own wait: when another process holds the database for long, the threads of
this one each fail after their own ``busy_timeout``, not one after another.

An engine driven from an event loop (the ``sync_engine`` of an ``AsyncEngine``, whose
queue calls run in SQLAlchemy's greenlets on the loop's thread) gets
:class:`LoopTurns` instead: a thread lock there would either block the loop's thread
while another coroutine holding it awaits its IO (a deadlock), or, being re-entrant,
let every coroutine of the loop through. Its coroutines take turns on an
:class:`asyncio.Lock` of their loop instead, awaited inside the greenlet.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeAlias

from sqlalchemy.engine import Engine
from sqlalchemy.util import await_only

BUSY_TIMEOUT_OPTION = "sqlq_busy_timeout_ms"
"""Engine execution option carrying SQLite's ``busy_timeout`` (set by its hooks): how
long the queue's own writers of one process wait for each other."""


class LoopTurns:
    """The write turns of an engine driven from event loops: one :class:`asyncio.Lock`
    per loop, awaited from inside SQLAlchemy's greenlet (``await_only``).

    Re-entrant per task, like the thread lock. Writers on different loops (threads)
    do not take turns with each other here; they meet SQLite's lock and its
    ``busy_timeout``, which waits in the driver's thread, never on a loop's.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._turns: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[asyncio.Lock, list[asyncio.Task[object] | None]]
        ] = weakref.WeakKeyDictionary()

    @contextmanager
    def turn(self, wait: float) -> Iterator[None]:
        """Hold this loop's turn for the block if it comes within ``wait`` seconds."""
        loop = asyncio.get_running_loop()
        with self._guard:
            entry = self._turns.get(loop)
            if entry is None:
                # A loop's lock refers back to its loop, so entries are dropped by hand
                # once their loops are closed.
                for closed in [known for known in self._turns if known.is_closed()]:
                    del self._turns[closed]
                entry = self._turns[loop] = (asyncio.Lock(), [None])
        lock, owner = entry
        task = asyncio.current_task()
        if task is not None and owner[0] is task:
            yield  # a write inside this task's own write: it already has the turn
            return
        try:
            await_only(asyncio.wait_for(lock.acquire(), wait))
        except TimeoutError:
            yield  # on to SQLite's own wait, as the thread lock does
            return
        owner[0] = task
        try:
            yield
        finally:
            owner[0] = None
            lock.release()


WriteLock: TypeAlias = "threading.RLock | LoopTurns"

_LOCKS: weakref.WeakKeyDictionary[Engine, WriteLock] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def write_lock_for(engine: Engine) -> WriteLock:
    """The write lock of ``engine``'s queue writes in this process.

    Re-entrant, so a queue write opened inside another on the same thread does not
    deadlock on the lock (SQLite would refuse the second writer anyway). For an
    engine with an asyncio driver (``aiosqlite``), a :class:`LoopTurns`.
    """
    with _GUARD:
        lock = _LOCKS.get(engine)
        if lock is None:
            lock = _LOCKS[engine] = LoopTurns() if engine.dialect.is_async else threading.RLock()
        return lock


@contextmanager
def taking_turns(lock: WriteLock, wait: float) -> Iterator[None]:
    """Hold ``lock`` for the block if it comes within ``wait`` seconds; else go on."""
    if isinstance(lock, LoopTurns):
        with lock.turn(wait):
            yield
        return
    acquired = lock.acquire(timeout=wait)
    try:
        yield
    finally:
        if acquired:
            lock.release()


def _forget_after_fork() -> None:
    # A forked child has one thread: a lock another parent thread held would never be
    # released there. Fresh locks for the child.
    global _GUARD
    _GUARD = threading.Lock()
    _LOCKS.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
