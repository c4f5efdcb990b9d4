"""RetryPolicy: exponential growth, the cap, jitter bounds, never below one second."""

from __future__ import annotations

import random

import pytest

from sqlq_orm import InvalidInput, RetryPolicy


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
