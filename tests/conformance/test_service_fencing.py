"""Fencing: a call that presents a stale or wrong lease token changes nothing.

Every call made under a lease (start, heartbeat, succeed, fail, release) is a guarded
UPDATE; when the guard does not match, the call raises LeaseLost and the job, its
attempts and its events are exactly as they were.
"""

from __future__ import annotations

import dataclasses

import pytest

from sqlq_orm import LeaseLost, MaxRuntimeExceeded, Queue, RetryPolicy
from tests.support.queue_helpers import (
    assert_histories_are_legal,
    attempt_rows,
    event_names,
    snapshot,
)

NO_JITTER = RetryPolicy(base_seconds=10, jitter=0)
LEASE = 30


def _every_call_under(queue: Queue, lease) -> dict[str, object]:
    """Each call a worker can make with a lease, as a thunk."""
    return {
        "start": lambda: queue.start(lease),
        "heartbeat": lambda: queue.heartbeat(lease),
        "succeed": lambda: queue.succeed(lease),
        "fail": lambda: queue.fail(lease, "INTERNAL:BUG", "late"),
        "release": lambda: queue.release(lease),
    }


@pytest.fixture
def steady_queue(engine, clock) -> Queue:
    return Queue(engine, clock=clock, retry_policy=NO_JITTER)


def test_zombie_calls_after_reclaim_are_rejected_and_change_nothing(steady_queue, engine, clock):
    job = steady_queue.enqueue("render")
    (zombie,) = steady_queue.claim("worker-a", lease_seconds=LEASE)
    steady_queue.start(zombie)
    clock.advance(LEASE + 1)  # worker-a stops heartbeating: its lease expires
    assert steady_queue.sweep().expired == 1
    clock.advance(10)  # the retry backoff
    (fresh,) = steady_queue.claim("worker-b", lease_seconds=LEASE, start=True)
    before = snapshot(engine, job.id)

    for name, call in _every_call_under(steady_queue, zombie).items():
        with pytest.raises(LeaseLost) as caught:
            call()
        assert type(caught.value) is LeaseLost, name
        assert caught.value.job_id == job.id
        assert snapshot(engine, job.id) == before, f"zombie {name} changed the job"

    steady_queue.heartbeat(fresh)
    steady_queue.succeed(fresh)
    assert attempt_rows(engine, job.id) == [(1, "FAILED", "LEASE:EXPIRED"), (2, "SUCCEEDED", None)]
    assert event_names(engine, job.id) == [
        "ENQUEUED", "CLAIMED", "STARTED", "RECOVERED", "RETRY_SCHEDULED",
        "CLAIMED", "STARTED", "SUCCEEDED",
    ]  # fmt: skip
    assert assert_histories_are_legal(engine) == 1


def test_zombie_of_an_unstarted_claim_cannot_start_after_reclaim(queue, engine, clock):
    job = queue.enqueue("render")
    (zombie,) = queue.claim("worker-a", lease_seconds=LEASE)
    clock.advance(LEASE + 1)
    queue.sweep()
    clock.advance(3600)
    queue.claim("worker-b", lease_seconds=LEASE)
    before = snapshot(engine, job.id)

    with pytest.raises(LeaseLost):
        queue.start(zombie)
    assert snapshot(engine, job.id) == before


@pytest.mark.parametrize("call", ["start", "heartbeat", "succeed", "fail", "release"])
def test_a_wrong_token_is_rejected_and_changes_nothing(queue, engine, call):
    job = queue.enqueue("render")
    (lease,) = queue.claim("worker-a", start=call != "start")
    forged = dataclasses.replace(lease, token="not-the-token")
    before = snapshot(engine, job.id)

    with pytest.raises(LeaseLost):
        _every_call_under(queue, forged)[call]()
    assert snapshot(engine, job.id) == before


@pytest.mark.parametrize("call", ["start", "heartbeat", "succeed", "fail", "release"])
def test_calls_on_a_finished_job_are_rejected_and_change_nothing(queue, engine, call):
    job = queue.enqueue("render")
    (lease,) = queue.claim("worker-a", start=True)
    queue.succeed(lease)
    before = snapshot(engine, job.id)

    with pytest.raises(LeaseLost):
        _every_call_under(queue, lease)[call]()
    assert snapshot(engine, job.id) == before


def test_heartbeat_past_max_runtime_is_refused_and_the_sweeper_ends_the_run(
    steady_queue, engine, clock
):
    job = steady_queue.enqueue("transcode", max_runtime_seconds=60, max_retries=1)
    (lease,) = steady_queue.claim("worker-a", start=True, lease_seconds=LEASE)
    for _ in range(5):  # heartbeats well within the max runtime keep the lease
        clock.advance(10)
        steady_queue.heartbeat(lease, lease_seconds=LEASE)
    clock.advance(10)  # at started_at + 60 by a truncated clock: maybe 60.9 s, maybe 60.0
    steady_queue.heartbeat(lease, lease_seconds=LEASE)  # never ended early: still running
    clock.advance(1)  # past any started_at + 60, whatever the fraction
    before = snapshot(engine, job.id)

    with pytest.raises(MaxRuntimeExceeded, match="max runtime of 60s"):
        steady_queue.heartbeat(lease, lease_seconds=LEASE)
    assert snapshot(engine, job.id) == before  # the lease was not renewed
    result = steady_queue.sweep()
    with pytest.raises(LeaseLost) as caught:
        steady_queue.heartbeat(lease)

    assert type(caught.value) is LeaseLost
    assert (result.timed_out, result.expired, result.requeued) == (1, 0, 1)
    row = snapshot(engine, job.id)["job"]
    assert (row["status"], row["error_code"], row["retry_count"]) == (
        "QUEUED", "TIMEOUT:MAX_RUNTIME", 1,
    )  # fmt: skip
    assert attempt_rows(engine, job.id) == [(1, "FAILED", "TIMEOUT:MAX_RUNTIME")]
    assert event_names(engine, job.id)[-2:] == ["TIMED_OUT", "RETRY_SCHEDULED"]
    assert assert_histories_are_legal(engine) == 1


def test_a_run_past_max_runtime_with_no_retries_left_ends_failed(queue, engine, clock):
    job = queue.enqueue("transcode", max_runtime_seconds=60, max_retries=0)
    (lease,) = queue.claim("worker-a", start=True, lease_seconds=600)
    clock.advance(60)
    assert queue.sweep().timed_out == 0  # a truncated clock's 60 s may be 59.1 s
    clock.advance(1)
    result = queue.sweep()

    assert (result.timed_out, result.failed) == (1, 1)
    row = snapshot(engine, job.id)["job"]
    assert (row["status"], row["error_code"]) == ("FAILED", "TIMEOUT:MAX_RUNTIME")
    assert event_names(engine, job.id)[-2:] == ["TIMED_OUT", "FAILED"]
    with pytest.raises(LeaseLost):
        queue.succeed(lease)
