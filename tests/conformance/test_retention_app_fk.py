"""Prune next to an app table whose foreign key points into the job table.

Without ``ON DELETE`` the database refuses to delete a referenced job; prune keeps
those jobs (held back and reported, with why), and deletes the rest. ``SET NULL`` and
``CASCADE`` let it delete the job, as the README's retention section describes.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Column, ForeignKey, Integer, MetaData, Table, func, insert, select

from sqlq_orm import JobNotFound, JobStatus, RetentionPolicy
from sqlq_orm.schema.mixins import IdType
from sqlq_orm.schema.models import Job

DAY = 86_400
POLICY = RetentionPolicy(failed_days=1)
FAILED = JobStatus.FAILED.value


def invoices_table(engine, ondelete: str | None) -> Table:
    metadata = MetaData()
    invoices = Table(
        "invoices",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("job_id", IdType, ForeignKey(Job.__table__.c.id, ondelete=ondelete), index=True),
    )
    metadata.create_all(engine)
    return invoices


def failed_jobs(queue, clock, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        ids.append(queue.enqueue("t", max_retries=0).id)
        (lease,) = queue.claim("worker-a", start=True)
        queue.fail(lease, "UPSTREAM:DOWN", retryable=False)
    clock.advance(10 * DAY)
    return ids


def exists(queue, job_id: int) -> bool:
    try:
        queue.get_job(job_id)
    except JobNotFound:
        return False
    return True


def test_prune_keeps_jobs_an_app_row_references_and_deletes_the_rest(engine, queue, clock):
    invoices = invoices_table(engine, None)
    oldest, middle, newest = failed_jobs(queue, clock, 3)
    with engine.begin() as connection:
        connection.execute(insert(invoices), [{"job_id": oldest}])

    result = queue.prune(POLICY, batch_size=2)

    assert (exists(queue, oldest), exists(queue, middle), exists(queue, newest)) == (
        True,
        False,
        False,
    )
    assert result.jobs[FAILED] == 2
    assert result.held_back == {"invoices.job_id": 1}
    assert "invoices.job_id" in result.held_back_reason
    assert "ON DELETE" in result.held_back_reason
    assert queue.prune(POLICY).held_back == {"invoices.job_id": 1}  # and again, no error


def test_dry_run_counts_the_held_back_jobs_apart(engine, queue, clock):
    invoices = invoices_table(engine, None)
    first, _ = failed_jobs(queue, clock, 2)
    with engine.begin() as connection:
        connection.execute(insert(invoices), [{"job_id": first}])

    result = queue.prune(POLICY, dry_run=True)

    assert (result.jobs[FAILED], result.held_back) == (1, {"invoices.job_id": 1})


@pytest.mark.parametrize(("ondelete", "left"), [("SET NULL", [None]), ("CASCADE", [])])
def test_an_app_foreign_key_with_on_delete_lets_prune_delete_the_job(
    engine, queue, clock, ondelete, left
):
    invoices = invoices_table(engine, ondelete)
    (job,) = failed_jobs(queue, clock, 1)
    with engine.begin() as connection:
        connection.execute(insert(invoices), [{"job_id": job}])

    result = queue.prune(POLICY)

    assert (result.jobs[FAILED], result.held_back) == (1, {})
    with engine.connect() as connection:
        assert list(connection.execute(select(invoices.c.job_id)).scalars()) == left
        assert connection.execute(select(func.count()).select_from(invoices)).scalar() == len(left)
