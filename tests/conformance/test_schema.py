"""The database itself refuses inconsistent rows and deletes a job's history with it.

Rows are written with raw SQL (bound parameters), bypassing the service and the ORM,
so what is tested is the schema: CHECKs, foreign keys, the partial unique index and
ON DELETE CASCADE. Runs on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sqlq_orm.schema.models import Job, JobAttempt, JobEvent
from tests.support import factories

T0 = factories.T0

JOB_COLUMNS = (
    "queue", "type", "status", "priority", "created_at", "run_at", "attempt_count",
    "retry_count", "max_retries", "claimed_by", "lease_token", "lease_expires_at",
    "started_at", "finished_at", "dedupe_key",
)  # fmt: skip
INSERT_JOB = text(
    f"INSERT INTO sqlq_jobs ({', '.join(JOB_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)})"
)
INSERT_ATTEMPT = text(
    "INSERT INTO sqlq_job_attempts (job_id, attempt, worker_id, started_at, status) "
    "VALUES (:job_id, :attempt, 'worker-1', :started_at, :status)"
)


def job_row(**overrides: Any) -> dict[str, Any]:
    """A QUEUED job that every constraint accepts, with ``overrides`` applied."""
    row = dict.fromkeys(JOB_COLUMNS)
    row.update(
        queue="default", type="send_email", status="QUEUED", priority=0, created_at=T0,
        run_at=T0, attempt_count=0, retry_count=0, max_retries=3,
    )  # fmt: skip
    row.update(overrides)
    return row


def count_rows(engine, model) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(model)))


HELD = {"claimed_by": "worker-1", "lease_token": "tok", "lease_expires_at": T0 + 30}

REFUSED_JOBS = {
    "status outside the set": (job_row(status="DONE"), "ck_sqlq_jobs_status_valid"),
    "RUNNING without a lease": (
        job_row(status="RUNNING", started_at=T0, claimed_by="worker-1"),
        "ck_sqlq_jobs_held_has_lease",
    ),
    "negative retry_count": (job_row(retry_count=-1), "ck_sqlq_jobs_retry_count_nonneg"),
    "negative max_retries": (job_row(max_retries=-1), "ck_sqlq_jobs_max_retries_nonneg"),
    "lease token on a QUEUED job": (
        job_row(lease_token="tok", lease_expires_at=T0 + 30),
        "ck_sqlq_jobs_lease_only_when_held",
    ),
    "RUNNING that never started": (
        job_row(status="RUNNING", **HELD),
        "ck_sqlq_jobs_running_has_started",
    ),
    "finished status without finished_at": (
        job_row(status="SUCCEEDED"),
        "ck_sqlq_jobs_terminal_has_finished",
    ),
}


def test_database_accepts_a_consistent_job_row(engine):
    with engine.begin() as connection:
        connection.execute(INSERT_JOB, job_row(status="RUNNING", started_at=T0, **HELD))

    assert count_rows(engine, Job) == 1


@pytest.mark.parametrize("row, constraint", REFUSED_JOBS.values(), ids=REFUSED_JOBS.keys())
def test_database_refuses_an_inconsistent_job_row(engine, row, constraint):
    with pytest.raises(IntegrityError) as refused, engine.begin() as connection:
        connection.execute(INSERT_JOB, row)

    assert constraint in str(refused.value)
    assert count_rows(engine, Job) == 0


def test_database_refuses_an_attempt_for_a_job_that_does_not_exist(engine):
    with pytest.raises(IntegrityError) as refused, engine.begin() as connection:
        connection.execute(
            INSERT_ATTEMPT, {"job_id": 424242, "attempt": 1, "started_at": T0, "status": "RUNNING"}
        )

    assert "foreign key" in str(refused.value).lower()
    assert count_rows(engine, JobAttempt) == 0


def test_database_refuses_a_second_attempt_with_the_same_number(engine, session):
    job_id = factories.JobAttemptFactory(status="FAILED", finished_at=T0 + 5).job_id
    session.commit()

    with pytest.raises(IntegrityError) as refused, engine.begin() as connection:
        connection.execute(
            INSERT_ATTEMPT,
            {"job_id": job_id, "attempt": 1, "started_at": T0 + 6, "status": "RUNNING"},
        )

    assert "unique" in str(refused.value).lower() or "duplicate entry" in str(refused.value).lower()
    assert count_rows(engine, JobAttempt) == 1


def test_database_refuses_a_second_unfinished_job_with_the_same_dedupe_key(engine, session):
    factories.JobFactory(dedupe_key="order-7")
    session.commit()

    with pytest.raises(IntegrityError) as refused, engine.begin() as connection:
        connection.execute(INSERT_JOB, job_row(dedupe_key="order-7"))

    assert "unique" in str(refused.value).lower() or "duplicate entry" in str(refused.value).lower()
    assert count_rows(engine, Job) == 1


def test_dedupe_key_of_a_finished_job_can_be_used_again(engine, session):
    factories.JobFactory(dedupe_key="order-7", succeeded=True)
    session.commit()

    with engine.begin() as connection:
        connection.execute(INSERT_JOB, job_row(dedupe_key="order-7"))

    assert count_rows(engine, Job) == 2


# ------------------------------------------------------------------- cascades


def job_with_history(session: Session) -> Job:
    """A job with two attempts and three events."""
    first = factories.JobAttemptFactory(attempt=1, status="FAILED", finished_at=T0 + 5)
    job = first.job
    factories.JobAttemptFactory(job=job, attempt=2)
    for event in ("ENQUEUED", "CLAIMED", "STARTED"):
        factories.JobEventFactory(job=job, event=event)
    return job


def history_counts(engine) -> tuple[int, int, int]:
    return count_rows(engine, Job), count_rows(engine, JobAttempt), count_rows(engine, JobEvent)


def test_orm_delete_of_a_job_removes_its_attempts_and_events(engine, session):
    doomed = job_with_history(session).id
    job_with_history(session)
    session.commit()
    session.expunge_all()  # attempts and events not loaded: the database cascades

    session.delete(session.get(Job, doomed))
    session.commit()

    assert history_counts(engine) == (1, 2, 3)
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).where(JobAttempt.job_id == doomed)) == 0
        assert connection.scalar(select(func.count()).where(JobEvent.job_id == doomed)) == 0


def test_raw_delete_of_a_job_removes_its_attempts_and_events(engine, session):
    doomed = job_with_history(session).id
    job_with_history(session)
    session.commit()

    with engine.begin() as connection:
        connection.execute(text("DELETE FROM sqlq_jobs WHERE id = :id"), {"id": doomed})

    assert history_counts(engine) == (1, 2, 3)


def test_core_delete_of_every_job_leaves_no_orphans(engine, session):
    job_with_history(session)
    job_with_history(session)
    session.commit()

    with engine.begin() as connection:
        connection.execute(delete(Job))

    assert history_counts(engine) == (0, 0, 0)
