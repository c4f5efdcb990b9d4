"""Dependencies after a person steps in: retries of parents and children, on every database.

Each edge settles at most once: a parent that failed, was retried by hand and then
succeeded releases its children only when their other parents have settled too. A
retried job with unfinished parents waits for them (WAITING, with what it waits on
recomputed), and ``retry(..., with_dependents=True)`` brings back the jobs cancelled
because of it. The checker catches a child that started before its parents settled.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from sqlq_orm import InvalidTransition, JobStatus
from sqlq_orm.ops.invariants import check
from tests.support.faultkit import unchecked

WAITING, QUEUED = JobStatus.WAITING.value, JobStatus.QUEUED.value
CANCELLED, FAILED = JobStatus.CANCELLED.value, JobStatus.FAILED.value


def state(queue, job_id):
    job = queue.get_job(job_id)
    return job.status, job.pending_parents


def run_only(queue, job_id, worker="worker-a"):
    """Claim and start exactly ``job_id``: it must be the only ready job."""
    (lease,) = queue.claim(worker, limit=10, start=True)
    assert lease.job_id == job_id
    return lease


def fail_for_good(queue, job_id):
    queue.fail(run_only(queue, job_id), "UPSTREAM:DOWN", retryable=False)


# ------------------------------------------------------------ each edge settles once


def test_a_run_child_waits_for_its_other_parent_after_one_failed_was_retried_and_succeeded(
    queue,
):
    flaky = queue.enqueue("flaky", max_retries=0).id
    slow = queue.enqueue("slow", delay=3600).id
    child = queue.enqueue("child", depends_on=[flaky, slow], on_parent_failure="run").id
    fail_for_good(queue, flaky)
    assert state(queue, child) == (WAITING, 1)

    queue.retry(flaky)
    queue.succeed(run_only(queue, flaky))

    assert state(queue, child) == (WAITING, 1)  # still waits for `slow`
    assert queue.claim("worker-b", limit=10) == []
    assert check(queue) == []


def test_a_run_child_enqueued_after_its_parent_failed_is_not_counted_down_again(queue):
    flaky = queue.enqueue("flaky", max_retries=0).id
    slow = queue.enqueue("slow", delay=3600).id
    fail_for_good(queue, flaky)
    child = queue.enqueue("child", depends_on=[flaky, slow], on_parent_failure="run").id
    assert state(queue, child) == (WAITING, 1)

    queue.retry(flaky)
    queue.succeed(run_only(queue, flaky))

    assert state(queue, child) == (WAITING, 1)
    assert check(queue) == []


def test_a_retried_parent_is_waited_for_again_by_a_run_child(queue):
    flaky = queue.enqueue("flaky", max_retries=0).id
    slow = queue.enqueue("slow", delay=3600).id
    child = queue.enqueue("child", depends_on=[flaky, slow], on_parent_failure="run").id
    fail_for_good(queue, flaky)

    queue.retry(flaky)

    assert state(queue, child) == (WAITING, 2)
    queue.cancel(slow)
    assert state(queue, child) == (WAITING, 1)
    queue.succeed(run_only(queue, flaky))
    assert state(queue, child) == (QUEUED, 0)
    assert check(queue) == []


# ------------------------------------------------------------ a retried child waits


def test_a_retried_child_waits_for_its_retried_parent(queue):
    parent = queue.enqueue("parent", max_retries=0).id
    child = queue.enqueue("child", depends_on=[parent]).id
    fail_for_good(queue, parent)
    assert queue.get_job(child).status == CANCELLED

    queue.retry(parent)
    queue.retry(child)

    assert state(queue, child) == (WAITING, 1)
    assert [e.event for e in queue.get_job(child).events][-1] == "RETRIED"
    queue.succeed(run_only(queue, parent))  # only the parent was claimable
    assert state(queue, child) == (QUEUED, 0)
    run_only(queue, child)
    assert check(queue) == []


def test_retrying_a_child_whose_parent_failed_is_refused_naming_the_parent(queue):
    parent = queue.enqueue("parent", max_retries=0).id
    child = queue.enqueue("child", depends_on=[parent]).id
    fail_for_good(queue, parent)

    with pytest.raises(InvalidTransition, match=rf"parent job {parent} is FAILED.*with_dependents"):
        queue.retry(child)

    assert queue.get_job(child).status == CANCELLED
    assert check(queue) == []


def test_a_retried_run_child_of_a_failed_parent_runs(queue):
    parent = queue.enqueue("parent", max_retries=0).id
    child = queue.enqueue("child", depends_on=[parent], on_parent_failure="run").id
    fail_for_good(queue, parent)
    queue.fail(run_only(queue, child), "BUG:X", retryable=False)

    queue.retry(child)

    assert state(queue, child) == (QUEUED, 0)
    assert check(queue) == []


def test_retry_with_dependents_brings_back_the_jobs_cancelled_because_of_it(queue):
    parent = queue.enqueue("parent", max_retries=0).id
    child = queue.enqueue("child", depends_on=[parent]).id
    grandchild = queue.enqueue("grandchild", depends_on=[child]).id
    bystander = queue.enqueue("bystander").id
    queue.cancel(bystander)
    fail_for_good(queue, parent)

    queue.retry(parent, with_dependents=True)

    assert queue.get_job(parent).status == QUEUED
    assert state(queue, child) == (WAITING, 1)
    assert state(queue, grandchild) == (WAITING, 1)
    assert queue.get_job(bystander).status == CANCELLED
    event = queue.get_job(grandchild).events[-1]
    assert event.event == "RETRIED" and f'"with":{parent}' in event.detail
    queue.succeed(run_only(queue, parent))
    queue.succeed(run_only(queue, child))
    run_only(queue, grandchild)
    assert check(queue) == []


def test_retry_with_dependents_leaves_a_dependent_another_failed_parent_holds(queue):
    other = queue.enqueue("other", max_retries=0).id
    fail_for_good(queue, other)
    parent = queue.enqueue("parent", max_retries=0).id
    child = queue.enqueue("child", depends_on=[parent]).id
    both = queue.enqueue("both", depends_on=[parent, other]).id  # cancelled at once
    fail_for_good(queue, parent)

    queue.retry(parent, with_dependents=True)

    assert state(queue, child) == (WAITING, 1)
    assert queue.get_job(both).status == CANCELLED
    assert check(queue) == []


def test_bulk_retry_of_a_parent_and_its_child_keeps_the_order(queue):
    actions = pytest.importorskip("sqlq_orm.dashboard.actions")
    parent = queue.enqueue("parent", max_retries=0).id
    child = queue.enqueue("child", depends_on=[parent]).id
    fail_for_good(queue, parent)

    outcome = actions.apply(queue, actions.ACTIONS["retry"], [child, parent])  # newest first

    assert (outcome.done, outcome.skipped, outcome.why_skipped) == (2, 0, [])
    assert state(queue, child) == (WAITING, 1)
    run_only(queue, parent)
    assert check(queue) == []


# ------------------------------------------------------------ the checker


def released_early(engine, queue):
    """A child queued (with its DEPENDENCIES_MET event) while its parent is unfinished,
    as the double count-down did, then claimed."""
    parent = queue.enqueue("parent", delay=3600).id
    child = queue.enqueue("child", depends_on=[parent], on_parent_failure="run").id
    with unchecked(engine) as connection:
        connection.execute(
            text("UPDATE sqlq_jobs SET status = 'QUEUED', pending_parents = 0 WHERE id = :id"),
            {"id": child},
        )
        connection.execute(
            text(
                "INSERT INTO sqlq_job_events (job_id, ts, event, actor) "
                "VALUES (:id, 1, 'DEPENDENCIES_MET', 'system')"
            ),
            {"id": child},
        )
    run_only(queue, child)
    return parent, child


def test_a_child_that_started_before_its_parent_settled_is_reported(engine, queue):
    parent, child = released_early(engine, queue)

    found = [v for v in check(queue) if v.invariant == "dependent_started_after_parents_settled"]
    assert [v.job_id for v in found] == [child]
    assert f"parent {parent}" in found[0].detail


def test_a_child_that_ran_before_its_parent_is_reported_even_after_the_parent_succeeded(
    engine, queue, clock
):
    parent, child = released_early(engine, queue)
    with unchecked(engine) as connection:
        connection.execute(text("UPDATE sqlq_jobs SET run_at = 0 WHERE id = :id"), {"id": parent})
    (lease,) = queue.claim("worker-b", limit=10, start=True)
    queue.succeed(lease)
    assert queue.get_job(parent).status == JobStatus.SUCCEEDED.value

    assert "dependent_started_after_parents_settled" in {v.invariant for v in check(queue)}


def test_a_waiting_count_that_disagrees_with_the_parents_is_reported(engine, queue):
    first = queue.enqueue("first").id
    second = queue.enqueue("second").id
    child = queue.enqueue("child", depends_on=[first, second]).id
    with unchecked(engine) as connection:
        connection.execute(
            text("UPDATE sqlq_jobs SET pending_parents = 1 WHERE id = :id"), {"id": child}
        )

    found = [v for v in check(queue) if v.invariant == "waiting_count_matches_parents"]
    assert [v.job_id for v in found] == [child]
