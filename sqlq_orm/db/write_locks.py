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
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Engine

BUSY_TIMEOUT_OPTION = "sqlq_busy_timeout_ms"
"""Engine execution option carrying SQLite's ``busy_timeout`` (set by its hooks): how
long the queue's own writers of one process wait for each other."""

_LOCKS: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def write_lock_for(engine: Engine) -> threading.RLock:
    """The write lock of ``engine``'s queue writes in this process.

    Re-entrant, so a queue write opened inside another on the same thread does not
    deadlock on the lock (SQLite would refuse the second writer anyway).
    """
    with _GUARD:
        lock = _LOCKS.get(engine)
        if lock is None:
            lock = _LOCKS[engine] = threading.RLock()
        return lock


@contextmanager
def taking_turns(lock: threading.RLock, wait: float) -> Iterator[None]:
    """Hold ``lock`` for the block if it comes within ``wait`` seconds; else go on."""
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
