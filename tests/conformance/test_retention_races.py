"""Prune against a manual retry, forced rather than hoped for (see test_races).

Prune deletes only jobs that are still finished when its delete reaches them: a retry
that commits while prune waits for the job's row lock wins, on every database.
"""

from __future__ import annotations

import pytest

import sqlq_orm
from sqlq_orm import JobStatus, RetentionPolicy
from sqlq_orm.ops.invariants import check
from tests.support.faultkit import UPDATE_JOBS_SET, Actor, PauseAfter, start_blocked

MANUAL_RETRY = UPDATE_JOBS_SET + r" status=\S+, run_at=.*retry_count="
DAY = 86_400


@pytest.fixture
def other(db_url, clock):
    """A second party: its own engine and queue on the same database and clock."""
    engine = sqlq_orm.create_engine(db_url)
    yield sqlq_orm.Queue(engine, clock=clock)
    engine.dispose()


def failed_long_ago(queue, clock) -> int:
    job = queue.enqueue("t", max_retries=0).id
    (lease,) = queue.claim("worker-a", start=True)
    queue.fail(lease, "UPSTREAM:DOWN")
    clock.advance(10 * DAY)
    return job


def test_prune_spares_a_job_whose_retry_commits_while_prune_waits(engine, queue, other, clock):
    job = failed_long_ago(queue, clock)
    policy = RetentionPolicy(failed_days=1)

    with PauseAfter(engine, MANUAL_RETRY) as paused:
        retrier = Actor(lambda: queue.retry(job), name="retrier")
        paused.wait()  # the retry holds the job's row: QUEUED, not yet committed
        pruner = start_blocked(lambda: other.prune(policy), other.engine, engine)
        paused.release()

    retrier.result()
    result = pruner.result()
    found = queue.get_job(job)
    assert found.status == JobStatus.QUEUED.value
    assert [e.event for e in found.events][-1] == "RETRIED"
    assert len(found.attempts) == 1
    assert result.jobs[JobStatus.FAILED.value] == 0
    assert check(queue) == []


def test_prune_after_the_retry_committed_leaves_the_job_and_deletes_the_rest(queue, clock):
    job = failed_long_ago(queue, clock)
    old = failed_long_ago(queue, clock)
    queue.retry(job)

    result = queue.prune(RetentionPolicy(failed_days=1))

    assert result.jobs[JobStatus.FAILED.value] == 1
    assert queue.get_job(job).status == JobStatus.QUEUED.value
    with pytest.raises(sqlq_orm.JobNotFound):
        queue.get_job(old)
