"""Retry boundaries: how many attempts a job gets, and when the next one may start."""

from __future__ import annotations

import pytest

from sqlq_orm import Queue, RetryPolicy
from tests.support.queue_helpers import (
    assert_histories_are_legal,
    attempt_rows,
    event_names,
    job_row,
)

NO_JITTER = RetryPolicy(base_seconds=10, max_seconds=3600, jitter=0)


@pytest.fixture
def steady_queue(engine, clock) -> Queue:
    return Queue(engine, clock=clock, retry_policy=NO_JITTER)


def _run_and_fail(queue: Queue, clock, **fail_kwargs) -> str:
    """Claim the one ready job, start it, fail it; return where it went."""
    (lease,) = queue.claim("worker-a", start=True)
    return queue.fail(lease, "DEPENDENCY:DB_LOCKED", "locked", **fail_kwargs).value


def test_max_retries_zero_fails_on_the_first_failure(steady_queue, engine, clock):
    job = steady_queue.enqueue("sync", max_retries=0)
    outcome = _run_and_fail(steady_queue, clock)

    assert outcome == "FAILED"
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.finished_at) == ("FAILED", 0, clock.now())
    assert attempt_rows(engine, job.id) == [(1, "FAILED", "DEPENDENCY:DB_LOCKED")]
    assert event_names(engine, job.id) == ["ENQUEUED", "CLAIMED", "STARTED", "FAILED"]


def test_max_retries_two_gives_three_attempts_then_failed(steady_queue, engine, clock):
    job = steady_queue.enqueue("sync", max_retries=2)
    outcomes = []
    for delay in (10, 20, None):
        outcomes.append(_run_and_fail(steady_queue, clock))
        if delay is not None:
            assert job_row(engine, job.id).run_at == clock.now() + delay
            clock.advance(delay)

    assert outcomes == ["QUEUED", "QUEUED", "FAILED"]
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.attempt_count) == ("FAILED", 2, 3)
    assert [a[:2] for a in attempt_rows(engine, job.id)] == [
        (1, "FAILED"), (2, "FAILED"), (3, "FAILED"),
    ]  # fmt: skip
    assert event_names(engine, job.id) == [
        "ENQUEUED",
        "CLAIMED", "STARTED", "RETRY_SCHEDULED",
        "CLAIMED", "STARTED", "RETRY_SCHEDULED",
        "CLAIMED", "STARTED", "FAILED",
    ]  # fmt: skip
    assert assert_histories_are_legal(engine) == 1


def test_a_retried_job_is_not_claimable_until_its_run_at(steady_queue, engine, clock):
    job = steady_queue.enqueue("sync", max_retries=3)
    _run_and_fail(steady_queue, clock)
    run_at = job_row(engine, job.id).run_at

    assert run_at == clock.now() + 10
    clock.set(run_at - 1)
    assert steady_queue.claim("worker-b") == []
    clock.set(run_at)
    (lease,) = steady_queue.claim("worker-b")
    assert lease.job_id == job.id and lease.retry_count == 1


def test_backoff_grows_exponentially_up_to_the_cap(engine, clock):
    capped = Queue(engine, clock=clock, retry_policy=RetryPolicy(10, max_seconds=25, jitter=0))
    job = capped.enqueue("sync", max_retries=5)
    delays = []
    for _ in range(4):
        _run_and_fail(capped, clock)
        delays.append(job_row(engine, job.id).run_at - clock.now())
        clock.set(job_row(engine, job.id).run_at)

    assert delays == [10, 20, 25, 25]


def test_jittered_backoff_still_pushes_run_at_out(queue, engine, clock):
    job = queue.enqueue("sync", max_retries=1)  # default policy: 10 s +- 25 %
    _run_and_fail(queue, clock)

    delay = job_row(engine, job.id).run_at - clock.now()
    assert 7 <= delay <= 13


def test_non_retryable_failure_goes_straight_to_failed_with_retries_left(
    steady_queue, engine, clock
):
    job = steady_queue.enqueue("sync", max_retries=5)
    outcome = _run_and_fail(steady_queue, clock, retryable=False)

    assert outcome == "FAILED"
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.error_code) == ("FAILED", 0, "DEPENDENCY:DB_LOCKED")
    assert event_names(engine, job.id)[-1] == "FAILED"


def test_error_detail_is_cut_to_a_short_summary(steady_queue, engine, clock):
    job = steady_queue.enqueue("sync", max_retries=0)
    (lease,) = steady_queue.claim("worker-a", start=True)
    steady_queue.fail(lease, "INTERNAL:ASSERTION_FAILED", "x" * 5000)

    detail = job_row(engine, job.id).error_detail
    assert len(detail) == 500 and detail.endswith("…")
