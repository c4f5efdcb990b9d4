"""Operator controls on schedules: pause, resume (from the next slot), run one now."""

from __future__ import annotations

import json

import pytest

from sqlq_orm import InvalidInput, Schedule, SqlqError
from sqlq_orm.ops.invariants import check
from tests.conftest import PINNED_START
from tests.support.queue_helpers import event_names

HOUR = 3600
NEXT_HOUR = (PINNED_START // HOUR + 1) * HOUR


def hourly() -> Schedule:
    return Schedule.declare(
        "0 * * * *", "report", payload={"kind": "hourly"}, queue="reports", priority=3
    )


def tick(queue, schedule: Schedule) -> tuple[int, ...]:
    return queue.enqueue_due_slots({schedule.name: schedule}).job_ids


def test_a_paused_schedule_does_not_fire_and_resumes_from_its_next_slot(queue, clock):
    schedule = hourly()
    queue.register_schedules([schedule])

    assert queue.pause_schedule("report") is True
    assert queue.pause_schedule("report") is False
    (state,) = queue.list_schedules()
    assert state.paused_at == clock.now()
    clock.set(NEXT_HOUR + 2 * HOUR + 10)
    assert tick(queue, schedule) == ()

    assert queue.resume_schedule("report") is True
    assert queue.resume_schedule("report") is False

    (state,) = queue.list_schedules()
    assert (state.paused_at, state.next_slot_at) == (None, NEXT_HOUR + 3 * HOUR)
    assert tick(queue, schedule) == ()  # the slots of the pause are skipped
    clock.set(NEXT_HOUR + 3 * HOUR)
    assert len(tick(queue, schedule)) == 1


def test_a_pause_committed_after_a_tick_read_the_row_still_holds(queue, clock):
    """The slot claim's compare-and-set refuses a paused row (no last run after a pause)."""
    schedule = hourly()
    queue.register_schedules([schedule])
    clock.set(NEXT_HOUR)
    reader = getattr(queue, "reader", queue)
    with reader.read() as connection:
        (due,) = connection.execute(reader.sql.select_due_schedules).all()
    queue.pause_schedule("report")
    with reader._write() as connection:
        won = connection.execute(
            reader.sql.advance_schedule,
            {"p_name": "report", "p_seen_next_slot_at": due.next_slot_at,
             "p_first_slot": NEXT_HOUR, "p_last_slot": NEXT_HOUR,
             "p_next_slot_at": NEXT_HOUR + HOUR},
        ).rowcount  # fmt: skip
    assert won == 0


def test_run_now_enqueues_one_extra_job_and_leaves_the_slots_alone(queue, clock, engine):
    schedule = hourly()
    queue.register_schedules([schedule])
    queue.pause_schedule("report")  # runs now even while paused

    job = queue.run_schedule_now(schedule, actor="alice")

    row = queue.get_job(job.id)
    assert (row.type, row.queue, row.priority, row.run_at, row.status) == (
        "report", "reports", 3, clock.now(), "QUEUED",
    )  # fmt: skip
    assert event_names(engine, job.id) == ["ENQUEUED"]
    (event,) = row.events
    assert event.actor == "alice"
    assert json.loads(event.detail)["schedule"] == "report"
    assert json.loads(event.detail)["manual"] is True
    (state,) = queue.list_schedules()
    assert (state.last_slot_at, state.next_slot_at) == (None, NEXT_HOUR)
    queue.resume_schedule("report")
    clock.set(NEXT_HOUR)
    assert len(tick(queue, schedule)) == 1
    assert check(getattr(queue, "reader", queue)) == []


def test_controls_on_an_unknown_schedule_or_bad_input_are_refused(queue):
    with pytest.raises(SqlqError, match="no schedule named 'nope'"):
        queue.pause_schedule("nope")
    with pytest.raises(SqlqError, match="no schedule named 'nope'"):
        queue.resume_schedule("nope")
    with pytest.raises(InvalidInput, match="name"):
        queue.pause_schedule("")
    with pytest.raises(InvalidInput, match="must be a Schedule"):
        queue.run_schedule_now("report")
