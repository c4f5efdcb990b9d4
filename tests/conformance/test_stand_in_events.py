"""Attempt rows that stand for their CLAIMED, STARTED and SUCCEEDED events (sqlq_0013).

A claim that starts the job (every Worker run) writes no CLAIMED, STARTED or
SUCCEEDED event; the attempt row holds what they said and the timeline reads them
back (sqlq_orm.ops.stand_ins). A claim that does not start writes them all, as before.
These tests run the same story both ways and compare what ``sqlq show`` prints.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text

import sqlq_orm
from sqlq_orm import RetryPolicy
from sqlq_orm.ops.invariants import check
from sqlq_orm.ops.render.timeline import render_timeline_json, render_timeline_text
from sqlq_orm.ops.timeline import job_timeline
from tests.support.queue_helpers import written_event_names

T0 = 1_700_000_000


@pytest.fixture
def queue(engine, clock):
    return sqlq_orm.Queue(engine, clock=clock, retry_policy=RetryPolicy(base_seconds=5, jitter=0))


def _run(queue, clock, *, start_with_claim: bool) -> int:
    """enqueue; a run that fails and is retried; a heartbeat; a run that succeeds."""
    job = queue.enqueue("report", {"day": 3}, max_retries=2)

    def claim(worker: str):
        clock.advance(1)
        if start_with_claim:
            (lease,) = queue.claim(worker, start=True, lease_seconds=45)
        else:
            (lease,) = queue.claim(worker, lease_seconds=45)
            lease = queue.start(lease)
        return lease

    first = claim("worker-a")
    clock.advance(2)
    queue.fail(first, "UPSTREAM:DOWN", "503 from the API")
    clock.advance(5)
    second = claim("worker-b")
    clock.advance(1)
    queue.heartbeat(second)
    clock.advance(1)
    queue.succeed(second, result={"rows": 7})
    return job.id


def _shown(queue, job_id: int) -> str:
    timeline = job_timeline(queue, job_id)
    shown = render_timeline_text(timeline) + "\n" + render_timeline_json(timeline)
    # The job's own id and creation are the only differences the two runs may have.
    return re.sub(rf'(job |"id": |"job_id": ){job_id}\b', r"\1<id>", shown)


def test_sqlq_show_prints_the_same_whether_the_events_were_written_or_stood_for(
    engine, queue, clock
):
    clock.set(T0)
    stood_for = _run(queue, clock, start_with_claim=True)
    clock.set(T0)
    written = _run(queue, clock, start_with_claim=False)

    assert written_event_names(engine, written) == [
        "ENQUEUED", "CLAIMED", "STARTED", "RETRY_SCHEDULED", "CLAIMED", "STARTED", "SUCCEEDED",
    ]  # fmt: skip
    # Only what no attempt row holds is written for the worker-style run.
    assert written_event_names(engine, stood_for) == ["ENQUEUED", "RETRY_SCHEDULED"]
    assert _shown(queue, stood_for) == _shown(queue, written)
    events = job_timeline(queue, stood_for).events
    assert [(e.event, e.actor, e.detail) for e in events if e.event != "RETRY_SCHEDULED"] == [
        ("ENQUEUED", "system", events[0].detail),
        ("CLAIMED", "worker-a", {"attempt": 1, "lease_seconds": 45}),
        ("STARTED", "worker-a", {"attempt": 1}),
        ("CLAIMED", "worker-b", {"attempt": 2, "lease_seconds": 45}),
        ("STARTED", "worker-b", {"attempt": 2}),
        ("SUCCEEDED", "worker-b", {"attempt": 2}),
    ]
    assert [e.ts - T0 for e in events] == [0, 1, 1, 3, 9, 9, 11]
    assert check(queue) == []


@pytest.mark.parametrize("start_with_claim", [True, False], ids=["stood-for", "written"])
def test_events_stay_in_the_order_they_happened_when_the_clock_goes_back(
    engine, queue, clock, start_with_claim
):
    # Issue 34 item 5: the timeline (job_timeline, so `sqlq show` and the dashboard's
    # job page) lists events in the order they happened (event ids; a stood-for
    # SUCCEEDED last), not by time: a clock stepped back before the success must not
    # move the SUCCEEDED before its CLAIMED, written or stood for.
    clock.set(T0)
    job = queue.enqueue("t", max_retries=1)

    def claim():
        if start_with_claim:
            (lease,) = queue.claim("w", start=True)
            return lease
        (lease,) = queue.claim("w")
        return queue.start(lease)

    queue.fail(claim(), "UPSTREAM:DOWN")
    clock.advance(5)
    lease = claim()
    clock.set(T0 - 200)
    queue.succeed(lease)

    assert check(queue) == []
    timeline = job_timeline(queue, job.id)
    assert [(e.event, e.ts - T0) for e in timeline.events] == [
        ("ENQUEUED", 0),
        ("CLAIMED", 0),
        ("STARTED", 0),
        ("RETRY_SCHEDULED", 0),
        ("CLAIMED", 5),
        ("STARTED", 5),
        ("SUCCEEDED", -200),
    ]
    shown = render_timeline_text(timeline)
    assert shown.rindex("CLAIMED") < shown.rindex("SUCCEEDED")


def test_a_stand_in_row_that_loses_its_success_breaks_the_replay(engine, queue, clock):
    job = queue.enqueue("t")
    (lease,) = queue.claim("w", start=True)
    queue.succeed(lease)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE sqlq_job_attempts SET after_event_id = NULL WHERE job_id = :id"),
            {"id": job.id},
        )

    found = {(v.invariant, v.job_id) for v in check(queue)}
    assert ("events_follow_state_machine", job.id) in found


@pytest.mark.parametrize("start", [True, False], ids=["stood-for", "written"])
def test_claimed_records_the_lease_each_job_was_granted(engine, queue, clock, start):
    # Issue 34 item 5: CLAIMED's lease_seconds said the claim's default (30), not the
    # length a job type of its own lease was granted (600), written or stood for.
    own = queue.enqueue("long", {})
    plain = queue.enqueue("plain", {})

    leases = queue.claim(
        "w", limit=2, lease_seconds=30, start=start, lease_seconds_by_type={"long": 600}
    )
    if not start:
        leases = [queue.start(lease) for lease in leases]

    def claimed(job_id: int):
        (event,) = [e for e in job_timeline(queue, job_id).events if e.event == "CLAIMED"]
        return event.detail

    assert claimed(own.id) == {"attempt": 1, "lease_seconds": 600}
    assert claimed(plain.id) == {"attempt": 1, "lease_seconds": 30}
    for lease in leases:
        queue.succeed(lease)
    assert claimed(own.id) == {"attempt": 1, "lease_seconds": 600}
    assert check(queue) == []


def test_a_workers_claim_records_the_tasks_own_lease(engine, queue):
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(lease=4)
    def quick() -> None:
        return None

    job = quick.enqueue()
    sqlq_orm.Worker(
        queue, registry, burst=True, install_signal_handlers=False, sweep_interval=None,
        poll_interval=0.05, lease_seconds=10,
    ).run()  # fmt: skip

    events = job_timeline(queue, job.id).events
    assert [e.event for e in events] == ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]
    assert events[1].detail == {"attempt": 1, "lease_seconds": 4}
