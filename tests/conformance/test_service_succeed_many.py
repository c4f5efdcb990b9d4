"""Queue.succeed_many: a batch of finishes in one transaction, each fenced like succeed."""

from __future__ import annotations

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm import InvalidInput, InvalidTransition
from sqlq_orm.ops.timeline import job_timeline


def _rows(engine: sqlalchemy.engine.Engine, sql: str) -> list[tuple]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.exec_driver_sql(sql)]


def test_succeed_many_finishes_every_held_job_with_its_attempt_and_event(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine
) -> None:
    queue.enqueue_many([{"type": "noop"}] * 3)
    leases = queue.claim("w1", limit=3, start=True)

    lost = queue.succeed_many(leases)

    assert lost == []
    assert queue.counts_by_status()["SUCCEEDED"] == 3
    assert _rows(engine, "SELECT status, count(*) FROM sqlq_job_attempts GROUP BY status") == [
        ("SUCCEEDED", 3)
    ]
    for lease in leases:  # the attempt rows stand for the SUCCEEDED events
        (succeeded,) = [
            e for e in job_timeline(queue, lease.job_id).events if e.event == "SUCCEEDED"
        ]
        assert (succeeded.actor, succeeded.detail) == ("w1", {"attempt": 1})
    assert _rows(engine, "SELECT count(*) FROM sqlq_job_events WHERE event = 'SUCCEEDED'") == [(0,)]
    assert _rows(
        engine,
        "SELECT count(*) FROM sqlq_jobs WHERE lease_token IS NOT NULL OR finished_at IS NULL",
    ) == [(0,)]


def test_succeed_many_writes_the_succeeded_events_of_jobs_started_on_their_own(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine
) -> None:
    # Claimed, then started: these attempt rows stand for no event, so each SUCCEEDED
    # is written, next to the CLAIMED and STARTED.
    queue.enqueue_many([{"type": "noop"}] * 2)
    leases = [queue.start(lease) for lease in queue.claim("w1", limit=2)]

    assert queue.succeed_many(leases) == []

    assert _rows(
        engine, "SELECT count(*) FROM sqlq_job_events WHERE event = 'SUCCEEDED' AND actor = 'w1'"
    ) == [(2,)]
    for lease in leases:
        names = [e.event for e in job_timeline(queue, lease.job_id).events]
        assert names == ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]


def test_succeed_many_returns_a_reclaimed_lease_and_writes_nothing_for_it(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine, clock: sqlq_orm.PinnedClock
) -> None:
    queue.enqueue_many([{"type": "noop"}] * 2)
    stale, kept = queue.claim("w1", limit=2, start=True, lease_seconds=10)
    queue.heartbeat(kept, 3600)
    clock.advance(11)
    assert queue.sweep().expired == 1
    clock.advance(3600)
    (reclaimed,) = queue.claim("w2", start=True)

    lost = queue.succeed_many([stale, kept])

    assert [lease.job_id for lease in lost] == [stale.job_id]
    assert reclaimed.job_id == stale.job_id
    assert _rows(engine, f"SELECT status, claimed_by FROM sqlq_jobs WHERE id = {stale.job_id}") == [
        ("RUNNING", "w2")
    ]
    assert _rows(
        engine,
        "SELECT count(*) FROM sqlq_job_events"
        f" WHERE job_id = {stale.job_id} AND event = 'SUCCEEDED'",
    ) == [(0,)]
    assert _rows(engine, f"SELECT status FROM sqlq_jobs WHERE id = {kept.job_id}") == [
        ("SUCCEEDED",)
    ]


def test_succeed_many_refuses_a_lease_never_started_and_writes_nothing(
    queue: sqlq_orm.Queue,
) -> None:
    queue.enqueue_many([{"type": "noop"}] * 2)
    running = queue.claim("w1", start=True)
    claimed = queue.claim("w1")

    with pytest.raises(InvalidTransition):
        queue.succeed_many(running + claimed)

    assert queue.counts_by_status()["SUCCEEDED"] == 0


def test_succeed_many_refuses_the_same_job_twice_and_writes_nothing(
    queue: sqlq_orm.Queue,
) -> None:
    queue.enqueue("noop")
    (lease,) = queue.claim("w1", start=True)

    with pytest.raises(InvalidInput, match="twice"):
        queue.succeed_many([lease, lease])

    assert queue.counts_by_status()["RUNNING"] == 1


def test_succeed_many_of_a_mixed_batch_writes_only_the_events_no_row_stands_for(
    queue: sqlq_orm.Queue, engine: sqlalchemy.engine.Engine
) -> None:
    queue.enqueue_many([{"type": "noop"}] * 2)
    (claimed,) = queue.claim("w1")
    (running,) = queue.claim("w1", start=True)

    assert queue.succeed_many([queue.start(claimed), running]) == []

    assert _rows(engine, "SELECT job_id FROM sqlq_job_events WHERE event = 'SUCCEEDED'") == [
        (claimed.job_id,)
    ]
    for lease in (claimed, running):
        names = [e.event for e in job_timeline(queue, lease.job_id).events]
        assert names == ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]
