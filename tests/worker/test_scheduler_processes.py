"""Several scheduler processes hammer the same slots, each on its own skewed clock:
every slot is still enqueued exactly once (checked by the invariant checker too)."""

from __future__ import annotations

import multiprocessing
from collections import defaultdict

import pytest

import sqlq_orm
from sqlq_orm import PinnedClock, Queue, Schedule, Scheduler
from sqlq_orm.ops.invariants import check, scheduled_slot
from tests.conftest import PINNED_START

pytestmark = pytest.mark.slow

SKEWS = (-40, -10, 0, 15, 40)
"""Each process's clock error in seconds: they disagree about which slot is due."""
STEPS = 40
STEP_SECONDS = 97
"""Longer than the skews' spread, so at most steps several processes find the same
slot due at once and race for it (with shorter steps the clock furthest ahead would
always take each slot alone); missed="all" keeps every slot, so none may be absent."""


def declared() -> list[Schedule]:
    return [
        Schedule.declare("* * * * *", "every_minute", missed="all"),
        Schedule.declare("*/5 * * * *", "every_five", queue="reports", missed="all"),
        Schedule.declare("*/2 * * * *", "paris", timezone="Europe/Paris", missed="all"),
    ]


def run_scheduler(db_url: str, skew: int, barrier, results) -> None:
    """One scheduler process: at each simulated step, wait for the others, then tick."""
    engine = sqlq_orm.create_engine(db_url)
    clock = PinnedClock(PINNED_START + skew)
    scheduler = Scheduler(Queue(engine, clock=clock), declared())
    enqueued = 0
    for step in range(STEPS):
        clock.set(PINNED_START + skew + step * STEP_SECONDS)
        barrier.wait(timeout=60)  # all processes contend for the same moment
        enqueued += len(scheduler.tick().job_ids)
    engine.dispose()
    results.put((skew, enqueued))


def test_every_slot_is_enqueued_once_by_processes_on_skewed_clocks(engine, db_url):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(SKEWS))
    results = context.Queue()
    workers = [
        context.Process(target=run_scheduler, args=(db_url, skew, barrier, results))
        for skew in SKEWS
    ]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=300)
    assert [p.exitcode for p in workers] == [0] * len(SKEWS)
    per_process = dict(results.get(timeout=5) for _ in SKEWS)

    queue = Queue(engine)
    slots: dict[str, list[int]] = defaultdict(list)
    with queue.session() as session:
        for job in session.query(sqlq_orm.Job).order_by(sqlq_orm.Job.id):
            name, slot = scheduled_slot(job.events[0].detail)
            slots[name].append(slot)
    assert sum(per_process.values()) == sum(len(found) for found in slots.values())
    for name, step in (("every_minute", 60), ("every_five", 300), ("paris", 120)):
        found = sorted(slots[name])
        assert len(found) == len(set(found)), f"{name}: a slot was enqueued twice"
        assert found == list(range(found[0], found[-1] + step, step)), f"{name}: slot missing"
    # Which slots must be there: the schedule starts at the first minute after the
    # clock of whichever process registered it (at most the fastest clock), and at
    # each step the tick that wins the compare-and-set enqueues every slot due on its
    # own clock, at least the slowest one's. The fastest clocks may lose the last
    # step's race and leave their later slots to a next tick, which never comes here.
    minute = sorted(slots["every_minute"])
    fastest_start = PINNED_START + max(SKEWS)
    slowest_end = PINNED_START + min(SKEWS) + (STEPS - 1) * STEP_SECONDS
    assert minute[0] <= fastest_start - fastest_start % 60 + 60
    assert minute[-1] >= slowest_end - slowest_end % 60
    assert check(queue) == []
