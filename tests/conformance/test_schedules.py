"""Recurring schedules on every database: each slot enqueued once, by any number of
schedulers on any clocks; registration keeps progress; the missed-slot policies."""

from __future__ import annotations

import json

import pytest

import sqlq_orm
from sqlq_orm import PinnedClock, Queue, Schedule, Scheduler
from sqlq_orm.ops.invariants import check, scheduled_slot
from tests.conftest import PINNED_START
from tests.support.faultkit import Actor, PauseAfter

MINUTE = 60
HOUR = 3600
# PINNED_START is 22:13:20 UTC; the next whole hour is 23:00.
NEXT_HOUR = (PINNED_START // HOUR + 1) * HOUR


def hourly(**kwargs) -> Schedule:
    return Schedule.declare("0 * * * *", "report", payload={"kind": "hourly"}, **kwargs)


def slots_enqueued(queue: Queue) -> list[tuple[str, int]]:
    """(schedule, slot) of every scheduled job, from the jobs' ENQUEUED events."""
    found = []
    with queue.session() as session:
        for job in session.query(queue.models.job).order_by(queue.models.job.id):
            slot = scheduled_slot(job.events[0].detail)
            if slot is not None:
                found.append(slot)
    return found


def test_a_new_schedule_waits_for_its_next_slot_then_enqueues_it_once(queue, clock):
    scheduler = Scheduler(queue, [hourly()])

    assert scheduler.tick().job_ids == ()  # registered now: the past slot is not due
    clock.set(NEXT_HOUR - 1)
    assert scheduler.tick().job_ids == ()
    clock.set(NEXT_HOUR)
    (job_id,) = scheduler.tick().job_ids
    assert scheduler.tick().job_ids == ()

    job = queue.get_job(job_id)
    assert (job.type, job.queue, job.run_at, job.status) == (
        "report",
        "default",
        NEXT_HOUR,
        "QUEUED",
    )
    assert json.loads(job.payload) == {"kind": "hourly"}
    enqueued = job.events[0]
    assert (enqueued.event, enqueued.actor) == ("ENQUEUED", "scheduler")
    assert json.loads(enqueued.detail) == {
        "queue": "default", "type": "report", "schedule": "report", "slot": NEXT_HOUR,
    }  # fmt: skip
    [state] = queue.list_schedules()
    assert (state.name, state.cron, state.timezone) == ("report", "0 * * * *", "UTC")
    assert (state.last_slot_at, state.next_slot_at) == (NEXT_HOUR, NEXT_HOUR + HOUR)


def test_every_slot_is_enqueued_once_by_schedulers_whose_clocks_disagree(engine):
    ahead, behind, exact = (
        PinnedClock(PINNED_START + 40),
        PinnedClock(PINNED_START - 50),
        PinnedClock(PINNED_START),
    )
    schedulers = [
        Scheduler(Queue(engine, clock=c), [Schedule.declare("* * * * *", "tick")])
        for c in (ahead, behind, exact)
    ]
    enqueued = []
    for step in range(180):  # 3 hours of 20-second ticks, every clock moving on
        for c in (ahead, behind, exact):
            c.advance(20)
        for scheduler in schedulers[step % 3 :] + schedulers[: step % 3]:
            enqueued.extend(scheduler.tick().job_ids)

    queue = Queue(engine)
    slots = slots_enqueued(queue)
    assert len(slots) == len(set(slots)) == len(enqueued)
    minutes = sorted(slot for _, slot in slots)
    assert minutes == list(range(minutes[0], minutes[-1] + MINUTE, MINUTE))  # none missed
    assert check(queue) == []


def test_a_restart_after_downtime_enqueues_the_most_recent_missed_slot_once(engine, clock):
    Scheduler(Queue(engine, clock=clock), [hourly()]).tick()
    clock.set(NEXT_HOUR + 5 * HOUR + 10 * MINUTE)  # five slots passed with nothing running

    restarted = Scheduler(Queue(engine, clock=clock), [hourly()])
    (job_id,) = restarted.tick().job_ids

    assert Queue(engine).get_job(job_id).run_at == NEXT_HOUR + 5 * HOUR
    assert restarted.tick().job_ids == ()


def test_missed_all_catches_up_on_the_newest_slots_up_to_its_limit(queue, clock):
    scheduler = Scheduler(queue, [hourly(missed="all", catch_up_limit=3)])
    scheduler.tick()
    clock.set(NEXT_HOUR + 5 * HOUR + 10 * MINUTE)

    result = scheduler.tick()

    assert [queue.get_job(i).run_at for i in result.job_ids] == [
        NEXT_HOUR + 3 * HOUR, NEXT_HOUR + 4 * HOUR, NEXT_HOUR + 5 * HOUR,
    ]  # fmt: skip
    assert result.skipped == 1


def test_missed_skip_enqueues_nothing_late_but_the_next_slot_on_time(queue, clock):
    scheduler = Scheduler(queue, [hourly(missed="skip", grace_seconds=60)])
    scheduler.tick()
    clock.set(NEXT_HOUR + 2 * HOUR + 10 * MINUTE)

    assert scheduler.tick().job_ids == ()
    clock.set(NEXT_HOUR + 3 * HOUR + 30)
    assert [queue.get_job(i).run_at for i in scheduler.tick().job_ids] == [NEXT_HOUR + 3 * HOUR]


def test_changing_the_cron_in_code_moves_the_next_slot_and_keeps_the_last(engine, clock):
    Scheduler(Queue(engine, clock=clock), [hourly()]).tick()
    clock.set(NEXT_HOUR)
    Scheduler(Queue(engine, clock=clock), [hourly()]).tick()

    nightly = Schedule.declare("0 3 * * *", "report", timezone="Europe/Paris")
    Scheduler(Queue(engine, clock=clock), [nightly]).register()

    [state] = Queue(engine).list_schedules()
    assert (state.cron, state.timezone, state.last_slot_at) == (
        "0 3 * * *", "Europe/Paris", NEXT_HOUR,
    )  # fmt: skip
    assert state.next_slot_at == nightly.cron.next_after(NEXT_HOUR)


def test_re_registering_an_unchanged_schedule_keeps_its_next_slot(engine, clock):
    Scheduler(Queue(engine, clock=clock), [hourly()]).register()
    clock.advance(3 * HOUR)

    Scheduler(Queue(engine, clock=clock), [hourly()]).register()

    [state] = Queue(engine).list_schedules()
    assert state.next_slot_at == NEXT_HOUR  # still due: the restart did not erase it


def test_a_scheduler_leaves_schedules_it_does_not_declare_alone(engine, clock):
    Scheduler(Queue(engine, clock=clock), [hourly(name="a"), hourly(name="b")]).register()
    clock.set(NEXT_HOUR)

    only_a = Scheduler(Queue(engine, clock=clock), [hourly(name="a")]).tick()

    assert (only_a.due, only_a.claimed, len(only_a.job_ids)) == (1, 1, 1)
    states = {s.name: s for s in Queue(engine).list_schedules()}
    assert (states["a"].last_slot_at, states["b"].last_slot_at) == (NEXT_HOUR, None)


def test_remove_schedule_deletes_its_row_and_keeps_its_jobs(queue, clock):
    scheduler = Scheduler(queue, [hourly()])
    scheduler.tick()
    clock.set(NEXT_HOUR)
    (job_id,) = scheduler.tick().job_ids

    assert queue.remove_schedule("report") is True
    assert queue.remove_schedule("report") is False
    assert queue.list_schedules() == []
    assert queue.get_job(job_id).status == "QUEUED"


def test_two_schedules_with_one_name_are_refused():
    with pytest.raises(sqlq_orm.InvalidInput, match="two schedules are named 'report'"):
        Scheduler(None, [hourly(), hourly()])  # type: ignore[arg-type]


def test_a_queue_whose_models_have_no_schedule_model_says_how_to_add_one(engine, clock):
    models = sqlq_orm.Models(
        job=sqlq_orm.Job,
        attempt=sqlq_orm.JobAttempt,
        event=sqlq_orm.JobEvent,
        worker=sqlq_orm.WorkerRecord,
    )
    queue = Queue(engine, clock=clock, models=models)

    with pytest.raises(sqlq_orm.SqlqError, match="ScheduleMixin .*Models\\(schedule=...\\)"):
        Scheduler(queue, [hourly()]).tick()


def test_a_scheduler_that_read_a_due_slot_another_then_enqueued_enqueues_nothing(engine, db_url):
    # A reads the due row, pauses; B (its clock a minute ahead) enqueues the slot; A
    # resumes with what it read. Only the compare-and-set stops A enqueueing it again.
    Scheduler(Queue(engine, clock=PinnedClock(PINNED_START)), [hourly()]).register()
    engine_a = sqlq_orm.create_engine(db_url)
    scheduler_a = Scheduler(Queue(engine_a, clock=PinnedClock(NEXT_HOUR + 10)), [hourly()])
    scheduler_b = Scheduler(Queue(engine, clock=PinnedClock(NEXT_HOUR + 70)), [hourly()])
    scheduler_a.register()
    try:
        with PauseAfter(engine_a, r"WHERE sqlq_schedules\.next_slot_at <=") as paused:
            a = Actor(scheduler_a.tick, name="scheduler-a")
            paused.wait()
            won_by_b = scheduler_b.tick()
            paused.release()
            lost_by_a = a.result()
    finally:
        engine_a.dispose()

    assert len(won_by_b.job_ids) == 1
    assert (lost_by_a.due, lost_by_a.claimed, lost_by_a.job_ids) == (1, 0, ())
    assert slots_enqueued(Queue(engine)) == [("report", NEXT_HOUR)]


def test_a_payload_over_the_queues_cap_is_refused_at_registration(engine, clock):
    small = Queue(engine, clock=clock, payload_max_bytes=20)
    big = Schedule.declare("0 * * * *", "report", payload={"text": "x" * 50})

    with pytest.raises(sqlq_orm.InvalidInput, match="schedule 'report': payload"):
        Scheduler(small, [big]).register()

    assert small.list_schedules() == []


def test_a_removed_schedule_comes_back_at_the_next_registration(queue, clock):
    scheduler = Scheduler(queue, [hourly()], register_interval=0)
    scheduler.tick()
    queue.remove_schedule("report")

    assert scheduler.tick().job_ids == ()
    assert [s.name for s in queue.list_schedules()] == ["report"]  # registered again
    clock.set(NEXT_HOUR)
    (job_id,) = scheduler.tick().job_ids

    assert queue.get_job(job_id).run_at == NEXT_HOUR


def test_during_a_rolling_deploy_only_the_stored_definition_fires(engine, clock):
    """Issue 23, item 12: an old process still running the hourly cron and a new one
    declaring half past, side by side (the old one ticks first, re-registers at every
    tick); each slot of the stored (newest) definition fires once, the old cron never."""
    old = Scheduler(Queue(engine, clock=clock), [hourly()], register_interval=0)
    old.tick()
    clock.set(NEXT_HOUR - 10 * MINUTE)
    half_past = Schedule.declare("30 * * * *", "report", payload={"kind": "hourly"})
    new = Scheduler(Queue(engine, clock=clock), [half_past], register_interval=0)
    new.tick()  # the new code starts: its definition is stored

    for moment in range(NEXT_HOUR, NEXT_HOUR + 3 * HOUR, 30 * MINUTE):
        clock.set(moment)
        old.tick()
        new.tick()

    half_pasts = [NEXT_HOUR + 30 * MINUTE + n * HOUR for n in range(3)]
    assert [slot for _, slot in slots_enqueued(Queue(engine))] == half_pasts
    [state] = Queue(engine).list_schedules()
    assert state.cron == "30 * * * *"
    assert check(Queue(engine)) == []
