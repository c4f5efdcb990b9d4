"""Stopping a handler thread at its job's max runtime: an exception raised inside it.

Python cannot kill a thread, but CPython can raise an exception in one: the
*asynchronous exception* of ``PyThreadState_SetAsyncExc`` (as Dramatiq's time limit
does). The thread sees :class:`~sqlq_orm.errors.MaxRuntimeInterrupt` at the next
Python instruction it runs, so a pure-Python loop (``while True: ...``) stops, unwinds
through the handler's ``finally`` blocks, and its thread returns to the pool.

Limits, by design of CPython: code stuck inside one C call (a blocking socket read
without a timeout, ``time.sleep(3600)``, a long NumPy operation, a lock wait) sees the
exception only when that call returns, and a handler that catches ``BaseException``
and carries on is not stopped. Such a thread stays abandoned, as before: it counts
against the worker's ``max_abandoned`` budget, and past it the worker exits with status
3 for its supervisor to restart it.

An asynchronous exception must never land outside the handler (in the pool's own
code it would kill the thread or leave a count wrong), so :class:`HandlerThread` sends
it only while the handler runs, under a lock the thread takes as the handler returns,
and the thread clears one sent too late to be seen before it leaves the handler.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TypeVar

from sqlq_orm.errors import MaxRuntimeInterrupt

T = TypeVar("T")

INTERRUPT_GRACE = 1.0
"""Seconds between a handler being told to stop at its max runtime (``should_stop``,
which wakes ``ctx.sleep``) and the exception raised in its thread: a handler that looks
at its context returns by itself first (Celery's soft, then hard, time limit)."""

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int


def raise_in_thread(thread_id: int, exception: type[BaseException] | None) -> bool:
    """Make ``exception`` raise in the thread ``thread_id`` at its next Python
    instruction (None clears one not yet raised); True if the thread was found."""
    found: int = _set_async_exc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else ctypes.py_object()
    )
    if found > 1:  # cannot happen for a live thread id; undo rather than hit several
        _set_async_exc(ctypes.c_ulong(thread_id), ctypes.py_object())
    return found == 1


class HandlerThread:
    """The thread running one job's handler, which :meth:`interrupt` can stop.

    Used by the thread that calls the handler (:meth:`call`) and by whoever gives up
    on the job at its max runtime (:meth:`interrupt`, from any thread). One per run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread_id: int | None = None  # set while the handler runs
        self._asked = False  # interrupt() was called
        self._sent = False  # ... and raised the exception in the handler's thread
        self._left = False  # the handler has returned: nothing to interrupt any more

    @property
    def interrupted(self) -> bool:
        """Whether :meth:`interrupt` was called before the handler returned."""
        with self._lock:
            return self._asked

    def call(self, handler: Callable[[], T]) -> T:
        """``handler()`` on this thread, interruptible meanwhile; an interrupt raises
        :class:`~sqlq_orm.errors.MaxRuntimeInterrupt` from here, and never later (at
        once, without calling ``handler``, if it came first)."""
        try:
            with self._lock:
                if self._asked:
                    raise MaxRuntimeInterrupt()
                self._thread_id = threading.get_ident()
            try:
                return handler()
            finally:
                self._leave()
        except MaxRuntimeInterrupt:
            # Seen in the handler, or (sent as it returned) while leaving it: either way
            # nothing may stay pending for this thread once we are out.
            self._leave()
            raise

    def interrupt(self) -> bool:
        """Raise :class:`~sqlq_orm.errors.MaxRuntimeInterrupt` in the handler's thread,
        once, if the handler is still running (or make :meth:`call` raise it at once if
        the handler has not begun); True if this call asked for it."""
        with self._lock:
            if self._asked or self._left:
                return False
            self._asked = True
            if self._thread_id is not None:
                self._sent = raise_in_thread(self._thread_id, MaxRuntimeInterrupt)
            return True

    def interrupt_after(self, seconds: float = INTERRUPT_GRACE) -> None:
        """:meth:`interrupt` in ``seconds``, unless the handler has returned by then."""
        timer = threading.Timer(seconds, self.interrupt)
        timer.daemon = True
        timer.start()

    def _leave(self) -> None:
        with self._lock:
            was_running = self._thread_id is not None
            self._thread_id = None
            self._left = True
            sent = self._sent
        if sent and was_running:
            # Sent but perhaps not yet raised (the handler returned first): clear it,
            # or it would go off in the pool's code. Harmless if already raised.
            raise_in_thread(threading.get_ident(), None)
