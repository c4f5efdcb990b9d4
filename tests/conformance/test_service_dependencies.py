"""Job dependencies (``depends_on``): a child waits for its parents, on every database.

A child is WAITING until every parent SUCCEEDED, then QUEUED by a DEPENDENCIES_MET
event; a parent that ends FAILED or CANCELLED cancels it with ``DEPENDENCY:FAILED``
(and its own children after it), unless its policy is ``run``. Every path that ends a
job does this in its own transaction: succeed, succeed_many, a final fail, fail_many,
the sweeper and cancel.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm import InvalidInput, JobFailure, JobSpec, JobStatus, RetentionPolicy
from sqlq_orm.db.tables import Models
from sqlq_orm.ops.invariants import check
from sqlq_orm.schema.models import Job, JobAttempt, JobDependency, JobEvent, WorkerRecord

WAITING, QUEUED = JobStatus.WAITING.value, JobStatus.QUEUED.value
CANCELLED, SUCCEEDED = JobStatus.CANCELLED.value, JobStatus.SUCCEEDED.value


def status(queue, job_id):
    return queue.get_job(job_id).status


def events_of(queue, job_id):
    return [(e.event, json.loads(e.detail or "{}")) for e in queue.get_job(job_id).events]


def run(queue, job_id, worker="worker-a"):
    """Claim exactly ``job_id`` (it must be the only ready job) and start it."""
    (lease,) = queue.claim(worker, limit=10, start=True)
    assert lease.job_id == job_id
    return lease


def count(engine, model):
    with engine.connect() as connection:
        return connection.scalar(select(func.count()).select_from(model))


# ------------------------------------------------------------------ waiting, then queued


def test_a_child_waits_until_its_parent_succeeded_and_is_never_claimed_before(queue):
    parent = queue.enqueue("fetch").id
    child = queue.enqueue("report", depends_on=[parent]).id

    assert status(queue, child) == WAITING
    lease = run(queue, parent)
    assert queue.claim("worker-b", limit=10) == []  # the child is not claimable
    queue.succeed(lease)

    assert status(queue, child) == QUEUED
    assert events_of(queue, child) == [
        ("ENQUEUED", {"queue": "default", "type": "report", "depends_on": [parent]}),
        ("DEPENDENCIES_MET", {"parents": [parent]}),
    ]
    assert run(queue, child).job_id == child
    assert check(queue) == []


def test_a_child_of_two_parents_waits_for_the_second(queue):
    first, second = queue.enqueue("a").id, queue.enqueue("b").id
    child = queue.enqueue("c", depends_on=[first, second]).id
    leases = queue.claim("worker-a", limit=2, start=True)

    queue.succeed(leases[0])
    assert (status(queue, child), queue.get_job(child).pending_parents) == (WAITING, 1)
    queue.succeed(leases[1])

    assert (status(queue, child), queue.get_job(child).pending_parents) == (QUEUED, 0)
    assert check(queue) == []


def test_succeed_many_with_both_parents_in_one_batch_queues_the_child_once(queue):
    first, second = queue.enqueue("a").id, queue.enqueue("b").id
    child = queue.enqueue("c", depends_on=[first, second]).id

    assert queue.succeed_many(queue.claim("worker-a", limit=2, start=True)) == []

    assert status(queue, child) == QUEUED
    assert [name for name, _ in events_of(queue, child)] == ["ENQUEUED", "DEPENDENCIES_MET"]
    assert events_of(queue, child)[1][1] == {"parents": [first, second]}
    assert check(queue) == []


def test_a_promoted_child_takes_its_turn_behind_jobs_already_ready(queue, clock):
    parent = queue.enqueue("a").id
    child = queue.enqueue("c", depends_on=[parent]).id
    lease = run(queue, parent)
    clock.advance(100)
    earlier = queue.enqueue("b").id
    clock.advance(100)

    queue.succeed(lease)

    assert queue.get_job(child).run_at == queue.get_job(earlier).run_at + 100
    assert [lease.job_id for lease in queue.claim("worker-a", limit=1)] == [earlier]


def test_a_parent_already_succeeded_counts_as_met(queue):
    parent = queue.enqueue("a").id
    queue.succeed(run(queue, parent))

    child = queue.enqueue("c", depends_on=[parent]).id

    assert status(queue, child) == QUEUED
    assert [name for name, _ in events_of(queue, child)] == ["ENQUEUED"]
    assert check(queue) == []


def test_a_retry_of_the_parent_keeps_the_child_waiting(queue):
    parent = queue.enqueue("a", max_retries=1).id
    child = queue.enqueue("c", depends_on=[parent]).id

    assert queue.fail(run(queue, parent), "UPSTREAM:DOWN") is JobStatus.QUEUED

    assert status(queue, child) == WAITING
    assert check(queue) == []


# ------------------------------------------------------------------ a parent that fails


def test_a_failed_parent_cancels_its_children_and_theirs_naming_the_parent(queue):
    parent = queue.enqueue("a", max_retries=0).id
    child = queue.enqueue("b", depends_on=[parent]).id
    grandchild = queue.enqueue("c", depends_on=[child]).id

    queue.fail(run(queue, parent), "UPSTREAM:DOWN")

    for job_id, cause, cause_status in ((child, parent, "FAILED"), (grandchild, child, CANCELLED)):
        job = queue.get_job(job_id)
        assert (job.status, job.error_code) == (CANCELLED, "DEPENDENCY:FAILED")
        name, detail = events_of(queue, job_id)[-1]
        assert name == "CANCELLED"
        assert (detail["parent"], detail["parent_status"]) == (cause, cause_status)
        assert f"parent job {cause} ended {cause_status}" in job.error_detail
    assert check(queue) == []


def test_fail_many_cancels_the_children_of_the_jobs_that_ended_failed(queue):
    done_for = queue.enqueue("a", max_retries=0).id
    retried = queue.enqueue("b", max_retries=2).id
    doomed = queue.enqueue("c", depends_on=[done_for]).id
    waiting = queue.enqueue("d", depends_on=[retried]).id
    leases = queue.claim("worker-a", limit=2, start=True)

    queue.fail_many([JobFailure(lease, "UPSTREAM:DOWN") for lease in leases])

    assert (status(queue, doomed), status(queue, waiting)) == (CANCELLED, WAITING)
    assert check(queue) == []


def test_a_parent_failed_by_the_sweeper_cancels_its_children(queue, clock):
    parent = queue.enqueue("a", max_retries=0).id
    child = queue.enqueue("b", depends_on=[parent]).id
    lease = run(queue, parent)
    clock.set(lease.lease_expires_at)

    assert queue.sweep().failed == 1

    assert queue.get_job(child).error_code == "DEPENDENCY:FAILED"
    assert check(queue) == []


def test_cancelling_a_parent_cancels_its_children(queue):
    parent = queue.enqueue("a").id
    child = queue.enqueue("b", depends_on=[parent]).id

    queue.cancel(parent, reason="not needed")

    assert (status(queue, child), queue.get_job(child).error_code) == (
        CANCELLED,
        "DEPENDENCY:FAILED",
    )
    assert check(queue) == []


def test_cancelling_a_waiting_child_leaves_its_parent_alone(queue):
    parent = queue.enqueue("a").id
    child = queue.enqueue("b", depends_on=[parent]).id

    queue.cancel(child)
    queue.succeed(run(queue, parent))

    assert (status(queue, parent), status(queue, child)) == (SUCCEEDED, CANCELLED)
    assert check(queue) == []


def test_a_parent_already_failed_cancels_the_child_at_its_enqueue(queue):
    parent = queue.enqueue("a").id
    queue.cancel(parent)

    child = queue.enqueue("b", depends_on=[parent]).id

    assert queue.get_job(child).error_code == "DEPENDENCY:FAILED"
    assert [name for name, _ in events_of(queue, child)] == ["ENQUEUED", "CANCELLED"]
    assert check(queue) == []


def test_a_manual_retry_of_the_parent_does_not_bring_back_cancelled_children(queue):
    parent = queue.enqueue("a", max_retries=0).id
    child = queue.enqueue("b", depends_on=[parent]).id
    queue.fail(run(queue, parent), "UPSTREAM:DOWN")

    queue.retry(parent)
    queue.succeed(run(queue, parent))

    assert status(queue, child) == CANCELLED
    assert check(queue) == []


# ------------------------------------------------------------------ policy "run"


def test_under_the_run_policy_a_child_runs_once_every_parent_finished(queue):
    failing = queue.enqueue("a", max_retries=0).id
    cancelled = queue.enqueue("b", delay=3600).id
    child = queue.enqueue("c", depends_on=[failing, cancelled], on_parent_failure="run").id

    queue.fail(run(queue, failing), "UPSTREAM:DOWN")
    assert status(queue, child) == WAITING
    queue.cancel(cancelled)

    assert status(queue, child) == QUEUED
    assert run(queue, child).job_id == child
    assert check(queue) == []


def test_under_the_run_policy_a_parent_already_failed_counts_as_finished(queue):
    parent = queue.enqueue("a").id
    queue.cancel(parent)

    child = queue.enqueue("c", depends_on=[parent], on_parent_failure="run").id

    assert status(queue, child) == QUEUED


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("depends_on", "policy", "message"),
    [
        ([10**9], "cancel", r"do not exist: \[1000000000\]"),
        ("12", "cancel", "depends_on must be a list of job ids"),
        ([0], "cancel", r"depends_on\[0\] must be a job id"),
        (["7"], "cancel", r"depends_on\[0\] must be an integer"),
        ([], "later", "on_parent_failure must be one of"),
    ],
)
def test_bad_dependencies_are_refused_and_nothing_is_written(
    queue, engine, depends_on, policy, message
):
    queue.enqueue("a")
    before = (count(engine, Job), count(engine, JobEvent), count(engine, JobDependency))

    with pytest.raises(InvalidInput, match=message):
        queue.enqueue("c", depends_on=depends_on, on_parent_failure=policy)

    assert (count(engine, Job), count(engine, JobEvent), count(engine, JobDependency)) == before


def test_enqueue_many_with_an_unknown_parent_writes_no_job(queue, engine):
    parent = queue.enqueue("a").id

    with pytest.raises(InvalidInput, match=r"\[999999\]"):
        queue.enqueue_many([JobSpec("b", depends_on=[parent]), JobSpec("c", depends_on=[999999])])

    assert count(engine, Job) == 1


def test_depends_on_without_a_dependency_model_is_refused(engine, clock):
    models = Models(job=Job, attempt=JobAttempt, event=JobEvent, worker=WorkerRecord)
    queue = sqlq_orm.Queue(engine, clock=clock, models=models)
    parent = queue.enqueue("a").id

    with pytest.raises(InvalidInput, match="JobDependencyMixin"):
        queue.enqueue("b", depends_on=[parent])


# ------------------------------------------------------------------ enqueue_many, session


def test_enqueue_many_takes_depends_on_per_job(queue):
    parent = queue.enqueue("a").id

    free, child, loose = queue.enqueue_many(
        [
            JobSpec("x"),
            JobSpec("y", depends_on=[parent]),
            {"type": "z", "depends_on": [parent], "on_parent_failure": "run"},
        ]
    )

    assert [status(queue, i) for i in (free, child, loose)] == [QUEUED, WAITING, WAITING]
    queue.cancel(parent)
    assert [status(queue, i) for i in (child, loose)] == [CANCELLED, QUEUED]
    assert check(queue) == []


def test_a_child_enqueued_in_a_rolled_back_session_leaves_nothing(queue, engine):
    parent = queue.enqueue("a").id
    with Session(engine) as session:
        queue.enqueue("b", depends_on=[parent], session=session)
        session.rollback()

    assert (count(engine, Job), count(engine, JobDependency)) == (1, 0)
    queue.succeed(run(queue, parent))
    assert check(queue) == []


def test_a_child_enqueued_in_a_committed_session_waits(queue, engine):
    parent = queue.enqueue("a").id
    with Session(engine) as session:
        child = queue.enqueue("b", depends_on=[parent], session=session).id
        session.commit()

    assert status(queue, child) == WAITING


def test_a_waiting_child_holds_its_dedupe_key(queue):
    parent = queue.enqueue("a").id
    child = queue.enqueue("b", depends_on=[parent], dedupe_key="report-7")

    again = queue.enqueue("b", dedupe_key="report-7")

    assert (again.id, again.created) == (child.id, False)


# ------------------------------------------------------------------ helpers, reads


def test_enqueue_chain_runs_its_jobs_one_after_another(queue):
    ids = queue.enqueue_chain([JobSpec("fetch"), {"type": "parse"}, JobSpec("store")])

    assert [status(queue, i) for i in ids] == [QUEUED, WAITING, WAITING]
    for job_id in ids:
        queue.succeed(run(queue, job_id))
    assert [status(queue, i) for i in ids] == [SUCCEEDED] * 3
    assert check(queue) == []


def test_enqueue_fan_in_waits_for_every_parent(queue):
    *parents, last = queue.enqueue_fan_in([JobSpec("a"), JobSpec("b"), JobSpec("c")], JobSpec("d"))

    leases = queue.claim("worker-a", limit=10, start=True)
    assert sorted(lease.job_id for lease in leases) == parents
    queue.succeed_many(leases[:2])
    assert status(queue, last) == WAITING
    queue.succeed_many(leases[2:])
    assert status(queue, last) == QUEUED
    assert check(queue) == []


def test_helpers_refuse_an_empty_list(queue):
    with pytest.raises(InvalidInput, match="at least one job"):
        queue.enqueue_chain([])


def test_dependencies_of_lists_parents_and_children(queue):
    first, second = queue.enqueue("a").id, queue.enqueue("b").id
    child = queue.enqueue("c", depends_on=[second, first], on_parent_failure="run").id

    parents, children = queue.dependencies_of(child)
    assert [(p.id, p.type, p.status, p.on_parent_failure) for p in parents] == [
        (first, "a", QUEUED, "run"),
        (second, "b", QUEUED, "run"),
    ]
    assert children == []
    assert [c.id for c in queue.dependencies_of(first)[1]] == [child]


# ------------------------------------------------------------------ retention, hot path


def test_pruning_finished_parents_leaves_no_dependency_rows(queue, engine, clock):
    parent = queue.enqueue("a").id
    child = queue.enqueue("b", depends_on=[parent]).id
    queue.succeed(run(queue, parent))
    queue.succeed(run(queue, child))
    clock.advance(10 * 86400)

    queue.prune(RetentionPolicy(succeeded_days=1))

    assert (count(engine, Job), count(engine, JobDependency)) == (0, 0)
    assert check(queue) == []


def test_a_batch_without_dependents_never_looks_for_children(queue, engine):
    queue.enqueue_many([JobSpec("a"), JobSpec("b")])
    leases = queue.claim("worker-a", limit=2, start=True)
    statements: list[str] = []

    def record(conn, cursor, statement, *args):
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        queue.succeed_many(leases)
    finally:
        event.remove(engine, "before_cursor_execute", record)

    looked_up = [s for s in statements if "sqlq_job_dependencies.job_id" in s]
    assert looked_up == []


def test_waiting_jobs_lists_the_oldest_waiting_jobs_with_their_parents(queue, engine, clock):
    from sqlq_orm.ops.dependencies import waiting_jobs

    first, second = queue.enqueue("a").id, queue.enqueue("b").id
    children = [queue.enqueue("c", depends_on=[first, second]).id for _ in range(3)]
    queue.enqueue("free")

    page = waiting_jobs(queue, limit=2)

    assert (page.total, [w.id for w in page.jobs]) == (3, children[:2])
    assert [(p.id, p.type, p.status) for p in page.jobs[0].parents] == [
        (first, "a", QUEUED),
        (second, "b", QUEUED),
    ]
    assert page.jobs[0].pending_parents == 2
    without = Models(job=Job, attempt=JobAttempt, event=JobEvent, worker=WorkerRecord)
    assert waiting_jobs(sqlq_orm.Queue(engine, models=without)).available is False
