"""A job's whole life through the service, step by step, on SQLite and PostgreSQL.

Each test drives one path with the pinned clock and then checks the exact attempts
and events written, in order, and that every timeline replays through the transition
table (see ``test_service_support.replay``).
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from sqlq_orm import InvalidTransition, JobNotFound, LeaseLost, Queue, RetryPolicy
from tests.conftest import PINNED_START as T0
from tests.support.backends import engine_for
from tests.support.queue_helpers import (
    assert_histories_are_legal,
    attempt_rows,
    event_names,
    job_row,
    snapshot,
)

NO_JITTER = RetryPolicy(base_seconds=10, max_seconds=3600, jitter=0)


@pytest.fixture
def steady_queue(engine, clock) -> Queue:
    """A queue whose retry backoff is exact (10 s, 20 s, 40 s ...)."""
    return Queue(engine, clock=clock, retry_policy=NO_JITTER)


def test_claim_start_heartbeat_succeed_writes_one_attempt_and_four_events(queue, engine, clock):
    job = queue.enqueue("send_email", {"to": "a@example.com"}, queue="mail", priority=3)
    clock.advance(1)
    (lease,) = queue.claim("worker-a", queues=["mail"], lease_seconds=30)
    clock.advance(1)
    queue.start(lease)
    clock.advance(1)
    expires_at = queue.heartbeat(lease, lease_seconds=60)
    clock.advance(1)
    queue.succeed(lease, result_ref="s3://bucket/result.json")

    state = snapshot(engine, job.id)
    row = state["job"]
    assert lease.payload == {"to": "a@example.com"} and lease.attempt == 1
    assert expires_at == T0 + 3 + 60 + 1  # a truncated "now": one second more, never early
    assert row["status"] == "SUCCEEDED" and row["result_ref"] == "s3://bucket/result.json"
    assert (row["created_at"], row["claimed_at"], row["started_at"], row["heartbeat_at"]) == (
        T0, T0 + 1, T0 + 2, T0 + 3,
    )  # fmt: skip
    assert row["finished_at"] == T0 + 4 and row["claimed_by"] == "worker-a"
    assert (row["lease_token"], row["lease_expires_at"], row["deadline_at"]) == (None, None, None)
    assert (row["attempt_count"], row["retry_count"], row["error_code"]) == (1, 0, None)
    attempts = [
        (a["attempt"], a["status"], a["worker_id"], a["started_at"], a["finished_at"])
        for a in state["attempts"]
    ]
    assert attempts == [(1, "SUCCEEDED", "worker-a", T0 + 2, T0 + 4)]
    assert [(e["event"], e["ts"], e["actor"]) for e in state["events"]] == [
        ("ENQUEUED", T0, "system"),
        ("CLAIMED", T0 + 1, "worker-a"),
        ("STARTED", T0 + 2, "worker-a"),
        ("SUCCEEDED", T0 + 4, "worker-a"),
    ]
    assert assert_histories_are_legal(engine) == 1


def test_claim_with_start_runs_at_once_and_a_failed_attempt_is_retried(steady_queue, engine, clock):
    job = steady_queue.enqueue("resize", {"w": 10}, max_retries=3)
    (first,) = steady_queue.claim("worker-a", start=True)
    outcome = steady_queue.fail(first, "timeout: upstream-api", "upstream took 31s")

    assert outcome.value == "QUEUED"
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.run_at) == ("QUEUED", 1, T0 + 10)
    assert (row.error_code, row.error_detail) == ("TIMEOUT:UPSTREAM_API", "upstream took 31s")
    assert steady_queue.claim("worker-b", start=True) == []  # backoff not over yet
    clock.advance(10)
    (second,) = steady_queue.claim("worker-b", start=True)
    steady_queue.succeed(second)

    assert (first.attempt, second.attempt) == (1, 2)
    assert attempt_rows(engine, job.id) == [
        (1, "FAILED", "TIMEOUT:UPSTREAM_API"),
        (2, "SUCCEEDED", None),
    ]
    assert event_names(engine, job.id) == [
        "ENQUEUED", "CLAIMED", "STARTED", "RETRY_SCHEDULED",
        "CLAIMED", "STARTED", "SUCCEEDED",
    ]  # fmt: skip
    retry_detail = json.loads(snapshot(engine, job.id)["events"][3]["detail"])
    assert retry_detail == {
        "attempt": 1, "error_code": "TIMEOUT:UPSTREAM_API", "retry": 1, "delay": 10,
        "run_at": T0 + 10,
    }  # fmt: skip
    final = job_row(engine, job.id)
    assert (final.status, final.error_code, final.error_detail) == ("SUCCEEDED", None, None)
    assert assert_histories_are_legal(engine) == 1


def test_release_requeues_at_once_without_spending_a_retry(queue, engine, clock):
    job = queue.enqueue("index_page")
    (lease,) = queue.claim("worker-a", start=True)
    clock.advance(5)
    queue.release(lease, reason="worker shutting down")

    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.run_at, row.lease_token) == (
        "QUEUED", 0, T0 + 5, None,
    )  # fmt: skip
    (again,) = queue.claim("worker-b", start=True)
    queue.succeed(again)

    assert again.attempt == 2
    assert attempt_rows(engine, job.id) == [(1, "RELEASED", None), (2, "SUCCEEDED", None)]
    assert event_names(engine, job.id) == [
        "ENQUEUED", "CLAIMED", "STARTED", "RELEASED", "CLAIMED", "STARTED", "SUCCEEDED",
    ]  # fmt: skip
    assert assert_histories_are_legal(engine) == 1


def test_release_of_an_unstarted_claim_opens_no_attempt(queue, engine):
    job = queue.enqueue("index_page")
    (lease,) = queue.claim("worker-a")
    queue.release(lease)

    assert attempt_rows(engine, job.id) == []
    assert event_names(engine, job.id) == ["ENQUEUED", "CLAIMED", "RELEASED"]
    assert job_row(engine, job.id).status == "QUEUED"


def test_failing_an_unstarted_claim_records_no_attempt(queue, engine):
    job = queue.enqueue("index_page", max_retries=0)
    (lease,) = queue.claim("worker-a")
    outcome = queue.fail(lease, "INVALID_INPUT:CORRUPT_PAYLOAD", "not JSON", retryable=False)

    assert outcome.value == "FAILED"
    assert attempt_rows(engine, job.id) == []
    assert event_names(engine, job.id) == ["ENQUEUED", "CLAIMED", "FAILED"]
    assert job_row(engine, job.id).error_code == "INVALID_INPUT:CORRUPT_PAYLOAD"


def test_succeeding_an_unstarted_claim_is_refused_and_changes_nothing(queue, engine):
    job = queue.enqueue("index_page")
    (lease,) = queue.claim("worker-a")
    before = snapshot(engine, job.id)

    with pytest.raises(InvalidTransition, match="start it first"):
        queue.succeed(lease)
    assert snapshot(engine, job.id) == before


def test_cancelling_a_running_job_closes_its_attempt_and_fences_the_worker(queue, engine, clock):
    job = queue.enqueue("crawl")
    (lease,) = queue.claim("worker-a", start=True)
    clock.advance(3)
    queue.cancel(job.id, actor="ops", reason="wrong site")

    row = job_row(engine, job.id)
    assert (row.status, row.finished_at, row.lease_token) == ("CANCELLED", T0 + 3, None)
    assert attempt_rows(engine, job.id) == [(1, "CANCELLED", None)]
    events = snapshot(engine, job.id)["events"]
    assert [e["event"] for e in events] == ["ENQUEUED", "CLAIMED", "STARTED", "CANCELLED"]
    assert events[-1]["actor"] == "ops"
    assert json.loads(events[-1]["detail"]) == {"was": "RUNNING", "reason": "wrong site"}
    with pytest.raises(LeaseLost):
        queue.heartbeat(lease)
    with pytest.raises(LeaseLost):
        queue.succeed(lease)
    assert assert_histories_are_legal(engine) == 1


def test_cancelling_a_queued_job_needs_no_worker(queue, engine):
    job = queue.enqueue("crawl")
    queue.cancel(job.id)

    assert job_row(engine, job.id).status == "CANCELLED"
    assert queue.claim("worker-a") == []
    assert event_names(engine, job.id) == ["ENQUEUED", "CANCELLED"]


def test_manual_retry_requeues_a_failed_job_with_a_fresh_budget(steady_queue, engine):
    job = steady_queue.enqueue("charge_card", max_retries=2)
    (lease,) = steady_queue.claim("worker-a", start=True)
    steady_queue.fail(lease, "INVALID_INPUT:CARD_DECLINED", "declined", retryable=False)
    steady_queue.retry(job.id, actor="ops")

    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.finished_at) == ("QUEUED", 0, None)
    (again,) = steady_queue.claim("worker-b", start=True)
    steady_queue.succeed(again)
    assert again.attempt == 2
    assert attempt_rows(engine, job.id) == [
        (1, "FAILED", "INVALID_INPUT:CARD_DECLINED"),
        (2, "SUCCEEDED", None),
    ]
    assert event_names(engine, job.id) == [
        "ENQUEUED", "CLAIMED", "STARTED", "FAILED", "RETRIED",
        "CLAIMED", "STARTED", "SUCCEEDED",
    ]  # fmt: skip
    assert assert_histories_are_legal(engine) == 1


def test_manual_retry_of_a_cancelled_job_requeues_it(queue, engine):
    job = queue.enqueue("crawl")
    queue.cancel(job.id)
    queue.retry(job.id)

    assert job_row(engine, job.id).status == "QUEUED"
    assert event_names(engine, job.id) == ["ENQUEUED", "CANCELLED", "RETRIED"]


def test_cancel_and_retry_refuse_jobs_in_the_wrong_state(queue, engine):
    done = queue.enqueue("crawl")
    (lease,) = queue.claim("worker-a", start=True)
    queue.succeed(lease)
    waiting = queue.enqueue("crawl")
    before = (snapshot(engine, done.id), snapshot(engine, waiting.id))

    with pytest.raises(InvalidTransition, match=f"cannot cancel job {done.id}: it is SUCCEEDED"):
        queue.cancel(done.id)
    with pytest.raises(InvalidTransition, match=f"cannot retry job {waiting.id}: it is QUEUED"):
        queue.retry(waiting.id)
    with pytest.raises(JobNotFound, match="no job with id 999999"):
        queue.cancel(999_999)
    assert (snapshot(engine, done.id), snapshot(engine, waiting.id)) == before


def test_manual_retry_is_refused_while_another_job_holds_the_dedupe_key(queue, engine):
    first = queue.enqueue("sync", dedupe_key="account-7")
    queue.cancel(first.id)
    second = queue.enqueue("sync", dedupe_key="account-7")
    before = snapshot(engine, first.id)

    with pytest.raises(InvalidTransition, match="dedupe_key"):
        queue.retry(first.id)
    assert second.created and second.id != first.id
    assert snapshot(engine, first.id) == before


def test_heartbeat_writes_no_event_until_the_event_interval_has_passed(engine, clock):
    chatty = Queue(engine, clock=clock, heartbeat_event_interval=0)
    quiet = Queue(engine, clock=clock)
    loud_job, quiet_job = chatty.enqueue("a"), chatty.enqueue("b")
    (loud_lease,) = chatty.claim("worker-a", start=True, queues=["default"])
    (quiet_lease,) = quiet.claim("worker-b", start=True)
    for _ in range(3):
        chatty.heartbeat(loud_lease)
        quiet.heartbeat(quiet_lease)

    assert event_names(engine, quiet_job.id).count("HEARTBEAT") == 0
    assert event_names(engine, loud_job.id).count("HEARTBEAT") == 3
    assert assert_histories_are_legal(engine) == 2


def test_hot_paths_never_flush_an_orm_session(steady_queue, clock):
    flushes = []

    def count_flush(session, flush_context, instances):
        flushes.append(session)

    event.listen(Session, "before_flush", count_flush)
    try:
        steady_queue.enqueue_many([{"type": "a"} for _ in range(4)])
        first, second, third, fourth = steady_queue.claim("worker-a", limit=4)
        steady_queue.start(first)
        steady_queue.heartbeat(first)
        steady_queue.succeed(first)
        steady_queue.start(second)
        steady_queue.fail(second, "INTERNAL:BUG", "boom")
        steady_queue.release(third)
        clock.advance(3600)
        steady_queue.sweep()
    finally:
        event.remove(Session, "before_flush", count_flush)

    assert flushes == []


def test_clients_taking_turns_run_the_same_statements_many_times(db_url, queue, clock):
    # Two clients, one connection each, alternating: through PgBouncer in transaction
    # mode their transactions share server connections, so a statement one of them
    # prepared on the server (psycopg does after five runs) meets the other's there.
    engines = [engine_for(db_url, pool_size=1, max_overflow=0) for _ in range(2)]
    queues = [Queue(e, clock=clock) for e in engines]
    try:
        for round_ in range(8):
            for turn in queues:
                job = turn.enqueue("echo", {"round": round_})
                (lease,) = turn.claim("w", limit=1, start=True)
                assert lease.job_id == job.id
                turn.heartbeat(lease)
                turn.succeed(lease)
    finally:
        for e in engines:
            e.dispose()
    assert queue.counts_by_status()["SUCCEEDED"] == 16
