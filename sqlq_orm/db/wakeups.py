"""In-process wake-ups: an enqueue tells this process's idle workers at once.

Every queue on one database's job table shares one :class:`Wakeups` (see
:func:`wakeups_for`), so a worker wakes whichever :class:`~sqlq_orm.Queue` object or
engine the job was enqueued through. Workers in other processes are woken by the
database itself (the ``Backend`` record's ``notify_sql`` / ``open_wake_listener``);
polling stays the fallback for both.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Protocol

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

_PENDING = "sqlq_orm.wakeups"
"""``Session.info`` key: the wake-ups to send when the session's transaction commits."""


class Wake(Protocol):
    """What a waiter is woken through: a ``threading.Event``, or anything with ``set``."""

    def set(self) -> None: ...


class Wakeups:
    """Who in this process waits for jobs on one job table, and a way to wake them.

    Two kinds of waiter: idle workers, woken when jobs are added to their queues
    (:meth:`subscribe`, :meth:`notify`), and ``Queue.wait`` callers, woken when the job
    they wait for ends a run here (:meth:`wait_for_finish`, :meth:`notify_finished`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[frozenset[str], threading.Event]] = {}
        self._next = 0
        self._finishes: dict[int, list[Wake]] = {}
        self.finish_listeners_seen: tuple[float, bool] = (-math.inf, False)
        """``(time.monotonic() when looked, whether any process listens for finishes)``:
        what a finishing transaction last learnt (PostgreSQL ``waiters_sql``); a finish
        listener starting here sets it to now and True."""

    def wait_for_finish(self, job_id: int, wake: Wake) -> Callable[[], None]:
        """Set ``wake`` when a run of job ``job_id`` ends in this process (succeeded,
        failed, retried or cancelled); return the unsubscribe."""
        with self._lock:
            self._finishes.setdefault(job_id, []).append(wake)

        def unsubscribe() -> None:
            with self._lock:
                wakes = self._finishes.get(job_id, [])
                if wake in wakes:
                    wakes.remove(wake)
                if not wakes:
                    self._finishes.pop(job_id, None)

        return unsubscribe

    def notify_finished(self, job_ids: Iterable[int]) -> None:
        """Wake whoever waits for one of ``job_ids`` (their runs ended and committed)."""
        if not self._finishes:  # the usual case, nobody waiting: no lock taken
            return
        with self._lock:
            woken = [wake for job_id in job_ids for wake in self._finishes.get(job_id, ())]
        for wake in woken:
            wake.set()

    def notify_every_finish_waiter(self) -> None:
        """Wake every ``wait`` caller: some run may have ended (SQLite's ``data_version``
        says that another connection committed, not what)."""
        if not self._finishes:
            return
        with self._lock:
            woken = [wake for wakes in self._finishes.values() for wake in wakes]
        for wake in woken:
            wake.set()

    def has_finish_waiters(self) -> bool:
        """Whether any ``wait`` caller in this process is subscribed."""
        with self._lock:
            return bool(self._finishes)

    def subscribe(self, queues: Iterable[str], wake: threading.Event) -> Callable[[], None]:
        """Set ``wake`` whenever a job is added to one of ``queues``; return the unsubscribe."""
        with self._lock:
            key = self._next
            self._next += 1
            self._waiting[key] = (frozenset(queues), wake)

        def unsubscribe() -> None:
            with self._lock:
                self._waiting.pop(key, None)

        return unsubscribe

    def notify(self, queues: Iterable[str]) -> None:
        """Wake every subscriber waiting on one of ``queues`` (jobs were committed there)."""
        names = frozenset(queues)
        with self._lock:
            woken = [wake for wanted, wake in self._waiting.values() if wanted & names]
        for wake in woken:
            wake.set()

    def notify_after_commit(self, session: Session, queues: Iterable[str]) -> None:
        """Wake the subscribers of ``queues`` once ``session``'s transaction commits.

        A rollback forgets them: a job that was never committed wakes nobody. Savepoints
        (``begin_nested``) neither send nor forget them; only the outermost transaction
        does. The session gets one pair of listeners however many jobs it enqueues.
        """
        pending: dict[Wakeups, set[str]] | None = session.info.get(_PENDING)
        if pending is None:
            pending = session.info[_PENDING] = {}
        if not event.contains(session, "after_commit", _wake_pending):
            event.listen(session, "after_commit", _wake_pending)
            event.listen(session, "after_soft_rollback", _forget_pending)
        pending.setdefault(self, set()).update(queues)


def _wake_pending(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint was released; the jobs are not committed yet
    pending: dict[Wakeups, set[str]] = session.info.get(_PENDING, {})
    woken = list(pending.items())
    pending.clear()
    for wakeups, queues in woken:
        wakeups.notify(queues)


def _forget_pending(session: Session, previous_transaction: SessionTransaction) -> None:
    if previous_transaction.nested:
        return  # a savepoint was rolled back; what the outer transaction added stays
    session.info.get(_PENDING, {}).clear()


_SHARED: dict[Hashable, Wakeups] = {}
_SHARED_LOCK = threading.Lock()


def wakeups_for(key: Hashable) -> Wakeups:
    """The process-wide :class:`Wakeups` of one job table (``key`` names database and table)."""
    with _SHARED_LOCK:
        wakeups = _SHARED.get(key)
        if wakeups is None:
            wakeups = _SHARED[key] = Wakeups()
        return wakeups
