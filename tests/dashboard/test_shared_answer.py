"""The report shared by every tab (sqlq_orm.dashboard.cache): computed once per
refresh however many requests ask, refreshed behind their backs, never hiding a failure.

Real threads; time is a pinned clock the test moves."""

from __future__ import annotations

import threading

import pytest

from sqlq_orm.dashboard.cache import SharedAnswer
from tests.support.queue_helpers import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counter_answer(clock: Clock, **options: float) -> SharedAnswer[int]:
    calls = iter(range(1, 1_000_000))
    return SharedAnswer(lambda: next(calls), clock=clock, **options)


def test_many_concurrent_requests_share_one_computation():
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "report"

    shared = SharedAnswer(slow, fresh_seconds=5)
    answers: list[str] = []
    threads = [threading.Thread(target=lambda: answers.append(shared.get())) for _ in range(8)]
    for thread in threads:
        thread.start()
    assert started.wait(10)
    release.set()
    for thread in threads:
        thread.join(10)
    assert answers == ["report"] * 8
    assert shared.computations == 1


def test_an_old_answer_is_served_at_once_while_one_refresh_runs_behind():
    clock = Clock()
    shared = counter_answer(clock, fresh_seconds=5, cost_factor=0)
    assert shared.get() == 1
    clock.now += 4
    assert shared.get() == 1 and shared.computations == 1  # still fresh
    clock.now += 2
    assert shared.get() == 1  # stale: the old answer, the refresh started
    wait_for(lambda: shared.get() == 2, "the background refresh's answer")
    assert shared.computations == 2


def test_a_costly_answer_waits_longer_before_its_refresh():
    clock = Clock()
    ticks = iter([2.0])  # the computation "takes" 2 s of the pinned clock

    def costly() -> str:
        clock.now += next(ticks)
        return "report"

    shared = SharedAnswer(costly, fresh_seconds=5, cost_factor=20, clock=clock)
    shared.get()
    assert shared.computations == 1
    shared.get()  # 2 s cost: fresh for 40 s, not 5
    clock.now += 30
    shared.get()
    assert shared.computations == 1


def test_an_answer_past_the_stale_limit_is_computed_by_the_request():
    clock = Clock()
    shared = counter_answer(clock, fresh_seconds=5, stale_limit_seconds=60)
    shared.get()
    clock.now += 61
    assert shared.get() == 2


def test_a_failed_refresh_is_not_hidden_behind_the_old_answer():
    clock = Clock()
    broken = threading.Event()

    def compute() -> str:
        if broken.is_set():
            raise ConnectionError("database gone")
        return "report"

    shared = SharedAnswer(compute, fresh_seconds=5, cost_factor=0, clock=clock)
    assert shared.get() == "report"
    broken.set()
    clock.now += 6
    assert shared.get() == "report"  # served stale while the refresh fails behind
    wait_for(lambda: shared.computations == 2, "the background refresh")
    wait_for(lambda: not shared._refreshing, "the refresh to finish")
    with pytest.raises(ConnectionError, match="database gone"):
        shared.get()


def test_clear_drops_the_answer_and_one_computed_before_it():
    clock = Clock()
    shared = counter_answer(clock, fresh_seconds=5)
    assert shared.get() == 1
    shared.clear()
    assert shared.get() == 2


def test_zero_seconds_computes_on_every_request():
    shared = counter_answer(Clock(), fresh_seconds=0)
    assert [shared.get(), shared.get()] == [1, 2]
