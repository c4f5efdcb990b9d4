"""The test helpers' own tests: the event-timeline replay and the row snapshot."""

from __future__ import annotations

import pytest
import sqlalchemy

from sqlq_orm.schema.models import Job
from sqlq_orm.schema.states import JobStatus
from tests.support.queue_helpers import replay, snapshot


def test_replay_follows_a_full_lifecycle_to_its_status():
    timeline = ["ENQUEUED", "CLAIMED", "STARTED", "RETRY_SCHEDULED", "CLAIMED", "STARTED"]
    assert replay([*timeline, "SUCCEEDED"]) is JobStatus.SUCCEEDED


def test_replay_rejects_an_event_the_table_does_not_allow():
    with pytest.raises(AssertionError, match="SUCCEEDED is not allowed in CLAIMED"):
        replay(["ENQUEUED", "CLAIMED", "SUCCEEDED"])


def test_replay_rejects_a_recovery_that_does_not_move_the_job():
    with pytest.raises(AssertionError, match="must be followed by RETRY_SCHEDULED or FAILED"):
        replay(["ENQUEUED", "CLAIMED", "RECOVERED", "CANCELLED"])


def test_replay_rejects_a_timeline_that_does_not_start_with_enqueued():
    with pytest.raises(AssertionError, match="starts with CLAIMED"):
        replay(["CLAIMED", "STARTED"])


def test_snapshot_sees_a_change_to_any_part_of_the_job(queue, engine):
    job = queue.enqueue("report")
    before = snapshot(engine, job.id)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.update(Job.__table__).where(Job.__table__.c.id == job.id).values(priority=5)
        )
    assert snapshot(engine, job.id) != before
