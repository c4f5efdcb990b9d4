"""Retry backoff: RetryPolicy (exponential growth, the cap, jitter bounds, never below
one second), and the fixed, linear and function shapes a task's ``backoff=`` takes."""

from __future__ import annotations

import random

import pytest

from sqlq_orm import (
    FixedBackoff,
    InvalidInput,
    JobError,
    LinearBackoff,
    RetryPolicy,
    TaskRegistry,
)
from sqlq_orm.core.backoff import backoff_of
from sqlq_orm.tasks.failures import FailurePolicy


def test_delays_double_from_the_base_without_jitter():
    policy = RetryPolicy(base_seconds=10, max_seconds=10_000, jitter=0)
    assert [policy.delay_seconds(n) for n in range(1, 7)] == [10, 20, 40, 80, 160, 320]


def test_delays_stop_growing_at_the_cap():
    policy = RetryPolicy(base_seconds=10, max_seconds=100, jitter=0)
    assert [policy.delay_seconds(n) for n in (4, 5, 6, 50)] == [80, 100, 100, 100]


def test_a_huge_retry_number_does_not_overflow():
    policy = RetryPolicy(base_seconds=10, max_seconds=3600, jitter=0)
    assert policy.delay_seconds(10**9) == 3600


@pytest.mark.parametrize("retry_number", [1, 3, 8, 20])
def test_jitter_stays_within_its_fraction_of_the_delay(retry_number):
    policy = RetryPolicy(base_seconds=10, max_seconds=600, jitter=0.25)
    nominal = min(600, 10 * 2 ** (retry_number - 1))
    rng = random.Random(retry_number)
    delays = [policy.delay_seconds(retry_number, rng) for _ in range(2000)]

    assert min(delays) >= round(nominal * 0.75) and max(delays) <= round(nominal * 1.25)
    assert len(set(delays)) > 1  # it does spread


def test_the_delay_is_never_below_one_second():
    policy = RetryPolicy(base_seconds=0.1, max_seconds=0.2, jitter=0.99)
    rng = random.Random(7)
    assert min(policy.delay_seconds(1, rng) for _ in range(1000)) == 1


def test_a_seeded_rng_gives_repeatable_delays():
    policy = RetryPolicy()
    first = [policy.delay_seconds(3, random.Random(42)) for _ in range(3)]
    assert first == [policy.delay_seconds(3, random.Random(42))] * 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_seconds": 0}, "base_seconds must be a finite number > 0, got 0"),
        ({"base_seconds": float("nan")}, "base_seconds must be a finite number > 0, got nan"),
        ({"base_seconds": float("inf")}, "base_seconds must be a finite number > 0, got inf"),
        ({"base_seconds": 10, "max_seconds": 5}, r"max_seconds \(5\) must be finite and >="),
        ({"max_seconds": float("inf")}, r"max_seconds \(inf\) must be finite"),
        ({"max_seconds": float("nan")}, r"max_seconds \(nan\) must be finite"),
        ({"jitter": 1}, r"jitter must be in \[0, 1\), got 1"),
        ({"jitter": -0.1}, r"jitter must be in \[0, 1\), got -0.1"),
    ],
)
def test_bad_policies_are_refused(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        RetryPolicy(**kwargs)


def test_retry_numbers_start_at_one():
    with pytest.raises(InvalidInput, match="retry_number must be >= 1, got 0"):
        RetryPolicy().delay_seconds(0)


# -- the shapes a task's backoff= takes ----------------------------------------------


def test_fixed_backoff_waits_the_same_for_every_retry():
    assert [FixedBackoff(30).delay_seconds(n) for n in (1, 2, 9)] == [30, 30, 30]


def test_linear_backoff_adds_a_step_per_retry_up_to_its_cap():
    backoff = LinearBackoff(10, step_seconds=5, max_seconds=22)
    assert [backoff.delay_seconds(n) for n in (1, 2, 3, 4)] == [10, 15, 20, 22]
    assert [LinearBackoff(10).delay_seconds(n) for n in (1, 2, 3)] == [10, 20, 30]


def test_a_backoff_never_asks_for_less_than_a_second():
    assert FixedBackoff(0).delay_seconds(1) == 1
    assert backoff_of(lambda retry: 0.2, "task 't'").delay_seconds(1) == 1


def test_backoff_of_takes_a_number_a_shape_or_a_function_of_the_retry_number():
    assert backoff_of(12, "task 't'") == FixedBackoff(12)
    policy = RetryPolicy(jitter=0)
    assert backoff_of(policy, "task 't'") is policy
    assert backoff_of(lambda retry: 3 * retry, "task 't'").delay_seconds(4) == 12


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("30", "backoff must be a RetryPolicy"),
        (-5, "between 0 and"),
        (float("inf"), "between 0 and"),
        (lambda: 5, "takes one argument, the retry number"),
        (lambda retry: "soon", r"backoff function .*\(1\) must be a number of seconds, got 'soon'"),
        (lambda retry: -1, r"\(1\) must be between 0 and"),
    ],
    ids=["string", "negative", "infinite", "no-argument", "not-a-number", "negative-result"],
)
def test_a_bad_backoff_is_refused_when_the_task_is_defined(value, problem):
    registry = TaskRegistry()
    with pytest.raises(InvalidInput, match=problem) as refused:
        registry.task(name="charge", backoff=value)
    assert "task 'charge'" in str(refused.value)
    assert registry.tasks == {}


def test_a_task_whose_backoff_function_breaks_at_run_time_falls_back_to_the_queues():
    calls: list[int] = []

    def backoff(retry: int) -> float:
        calls.append(retry)
        if retry > 1:
            raise ZeroDivisionError("oops")
        return 5

    policy = FailurePolicy(backoff=backoff_of(backoff, "task 't'"))
    failure = policy.classify(KeyError("k"), "t", retry_number=2)
    assert isinstance(failure, JobError) and failure.retry_in is None
    assert policy.classify(KeyError("k"), "t", retry_number=1).retry_in == 5  # type: ignore[attr-defined]
