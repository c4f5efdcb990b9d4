"""The handler-thread interrupt: an exception raised inside a running thread, never outside."""

from __future__ import annotations

import threading

import pytest

from sqlq_orm.errors import MaxRuntimeInterrupt
from sqlq_orm.worker.interrupt import HandlerThread


def test_an_interrupt_stops_a_pure_python_spin_that_catches_exception_and_runs_its_finally():
    handler = HandlerThread()
    spinning = threading.Event()
    cleaned_up = threading.Event()
    seen: list[BaseException] = []

    def spin() -> None:
        try:
            n = 0
            while True:
                try:
                    n += 1
                    spinning.set()
                except Exception:  # noqa: BLE001 - what a careless handler does
                    pass
        finally:
            cleaned_up.set()

    def thread_body() -> None:
        try:
            handler.call(spin)
        except MaxRuntimeInterrupt as exc:
            seen.append(exc)

    thread = threading.Thread(target=thread_body, daemon=True)
    thread.start()
    assert spinning.wait(10)

    assert handler.interrupt() is True
    thread.join(timeout=10)

    assert not thread.is_alive()
    assert cleaned_up.is_set() and len(seen) == 1 and handler.interrupted
    assert handler.interrupt() is False  # once only


def test_an_interrupt_after_the_handler_returned_changes_nothing():
    handler = HandlerThread()
    assert handler.call(lambda: 42) == 42

    assert handler.interrupt() is False
    # Nothing pending for this thread: plain Python keeps running.
    assert sum(range(1000)) == 499500


def test_an_interrupt_before_the_handler_began_raises_without_calling_it():
    handler = HandlerThread()
    called: list[int] = []
    assert handler.interrupt() is True

    with pytest.raises(MaxRuntimeInterrupt):
        handler.call(lambda: called.append(1))

    assert called == []


def test_the_interrupt_is_not_an_exception_so_except_exception_cannot_swallow_it():
    assert issubclass(MaxRuntimeInterrupt, BaseException)
    assert not issubclass(MaxRuntimeInterrupt, Exception)
