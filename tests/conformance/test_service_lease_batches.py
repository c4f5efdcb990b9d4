"""heartbeat_many, fail_many and release_many: a batch in one transaction, each job
fenced on its own exactly as the one-job calls are."""

from __future__ import annotations

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm import InvalidInput, JobFailure, JobStatus, LeaseLost, MaxRuntimeExceeded
from tests.support.queue_helpers import job_row


def _rows(engine: sqlalchemy.engine.Engine, sql: str) -> list[tuple]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.exec_driver_sql(sql)]


def _stale_and_reclaimed(
    queue: sqlq_orm.Queue, clock: sqlq_orm.PinnedClock, count: int = 2
) -> tuple[sqlq_orm.Lease, list[sqlq_orm.Lease]]:
    """``count`` running leases of w1; the first one then swept and reclaimed by w2."""
    queue.enqueue_many([{"type": "noop"}] * count)
    stale, *kept = queue.claim("w1", limit=count, start=True, lease_seconds=10)
    for lease in kept:
        queue.heartbeat(lease, 3600)
    clock.advance(11)
    assert queue.sweep().expired == 1
    clock.advance(3600)
    (reclaimed,) = queue.claim("w2", start=True, lease_seconds=7200)
    assert reclaimed.job_id == stale.job_id
    for lease in kept:
        queue.heartbeat(lease, 3600)
    return stale, kept


# ------------------------------------------------------------------ heartbeat_many


def test_heartbeat_many_renews_every_lease_with_one_statement(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine, clock: sqlq_orm.PinnedClock
) -> None:
    queue.enqueue_many([{"type": "noop"}] * 3)
    leases = queue.claim("w1", limit=3, start=True, lease_seconds=10)
    clock.advance(5)

    renewed = queue.heartbeat_many(leases, 60)

    expires = clock.now() + 60 + 1  # a truncated "now": one more second, never early
    assert renewed == {lease.job_id: expires for lease in leases}
    assert [lease.lease_expires_at for lease in leases] == [expires] * 3
    assert _rows(engine, "SELECT DISTINCT lease_expires_at, heartbeat_at FROM sqlq_jobs") == [
        (expires, clock.now())
    ]


def test_heartbeat_many_reports_a_lost_lease_and_leaves_its_new_holder_alone(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine, clock: sqlq_orm.PinnedClock
) -> None:
    stale, (kept,) = _stale_and_reclaimed(queue, clock)
    holder_expiry = _rows(
        engine, f"SELECT lease_expires_at FROM sqlq_jobs WHERE id = {stale.job_id}"
    )

    results = queue.heartbeat_many([stale, kept], 60)

    assert isinstance(results[stale.job_id], LeaseLost)
    assert results[kept.job_id] == clock.now() + 60 + 1
    assert (
        _rows(engine, f"SELECT lease_expires_at FROM sqlq_jobs WHERE id = {stale.job_id}")
        == holder_expiry
    )


def test_heartbeat_many_says_which_job_ran_past_its_max_runtime(
    queue: sqlq_orm.Queue, clock: sqlq_orm.PinnedClock
) -> None:
    over = queue.enqueue("noop", max_runtime_seconds=30)
    fine = queue.enqueue("noop")
    leases = queue.claim("w1", limit=2, start=True, lease_seconds=20)
    queue.heartbeat_many(leases, 20)
    clock.advance(19)
    queue.heartbeat_many(leases, 20)
    clock.advance(19)

    results = queue.heartbeat_many(leases, 20)

    assert isinstance(results[over.id], MaxRuntimeExceeded)
    assert results[fine.id] == clock.now() + 20 + 1


def test_heartbeat_many_writes_a_heartbeat_event_only_when_one_is_due(
    engine: sqlalchemy.engine.Engine,
) -> None:
    queue = sqlq_orm.Queue(engine, heartbeat_event_interval=3600)
    queue.enqueue_many([{"type": "noop"}] * 2)
    first, second = queue.claim("w1", limit=2, start=True)
    second.last_heartbeat_event = -1e9  # its last HEARTBEAT event was long ago

    queue.heartbeat_many([first, second])
    queue.heartbeat_many([first, second])

    assert _rows(
        engine,
        "SELECT job_id, count(*) FROM sqlq_job_events WHERE event = 'HEARTBEAT' GROUP BY job_id",
    ) == [(second.job_id, 1)]


def test_heartbeat_many_refuses_the_same_job_twice_and_writes_nothing(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine
) -> None:
    queue.enqueue("noop")
    (lease,) = queue.claim("w1", start=True)
    before = _rows(engine, "SELECT lease_expires_at, heartbeat_at FROM sqlq_jobs")

    with pytest.raises(InvalidInput, match=f"job {lease.job_id} twice"):
        queue.heartbeat_many([lease, lease])

    assert _rows(engine, "SELECT lease_expires_at, heartbeat_at FROM sqlq_jobs") == before


# ------------------------------------------------------------------------ fail_many


