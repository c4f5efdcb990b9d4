"""Dependencies under concurrency: no child is left waiting for a parent that ended.

Forced races first (one party paused after a chosen statement with its locks held,
the other started against it; see :mod:`tests.conformance.test_races`), then many
parents ending at once in real threads, each on its own engine. On SQLite the single
writer serialises them; on PostgreSQL and MariaDB the child's row lock does.
"""

from __future__ import annotations

import threading

import pytest

import sqlq_orm
from sqlq_orm import JobStatus
from sqlq_orm.ops.invariants import check
from tests.support.backends import engine_for
from tests.support.faultkit import UPDATE_JOBS_SET, Actor, PauseAfter, start_blocked

LOCK_CHILDREN = r"FROM sqlq_jobs WHERE sqlq_jobs.id IN \(.*\) AND sqlq_jobs.status = .*FOR UPDATE"
FLAG_PARENTS = UPDATE_JOBS_SET + r" has_dependents="
SUCCEED = UPDATE_JOBS_SET + r" status=\S+, result_ref="
SQLITE_LOCK_CHILDREN = r"FROM sqlq_jobs WHERE sqlq_jobs.id IN \(.*\) AND sqlq_jobs.status ="


@pytest.fixture
def other(db_url, clock):
    """A second party: its own engine and queue on the same database and clock."""
    engine = engine_for(db_url)
    yield sqlq_orm.Queue(engine, clock=clock)
    engine.dispose()


def children_lock(engine) -> str:
    # SQLite has no FOR UPDATE: its BEGIN IMMEDIATE already holds the only write lock.
    return SQLITE_LOCK_CHILDREN if engine.dialect.name == "sqlite" else LOCK_CHILDREN


def test_two_parents_ending_at_once_queue_their_child(engine, queue, other):
    first, second = queue.enqueue("a").id, queue.enqueue("b").id
    child = queue.enqueue("c", depends_on=[first, second]).id
    one, two = queue.claim("worker-a", limit=2, start=True)

    with PauseAfter(engine, children_lock(engine)) as paused:
        finisher = Actor(lambda: queue.succeed(one), name="first-parent")
        paused.wait()  # it holds the child's row lock, its decrement not yet made
        second_finisher = start_blocked(lambda: other.succeed(two), other.engine, engine)
        paused.release()

    finisher.result()
    second_finisher.result()
    job = queue.get_job(child)
    assert (job.status, job.pending_parents) == (JobStatus.QUEUED.value, 0)
    assert [e.event for e in job.events] == ["ENQUEUED", "DEPENDENCIES_MET"]
    assert check(queue) == []


def test_a_parent_succeeding_while_its_child_is_enqueued_is_seen(engine, queue, other):
    parent = queue.enqueue("a").id
    (lease,) = queue.claim("worker-a", start=True)

    with PauseAfter(engine, FLAG_PARENTS) as paused:
        enqueuer = Actor(lambda: queue.enqueue("c", depends_on=[parent]).id, name="enqueuer")
        paused.wait()  # the child's transaction holds the parent's row, RUNNING
        finisher = start_blocked(lambda: other.succeed(lease), other.engine, engine)
        paused.release()

    child = enqueuer.result()
    finisher.result()
    assert queue.get_job(child).status == JobStatus.QUEUED.value
    assert check(queue) == []


def test_a_child_enqueued_while_its_parent_succeeds_sees_the_success(engine, queue, other):
    parent = queue.enqueue("a").id
    (lease,) = queue.claim("worker-a", start=True)

    with PauseAfter(engine, SUCCEED) as paused:
        finisher = Actor(lambda: queue.succeed(lease), name="finisher")
        paused.wait()  # the parent's row is locked, SUCCEEDED not yet committed
        enqueuer = start_blocked(
            lambda: other.enqueue("c", depends_on=[parent]).id, other.engine, engine
        )
        paused.release()

    finisher.result()
    child = enqueuer.result()
    assert queue.get_job(child).status == JobStatus.QUEUED.value
    assert check(queue) == []


PARENTS = 8
ROUNDS = 5


def test_many_parents_ending_in_threads_never_strand_a_child(db_url, queue, clock):
    """A fan-in per round; every parent finished by its own thread at the same moment."""
    engines = [engine_for(db_url) for _ in range(PARENTS)]
    queues = [sqlq_orm.Queue(e, clock=clock) for e in engines]
    children = []
    try:
        for _ in range(ROUNDS):
            *_, child = queue.enqueue_fan_in([{"type": "p"}] * PARENTS, {"type": "c"})
            children.append(child)
            leases = queue.claim("worker-a", limit=PARENTS, start=True)
            assert len(leases) == PARENTS
            barrier = threading.Barrier(PARENTS)

            def finish(q, lease, barrier=barrier):
                barrier.wait()
                q.succeed(lease)

            actors = [
                Actor(lambda q=q, lease=lease: finish(q, lease), name=f"parent-{i}")
                for i, (q, lease) in enumerate(zip(queues, leases, strict=True))
            ]
            for actor in actors:
                actor.result()
            (lease,) = queue.claim("worker-a", start=True)
            assert lease.job_id == child
            queue.succeed(lease)
    finally:
        for e in engines:
            e.dispose()
    assert {queue.get_job(c).status for c in children} == {JobStatus.SUCCEEDED.value}
    assert check(queue) == []
