"""Time: leases are measured by the database's clock, never the worker's wall clock;
a pinned clock that jumps forward recovers every expired lease in one sweep, and one
that jumps backward recovers nothing early.

The boundary, everywhere: a lease is live while ``now < lease_expires_at``; the sweep
reclaims it once ``lease_expires_at <= now``. Max runtime likewise: a run may go on
while ``now < deadline_at`` and is ended once ``deadline_at <= now``.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

import sqlq_orm
from sqlq_orm import JobStatus, MaxRuntimeExceeded, RetryPolicy
from sqlq_orm.db.clock import epoch_now
from sqlq_orm.ops.invariants import check

LEASE = 30


@pytest.fixture
def queue(engine, clock):
    return sqlq_orm.Queue(
        engine, clock=clock, default_lease_seconds=LEASE, retry_policy=RetryPolicy(jitter=0)
    )


def database_now(engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(epoch_now())).scalar_one())


# ------------------------------------------------------- a worker's wrong wall clock


@pytest.mark.parametrize("skew", [3600, -3600], ids=["an_hour_ahead", "an_hour_behind"])
def test_lease_is_measured_by_the_database_clock_not_the_local_one(engine, monkeypatch, skew):
    queue = sqlq_orm.Queue(engine, default_lease_seconds=LEASE)  # DatabaseClock
    queue.enqueue("t")
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)
    before = database_now(engine)

    (lease,) = queue.claim("worker-with-a-wrong-clock", start=True)
    renewed = queue.heartbeat(lease)
    swept = queue.sweep()

    after = database_now(engine)
    # + 1: "now" is the current second truncated; a lease never ends early.
    assert before + LEASE + 1 <= lease.lease_expires_at <= after + LEASE + 1
    assert before + LEASE + 1 <= renewed <= after + LEASE + 1
    assert swept.total == 0
    assert check(queue) == []


def test_job_enqueued_now_by_a_process_an_hour_behind_is_ready_at_once(engine, monkeypatch):
    queue = sqlq_orm.Queue(engine)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600)
    job = queue.enqueue("t")

    (lease,) = queue.claim("worker-a")

    assert lease.job_id == job.id


# ------------------------------------------------------------------ the boundary


def test_sweep_leaves_a_lease_alone_until_its_expiry_second(queue, clock):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    clock.set(lease.lease_expires_at - 1)

    swept = queue.sweep()

    assert swept.total == 0
    assert queue.get_job(lease.job_id).status == JobStatus.RUNNING.value


def test_sweep_reclaims_a_lease_at_its_expiry_second(queue, clock):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    clock.set(lease.lease_expires_at)

    swept = queue.sweep()

    assert (swept.expired, swept.requeued) == (1, 1)
    assert queue.get_job(lease.job_id).status == JobStatus.QUEUED.value


def test_heartbeat_one_second_before_its_deadline_renews(queue, clock):
    queue.enqueue("t", max_runtime_seconds=60)
    (lease,) = queue.claim("worker-a", start=True)
    clock.set(lease.deadline_at - 1)

    renewed = queue.heartbeat(lease)

    assert renewed == clock.now() + LEASE + 1  # never early: one second more


def test_heartbeat_at_its_deadline_is_refused_and_the_sweep_times_it_out(queue, clock):
    queue.enqueue("t", max_runtime_seconds=60)
    (lease,) = queue.claim("worker-a", start=True)
    for _ in range(3):  # keep the lease live past the deadline
        clock.advance(15)
        queue.heartbeat(lease)
    clock.set(lease.deadline_at)

    with pytest.raises(MaxRuntimeExceeded):
        queue.heartbeat(lease)
    swept = queue.sweep()

    assert (swept.expired, swept.timed_out) == (0, 1)
    assert queue.get_job(lease.job_id).error_code == "TIMEOUT:MAX_RUNTIME"


# ------------------------------------------------------------------- clock jumps


def test_clock_jumping_forward_recovers_every_expired_lease_in_one_sweep(queue, clock):
    for _ in range(11):
        queue.enqueue("t", max_runtime_seconds=600)
    claimed = queue.claim("worker-a", limit=4)
    running = queue.claim("worker-b", limit=7, start=True)
    clock.advance(86_400)

    swept = queue.sweep(batch_size=3)

    assert (swept.expired, swept.timed_out) == (11, 0)
    assert queue.counts_by_status()["QUEUED"] == 11
    assert queue.sweep().total == 0
    # A claim that never started costs no retry; a started run does.
    assert {queue.get_job(lease.job_id).retry_count for lease in claimed} == {0}
    assert {queue.get_job(lease.job_id).retry_count for lease in running} == {1}
    assert check(queue) == []


def test_timed_out_runs_are_not_crowded_out_of_a_sweep_by_expired_ones(queue, clock):
    # Regression: the past-deadline pick also matched expired rows, filled the batch's
    # remaining room with them, and the sweep stopped before the live-lease overrunner.
    queue.enqueue("t", max_runtime_seconds=20)
    queue.enqueue("t", max_runtime_seconds=20)
    gone, overrunning = queue.claim("worker-a", limit=2, start=True)
    clock.advance(10)
    queue.heartbeat(overrunning)  # its lease lives on past the other's expiry
    clock.advance(LEASE - 1)

    swept = queue.sweep(batch_size=2)

    assert (swept.expired, swept.timed_out) == (1, 1)
    assert queue.get_job(gone.job_id).error_code == "LEASE:EXPIRED"
    assert queue.get_job(overrunning.job_id).error_code == "TIMEOUT:MAX_RUNTIME"


def test_clock_jumping_backward_recovers_nothing_early(queue, clock):
    for _ in range(5):
        queue.enqueue("t")
    leases = queue.claim("worker-a", limit=5, start=True)
    expires_at = leases[0].lease_expires_at
    clock.advance(-3600)

    swept_after_jump = queue.sweep()
    clock.set(expires_at - 1)
    swept_just_before = queue.sweep()
    clock.set(expires_at)
    swept_at_expiry = queue.sweep()

    assert swept_after_jump.total == 0
    assert swept_just_before.total == 0
    assert swept_at_expiry.expired == 5


def test_lease_renewed_after_a_backward_jump_runs_lease_seconds_from_the_new_now(queue, clock):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    jumped_to = clock.advance(-3600)

    renewed = queue.heartbeat(lease)
    clock.set(renewed - 1)
    swept = queue.sweep()

    assert renewed == jumped_to + LEASE + 1
    assert swept.total == 0


@pytest.mark.parametrize("skew", [3600, -3600], ids=["an_hour_ahead", "an_hour_behind"])
def test_worker_with_a_wrong_wall_clock_runs_jobs_past_a_lease_without_losing_them(
    engine, monkeypatch, skew
):
    queue = sqlq_orm.Queue(engine)  # DatabaseClock
    ids = [queue.enqueue("quick").id for _ in range(3)] + [queue.enqueue("outlives_a_lease").id]
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)
    worker = sqlq_orm.Worker(
        queue,
        {"quick": lambda ctx: None, "outlives_a_lease": lambda ctx: ctx.sleep(3.5)},
        concurrency=4, lease_seconds=2, heartbeat_interval=0.3, poll_interval=0.05,
        sweep_interval=0.2, burst=True, install_signal_handlers=False,
    )  # fmt: skip

    run = threading.Thread(target=worker.run, daemon=True)
    run.start()
    run.join(60)

    assert not run.is_alive()
    jobs = [queue.get_job(job_id) for job_id in ids]
    assert [job.status for job in jobs] == ["SUCCEEDED"] * 4
    assert [len(job.attempts) for job in jobs] == [1] * 4
    assert not any(e.event == "RECOVERED" for job in jobs for e in job.events)
