"""Races, forced rather than hoped for.

Each test pauses one party's transaction right after a chosen statement (its locks
held; :class:`tests.support.faultkit.PauseAfter`), starts the other party in a thread and
waits until it is blocked behind that lock or has finished (on PostgreSQL the server
is asked for lock waiters; on SQLite the second writer is inside ``BEGIN
IMMEDIATE``), then lets the first one commit. Both orders are tested where both
exist. Every party runs on its own engine, like separate processes would.

The lease boundary: a lease is live while ``now < lease_expires_at``; the sweep
reclaims it once ``lease_expires_at <= now``. Until the sweep has actually reclaimed
it, the holder's token is still the job's token and its writes land: the token, not
the time, decides who may write.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

import sqlq_orm
from sqlq_orm import InvalidTransition, JobStatus, LeaseLost
from sqlq_orm.ops.invariants import check
from tests.support.backends import engine_for
from tests.support.faultkit import UPDATE_JOBS_SET, Actor, PauseAfter, start_blocked

CLAIM = UPDATE_JOBS_SET + r" status=\S+, claimed_at="
HEARTBEAT = UPDATE_JOBS_SET + r" heartbeat_at="
SUCCEED = UPDATE_JOBS_SET + r" status=\S+, result_ref="
LOCK_FOR_CANCEL = r"SELECT sqlq_jobs.status, sqlq_jobs.attempt_count, sqlq_jobs.claimed_by FROM"
SWEEP_PICK = r"FROM sqlq_jobs WHERE sqlq_jobs.status IN \(.*\) AND sqlq_jobs.lease_expires_at <="


@pytest.fixture
def other(db_url, clock):
    """A second party: its own engine and queue on the same database and clock."""
    engine = engine_for(db_url)
    yield sqlq_orm.Queue(engine, clock=clock)
    engine.dispose()


def attempts_of(queue, job_id):
    return [(a.attempt, a.status, a.error_code) for a in queue.get_job(job_id).attempts]


def events_of(queue, job_id):
    return [e.event for e in sqlq_orm.job_timeline(queue, job_id).events]


def expired_running_lease(queue, clock):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    clock.set(lease.lease_expires_at)  # the first second the sweep may reclaim it
    return lease


# ------------------------------------------------------------- sweep vs succeed


def test_succeed_that_waited_behind_a_sweep_is_rejected(engine, queue, other, clock):
    lease = expired_running_lease(queue, clock)
    with PauseAfter(engine, SWEEP_PICK) as sweep_paused:
        sweeper = Actor(queue.sweep, name="sweeper")
        sweep_paused.wait()
        finisher = start_blocked(lambda: other.succeed(lease), other.engine, engine)
        sweep_paused.release()

    assert sweeper.result().expired == 1
    assert isinstance(finisher.error(), LeaseLost)
    job = queue.get_job(lease.job_id)
    assert (job.status, job.retry_count) == (JobStatus.QUEUED.value, 1)
    assert attempts_of(queue, lease.job_id) == [(1, "FAILED", "LEASE:EXPIRED")]
    assert check(queue) == []


def test_sweep_that_waited_behind_a_succeed_leaves_the_job_succeeded(engine, queue, other, clock):
    lease = expired_running_lease(queue, clock)
    with PauseAfter(engine, SUCCEED) as succeed_paused:
        finisher = Actor(lambda: queue.succeed(lease), name="finisher")
        succeed_paused.wait()
        sweeper = start_blocked(other.sweep, other.engine, engine)
        succeed_paused.release()

    finisher.result()
    assert sweeper.result().total == 0
    assert queue.get_job(lease.job_id).status == JobStatus.SUCCEEDED.value
    assert attempts_of(queue, lease.job_id) == [(1, "SUCCEEDED", None)]
    assert check(queue) == []


def test_stale_sweeper_does_not_overwrite_a_fresh_claim(queue, clock):
    # The sweeper read the row (token, RUNNING), then the job was reclaimed and claimed
    # afresh before the sweeper's update ran. Its guarded update must match nothing.
    first = expired_running_lease(queue, clock)
    with queue.read() as connection:
        (seen,) = connection.execute(queue.sql.expired_leases, {"p_limit": 10}).all()
    queue.sweep()
    clock.advance(3600)
    (fresh,) = queue.claim("worker-b", start=True)

    with queue.engine.begin() as connection:
        outcome = queue._end_attempt_with_failure(
            connection,
            job_id=seen.id,
            token=seen.lease_token,
            seen_status=JobStatus(seen.status),
            attempt=seen.attempt_count,
            worker_id=seen.claimed_by,
            retry_count=seen.retry_count,
            max_retries=seen.max_retries,
            code="LEASE:EXPIRED",
            detail="stale",
            actor="stale-sweeper",
        )

    assert outcome is None
    job = queue.get_job(first.job_id)
    assert (job.status, job.claimed_by, job.attempt_count) == ("RUNNING", "worker-b", 2)
    assert attempts_of(queue, first.job_id) == [
        (1, "FAILED", "LEASE:EXPIRED"),
        (2, "RUNNING", None),
    ]
    queue.succeed(fresh)
    assert check(queue) == []


def test_two_sweepers_at_once_recover_each_job_exactly_once(engine, queue, other, clock):
    for _ in range(12):
        queue.enqueue("t")
    queue.claim("worker-a", limit=5)
    queue.claim("worker-a", limit=7, start=True)
    clock.advance(3600)
    with PauseAfter(engine, SWEEP_PICK) as first_paused:
        first = Actor(lambda: queue.sweep(batch_size=4), name="sweeper-1")
        first_paused.wait()  # it holds its first batch
        second = start_blocked(lambda: other.sweep(batch_size=4), other.engine, engine)
        first_paused.release()

    recovered = first.result().expired + second.result().expired
    assert recovered == 12
    with queue.read() as connection:
        events = queue.tables.events.c
        per_job = connection.execute(
            select(events.job_id, func.count())
            .where(events.event == "RECOVERED")
            .group_by(events.job_id)
        ).all()
    assert sorted(n for _, n in per_job) == [1] * 12
    assert queue.counts_by_status()["QUEUED"] == 12
    assert check(queue) == []


# ------------------------------------------------------------ heartbeat vs sweep


def test_heartbeat_at_the_expiry_second_after_the_sweep_is_rejected(engine, queue, other, clock):
    lease = expired_running_lease(queue, clock)
    with PauseAfter(engine, SWEEP_PICK) as sweep_paused:
        sweeper = Actor(queue.sweep, name="sweeper")
        sweep_paused.wait()
        beater = start_blocked(lambda: other.heartbeat(lease), other.engine, engine)
        sweep_paused.release()

    assert sweeper.result().expired == 1
    assert isinstance(beater.error(), LeaseLost)
    assert queue.get_job(lease.job_id).status == JobStatus.QUEUED.value
    assert check(queue) == []


def test_heartbeat_at_the_expiry_second_before_the_sweep_keeps_the_lease(
    engine, queue, other, clock
):
    lease = expired_running_lease(queue, clock)
    with PauseAfter(engine, HEARTBEAT) as heartbeat_paused:
        beater = Actor(lambda: queue.heartbeat(lease), name="heartbeat")
        heartbeat_paused.wait()
        sweeper = start_blocked(other.sweep, other.engine, engine)
        heartbeat_paused.release()

    assert beater.result() == clock.now() + queue.default_lease_seconds + 1  # never early
    assert sweeper.result().total == 0
    job = queue.get_job(lease.job_id)
    assert (job.status, job.lease_expires_at) == ("RUNNING", clock.now() + 30 + 1)
    queue.succeed(lease)
    assert check(queue) == []


def test_expired_but_unswept_lease_may_still_finish(queue, clock):
    lease = expired_running_lease(queue, clock)
    clock.advance(600)

    queue.succeed(lease)

    assert queue.sweep().total == 0
    assert queue.get_job(lease.job_id).status == JobStatus.SUCCEEDED.value


# ---------------------------------------------------------------- claim vs cancel


def test_cancel_that_waited_behind_a_claim_cancels_the_claimed_job(engine, queue, other):
    job = queue.enqueue("t")
    with PauseAfter(engine, CLAIM) as claim_paused:
        claimer = Actor(lambda: queue.claim("worker-a"), name="claimer")
        claim_paused.wait()
        canceller = start_blocked(lambda: other.cancel(job.id), other.engine, engine)
        claim_paused.release()

    (lease,) = claimer.result()
    canceller.result()
    with pytest.raises(LeaseLost):
        queue.start(lease)
    assert queue.get_job(job.id).status == JobStatus.CANCELLED.value
    assert events_of(queue, job.id) == ["ENQUEUED", "CLAIMED", "CANCELLED"]
    assert check(queue) == []


def test_claim_that_waited_behind_a_cancel_gets_nothing(engine, queue, other):
    job = queue.enqueue("t")
    with PauseAfter(engine, LOCK_FOR_CANCEL) as cancel_paused:
        canceller = Actor(lambda: queue.cancel(job.id), name="canceller")
        cancel_paused.wait()
        claimer = start_blocked(lambda: other.claim("worker-a"), other.engine, engine)
        cancel_paused.release()

    canceller.result()
    assert claimer.result() == []
    assert queue.get_job(job.id).status == JobStatus.CANCELLED.value
    assert check(queue) == []


# --------------------------------------------------------------- cancel vs succeed


def test_succeed_that_waited_behind_a_cancel_is_rejected(engine, queue, other):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    with PauseAfter(engine, LOCK_FOR_CANCEL) as cancel_paused:
        canceller = Actor(lambda: queue.cancel(lease.job_id), name="canceller")
        cancel_paused.wait()
        finisher = start_blocked(lambda: other.succeed(lease), other.engine, engine)
        cancel_paused.release()

    canceller.result()
    assert isinstance(finisher.error(), LeaseLost)
    assert attempts_of(queue, lease.job_id) == [(1, "CANCELLED", None)]
    assert check(queue) == []


def test_cancel_that_waited_behind_a_succeed_is_refused(engine, queue, other):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    with PauseAfter(engine, SUCCEED) as succeed_paused:
        finisher = Actor(lambda: queue.succeed(lease), name="finisher")
        succeed_paused.wait()
        canceller = start_blocked(lambda: other.cancel(lease.job_id), other.engine, engine)
        succeed_paused.release()

    finisher.result()
    assert isinstance(canceller.error(), InvalidTransition)
    assert queue.get_job(lease.job_id).status == JobStatus.SUCCEEDED.value
    assert check(queue) == []


# ----------------------------------------------------------------- claim vs claim


@pytest.mark.parametrize("statistics", ["none yet", "analyzed"])
def test_claim_that_waited_behind_another_claim_takes_other_jobs(engine, queue, other, statistics):
    ids = [queue.enqueue("t").id for _ in range(6)]
    if statistics == "analyzed":
        # With statistics of the table as it is (taken by ANALYZE, or by InnoDB itself
        # once enough rows have changed), MariaDB planned the claim through another
        # index and a sort: it locked every ready job, and the second claim got none.
        with engine.begin() as connection:
            mysql = engine.dialect.name in ("mysql", "mariadb")
            connection.exec_driver_sql("ANALYZE TABLE sqlq_jobs" if mysql else "ANALYZE sqlq_jobs")
    with PauseAfter(engine, CLAIM) as claim_paused:
        first = Actor(lambda: queue.claim("worker-a", limit=3), name="claimer-1")
        claim_paused.wait()
        second = start_blocked(lambda: other.claim("worker-b", limit=3), other.engine, engine)
        claim_paused.release()

    taken_first = {lease.job_id for lease in first.result()}
    taken_second = {lease.job_id for lease in second.result()}
    assert taken_first.isdisjoint(taken_second)
    assert taken_first | taken_second == set(ids)
    assert check(queue) == []


def test_many_claimers_released_together_never_share_a_job(db_url, queue, clock):
    ids = {queue.enqueue("t").id for _ in range(60)}
    queues = [sqlq_orm.Queue(engine_for(db_url), clock=clock) for _ in range(4)]
    start_line = threading.Barrier(len(queues))

    def drain(worker_queue, name):
        start_line.wait()
        taken = []
        while batch := worker_queue.claim(name, limit=4, start=True):
            taken.extend(lease.job_id for lease in batch)
        return taken

    claimers = [Actor(lambda q=q, n=f"w{i}": drain(q, n)) for i, q in enumerate(queues)]
    taken = [job_id for claimer in claimers for job_id in claimer.result()]
    for worker_queue in queues:
        worker_queue.engine.dispose()

    assert sorted(taken) == sorted(ids)
    assert check(queue) == []