def test_fail_many_retries_or_fails_each_job_as_fail_would(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine
) -> None:
    retried = queue.enqueue("noop", max_retries=2)
    final = queue.enqueue("noop", max_retries=0)
    fatal = queue.enqueue("noop", max_retries=2)
    leases = {lease.job_id: lease for lease in queue.claim("w1", limit=3, start=True)}

    went_to = queue.fail_many(
        [
            JobFailure(leases[retried.id], "NETWORK:TIMEOUT", "slow"),
            JobFailure(leases[final.id], "NETWORK:TIMEOUT"),
            JobFailure(leases[fatal.id], "INPUT:BAD", retryable=False),
        ]
    )

    assert went_to == {
        retried.id: JobStatus.QUEUED,
        final.id: JobStatus.FAILED,
        fatal.id: JobStatus.FAILED,
    }
    assert _rows(
        engine, "SELECT id, status, retry_count, error_code FROM sqlq_jobs ORDER BY id"
    ) == [
        (retried.id, "QUEUED", 1, "NETWORK:TIMEOUT"),
        (final.id, "FAILED", 0, "NETWORK:TIMEOUT"),
        (fatal.id, "FAILED", 0, "INPUT:BAD"),
    ]
    assert _rows(
        engine, "SELECT job_id, status, error_code FROM sqlq_job_attempts ORDER BY job_id"
    ) == [
        (retried.id, "FAILED", "NETWORK:TIMEOUT"),
        (final.id, "FAILED", "NETWORK:TIMEOUT"),
        (fatal.id, "FAILED", "INPUT:BAD"),
    ]
    assert _rows(
        engine,
        "SELECT job_id, event FROM sqlq_job_events"
        " WHERE event IN ('RETRY_SCHEDULED', 'FAILED') ORDER BY job_id",
    ) == [(retried.id, "RETRY_SCHEDULED"), (final.id, "FAILED"), (fatal.id, "FAILED")]


def test_fail_many_reports_a_lost_lease_as_none_and_writes_nothing_for_it(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine, clock: sqlq_orm.PinnedClock
) -> None:
    stale, (kept,) = _stale_and_reclaimed(queue, clock)

    went_to = queue.fail_many(
        [
            JobFailure(stale, "APP:BROKEN", retryable=False),
            JobFailure(kept, "APP:BROKEN", retryable=False),
        ]
    )

    assert went_to == {stale.job_id: None, kept.job_id: JobStatus.FAILED}
    assert _rows(engine, f"SELECT status, claimed_by FROM sqlq_jobs WHERE id = {stale.job_id}") == [
        ("RUNNING", "w2")
    ]
    assert _rows(
        engine,
        f"SELECT count(*) FROM sqlq_job_events WHERE job_id = {stale.job_id} AND event = 'FAILED'",
    ) == [(0,)]


def test_fail_many_with_one_invalid_error_code_writes_nothing_at_all(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine
) -> None:
    queue.enqueue_many([{"type": "noop"}] * 2)
    good, bad = queue.claim("w1", limit=2, start=True)

    with pytest.raises(InvalidInput, match="not-a-code"):
        queue.fail_many([JobFailure(good, "APP:BROKEN"), JobFailure(bad, "not-a-code")])

    assert queue.counts_by_status()["RUNNING"] == 2
    assert _rows(engine, "SELECT count(*) FROM sqlq_job_attempts WHERE status <> 'RUNNING'") == [
        (0,)
    ]


# --------------------------------------------------------------------- release_many


def test_release_many_gives_jobs_back_without_spending_a_retry(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine
) -> None:
    queue.enqueue_many([{"type": "noop"}] * 2)
    started = queue.claim("w1", start=True)
    claimed = queue.claim("w1")

    lost = queue.release_many(started + claimed, "shutting down")

    assert lost == []
    assert _rows(engine, "SELECT DISTINCT status, retry_count, lease_token FROM sqlq_jobs") == [
        ("QUEUED", 0, None)
    ]
    assert _rows(engine, "SELECT job_id, status, error_detail FROM sqlq_job_attempts") == [
        (started[0].job_id, "RELEASED", "shutting down")
    ]
    assert _rows(engine, "SELECT count(*) FROM sqlq_job_events WHERE event = 'RELEASED'") == [(2,)]


def test_release_many_returns_a_lost_lease_and_leaves_its_new_holder_alone(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine, clock: sqlq_orm.PinnedClock
) -> None:
    stale, (kept,) = _stale_and_reclaimed(queue, clock)

    lost = queue.release_many([stale, kept])

    assert [lease.job_id for lease in lost] == [stale.job_id]
    assert _rows(engine, f"SELECT status, claimed_by FROM sqlq_jobs WHERE id = {stale.job_id}") == [
        ("RUNNING", "w2")
    ]
    assert _rows(engine, f"SELECT status FROM sqlq_jobs WHERE id = {kept.job_id}") == [("QUEUED",)]


# ------------------------------------------------------------------ start_many


def test_start_many_starts_claimed_jobs_in_one_transaction_and_reports_a_lost_one(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine, clock: sqlq_orm.PinnedClock
) -> None:
    queue.enqueue("noop", max_runtime_seconds=60)
    queue.enqueue_many([{"type": "noop"}] * 2)
    leases = queue.claim("w1", limit=3, start=True, start_at_most=0, lease_seconds=30)
    assert [lease.started for lease in leases] == [False, False, False]
    queue.cancel(leases[2].job_id)
    clock.advance(5)

    lost = queue.start_many(leases)

    assert lost == [leases[2]]
    assert [(lease.started, lease.attempt) for lease in leases[:2]] == [(True, 1), (True, 1)]
    assert leases[0].deadline_at == clock.now() + 60 + 1  # counted from the start
    assert [job_row(engine, lease.job_id).status for lease in leases] == [
        "RUNNING", "RUNNING", "CANCELLED",
    ]  # fmt: skip
    events = [
        [e.event for e in sqlq_orm.job_timeline(queue, lease.job_id).events] for lease in leases
    ]
    assert events[:2] == [["ENQUEUED", "CLAIMED", "STARTED"]] * 2
    queue.succeed_many(leases[:2])
    assert [e.event for e in sqlq_orm.job_timeline(queue, leases[0].job_id).events] == [
        "ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED",
    ]  # fmt: skip
