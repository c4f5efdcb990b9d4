"""Discarding jobs, and cancel / retry / discard by filter, batched like prune."""

from __future__ import annotations

import pytest
import sqlalchemy

from sqlq_orm import InvalidInput, InvalidTransition, JobFilter, JobNotFound, LeaseLost
from sqlq_orm.schema.models import JobDependency
from tests.support.queue_helpers import job_row, row_counts


def failed_job(
    queue, job_type: str = "sync", code: str = "NETWORK:DOWN", name: str = "default", **options
) -> int:
    """A job run once and failed for good (attempt and events written); call it while
    ``name`` has no other job ready."""
    job = queue.enqueue(job_type, max_retries=0, queue=name, **options)
    (lease,) = queue.claim("w", queues=[name], start=True)
    assert lease.job_id == job.id
    queue.fail(lease, code, "down")
    return job.id


def status_of(engine, job_id: int) -> str | None:
    try:
        return job_row(engine, job_id).status
    except sqlalchemy.exc.NoResultFound:
        return None


def edges(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(
            sqlalchemy.select(sqlalchemy.func.count()).select_from(JobDependency.__table__)
        ).scalar_one()


def test_discard_deletes_a_job_with_its_attempts_and_events(queue, engine):
    kept = failed_job(queue)
    gone = failed_job(queue)
    before = row_counts(engine)

    assert queue.discard(gone) == 0

    assert status_of(engine, gone) is None
    assert status_of(engine, kept) == "FAILED"
    after = row_counts(engine)
    assert after["sqlq_jobs"] == before["sqlq_jobs"] - 1
    assert after["sqlq_job_attempts"] == before["sqlq_job_attempts"] - 1
    # ENQUEUED and FAILED (its attempt row stood for CLAIMED and STARTED)
    assert after["sqlq_job_events"] == before["sqlq_job_events"] - 2


def test_discard_refuses_a_job_a_worker_holds_and_an_unknown_id(queue, engine):
    job = queue.enqueue("a")
    (lease,) = queue.claim("w", start=True)

    with pytest.raises(InvalidTransition, match="RUNNING"):
        queue.discard(job.id)
    with pytest.raises(JobNotFound):
        queue.discard(job.id + 100)
    queue.succeed(lease)
    assert status_of(engine, job.id) == "SUCCEEDED"


def test_discarding_an_unfinished_parent_cancels_what_waits_for_it_and_counts_it(queue, engine):
    parent = queue.enqueue("parent").id
    child = queue.enqueue("child", depends_on=[parent]).id
    grandchild = queue.enqueue("grandchild", depends_on=[child]).id
    bystander = queue.enqueue("other").id

    assert queue.discard(parent) == 2

    assert status_of(engine, parent) is None
    for job_id in (child, grandchild):
        row = job_row(engine, job_id)
        assert (row.status, row.error_code) == ("CANCELLED", "DEPENDENCY:FAILED")
    assert status_of(engine, bystander) == "QUEUED"
    assert edges(engine) == 1  # child -> grandchild; parent's edge went with it


def test_the_dependents_a_cascade_cancels_carry_the_actor_who_acted(queue, engine):
    # The operator's cancel (or discard) ended the parent: the children's CANCELLED
    # events name the operator, not "system".
    cancelled_parent = queue.enqueue("parent").id
    child = queue.enqueue("child", depends_on=[cancelled_parent]).id
    discarded_parent = queue.enqueue("parent").id
    orphan = queue.enqueue("child", depends_on=[discarded_parent]).id

    queue.cancel(cancelled_parent, actor="ops")
    queue.discard(discarded_parent, actor="ops")

    with engine.connect() as connection:
        actors = dict(
            connection.execute(
                sqlalchemy.text(
                    "SELECT job_id, actor FROM sqlq_job_events"
                    " WHERE event = 'CANCELLED' AND job_id IN (:a, :b)"
                ),
                {"a": child, "b": orphan},
            ).all()
        )
    assert actors == {child: "ops", orphan: "ops"}


def test_discard_jobs_by_filter_works_in_batches_and_counts_exactly(queue, engine):
    doomed = [failed_job(queue, "report") for _ in range(5)]
    other_type = failed_job(queue, "mail")
    queued = queue.enqueue("report").id

    dry = queue.discard_jobs(JobFilter(type="report", status="FAILED"), dry_run=True)
    assert (dry.dry_run, dry.matched, dry.acted) == (True, 5, 0)
    assert all(status_of(engine, job_id) == "FAILED" for job_id in doomed)

    result = queue.discard_jobs(JobFilter(type="report", status="FAILED"), batch_size=2)

    assert (result.matched, result.acted, result.skipped, result.dependents) == (5, 5, 0, 0)
    assert (result.batches, result.complete) == (3, True)
    assert all(status_of(engine, job_id) is None for job_id in doomed)
    assert status_of(engine, other_type) == "FAILED"
    assert status_of(engine, queued) == "QUEUED"


def test_a_bulk_action_stopped_by_max_batches_goes_on_when_run_again(queue, engine):
    jobs = [failed_job(queue) for _ in range(5)]

    first = queue.discard_jobs(JobFilter(status="FAILED"), batch_size=2, max_batches=1)
    rest = queue.discard_jobs(JobFilter(status="FAILED"), batch_size=2)

    assert (first.acted, first.complete) == (2, False)
    assert (rest.acted, rest.complete) == (3, True)
    assert [status_of(engine, job_id) for job_id in jobs] == [None] * 5


def test_discard_jobs_never_touches_a_job_a_worker_holds(queue, engine):
    held = queue.enqueue("a").id
    queue.claim("w", start=True)
    waiting = queue.enqueue("a").id

    result = queue.discard_jobs(JobFilter(queue="default"))

    assert (result.matched, result.acted) == (1, 1)
    assert status_of(engine, held) == "RUNNING"
    assert status_of(engine, waiting) is None


def test_cancel_jobs_by_queue_cancels_the_unfinished_and_counts_dependents(queue, engine):
    done = failed_job(queue, name="mail")
    running = queue.enqueue("a", queue="mail").id
    (lease,) = queue.claim("w", queues=["mail"], start=True)
    parent = queue.enqueue("a", queue="mail").id
    child = queue.enqueue("b", queue="other", depends_on=[parent]).id
    elsewhere = queue.enqueue("a").id

    result = queue.cancel_jobs(JobFilter(queue="mail"), actor="ops", reason="outage")

    assert (result.action, result.matched, result.acted, result.dependents) == (
        "cancel", 2, 2, 1,
    )  # fmt: skip
    assert [status_of(engine, j) for j in (running, parent, child, done, elsewhere)] == [
        "CANCELLED", "CANCELLED", "CANCELLED", "FAILED", "QUEUED",
    ]  # fmt: skip
    with pytest.raises(LeaseLost):
        queue.heartbeat(lease)


def test_retry_jobs_by_error_code_requeues_them_and_skips_a_dedupe_conflict(queue, engine):
    timeouts = [failed_job(queue, code="TIMEOUT:API") for _ in range(3)]
    network = failed_job(queue, code="NETWORK:DOWN")
    conflicted = failed_job(queue, code="TIMEOUT:API", dedupe_key="k")
    holder = queue.enqueue("sync", dedupe_key="k").id  # an unfinished job holds the key

    result = queue.retry_jobs(JobFilter(error_code="TIMEOUT:API"), batch_size=2)

    assert (result.matched, result.acted, result.skipped, result.batches) == (4, 3, 1, 2)
    assert [status_of(engine, j) for j in timeouts] == ["QUEUED"] * 3
    assert status_of(engine, network) == "FAILED"
    assert status_of(engine, conflicted) == "FAILED"
    assert status_of(engine, holder) == "QUEUED"


@pytest.mark.parametrize(
    ("call", "job_filter", "message"),
    [
        ("discard_jobs", JobFilter(), "at least one"),
        ("cancel_jobs", JobFilter(status="SUCCEEDED"), "not SUCCEEDED"),
        ("retry_jobs", JobFilter(status="QUEUED"), "not QUEUED"),
        ("discard_jobs", JobFilter(status="RUNNING"), "not RUNNING"),
        ("discard_jobs", "FAILED", "must be a JobFilter"),
    ],
)
def test_a_bad_filter_is_refused_and_nothing_is_written(queue, engine, call, job_filter, message):
    job = failed_job(queue)
    with pytest.raises(InvalidInput, match=message):
        getattr(queue, call)(job_filter)
    assert status_of(engine, job) == "FAILED"


def test_a_bad_batch_size_is_refused(queue):
    with pytest.raises(InvalidInput, match="batch_size"):
        queue.discard_jobs(JobFilter(status="FAILED"), batch_size=0)
