"""A host app binds the mixins to its own declarative base and uses the queue.

Two hosts: one keeps the default table and class names on a base with no naming
convention and adds a ``tenant_id`` column; the other renames every table and class
on a base with a naming convention of its own. Both run on a SQLite file and on
PostgreSQL (each in an empty database, apart from sqlq's default tables).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import sqlalchemy
from sqlalchemy import MetaData, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import sqlq_orm
from sqlq_orm import JobAttemptMixin, JobEventMixin, JobMixin, Models, WorkerMixin
from tests.support import factories

# ---------------------------------------------------------- host 1: default names


class PlainBase(DeclarativeBase):
    """No naming convention at all."""


class Job(JobMixin, PlainBase):
    tenant_id: Mapped[int | None] = mapped_column(index=True)


class JobAttempt(JobAttemptMixin, PlainBase):
    pass


class JobEvent(JobEventMixin, PlainBase):
    pass


class Worker(WorkerMixin, PlainBase):
    pass


PLAIN = SimpleNamespace(
    base=PlainBase,
    models=Models(job=Job, attempt=JobAttempt, event=JobEvent, worker=Worker),
    tables={"sqlq_jobs", "sqlq_job_attempts", "sqlq_job_events", "sqlq_workers"},
)

# ------------------------------------------------------ host 2: everything renamed


class AppBase(DeclarativeBase):
    """A naming convention unlike sqlq's own."""

    metadata = MetaData(
        naming_convention={
            "ix": "%(column_0_label)s_idx",
            "uq": "%(table_name)s_%(column_0_name)s_key",
            "ck": "%(table_name)s_%(constraint_name)s_check",
            "fk": "%(table_name)s_%(column_0_name)s_fkey",
            "pk": "%(table_name)s_pkey",
        }
    )


class Task(JobMixin, AppBase):
    __tablename__ = "app_tasks"
    __sqlq_attempt_model__ = "TaskRun"
    __sqlq_event_model__ = "TaskEvent"

    tenant_id: Mapped[int | None] = mapped_column(index=True)


class TaskRun(JobAttemptMixin, AppBase):
    __tablename__ = "app_task_runs"
    __sqlq_job_table__ = "app_tasks"
    __sqlq_job_model__ = "Task"


class TaskEvent(JobEventMixin, AppBase):
    __tablename__ = "app_task_events"
    __sqlq_job_table__ = "app_tasks"
    __sqlq_job_model__ = "Task"


class AppWorker(WorkerMixin, AppBase):
    __tablename__ = "app_workers"


RENAMED = SimpleNamespace(
    base=AppBase,
    models=Models(job=Task, attempt=TaskRun, event=TaskEvent, worker=AppWorker),
    tables={"app_tasks", "app_task_runs", "app_task_events", "app_workers"},
)


@pytest.fixture(params=[PLAIN, RENAMED], ids=["default-names", "renamed"])
def host(request, db_url) -> Iterator[SimpleNamespace]:
    """A host app's engine with its own tables created, and its models."""
    engine = sqlq_orm.create_engine(db_url)
    request.param.base.metadata.create_all(engine)
    yield SimpleNamespace(engine=engine, **vars(request.param))
    engine.dispose()


def test_host_models_create_exactly_the_host_tables(host):
    assert set(sqlalchemy.inspect(host.engine).get_table_names()) == host.tables


def test_host_constraint_names_ignore_the_host_naming_convention(host):
    inspector = sqlalchemy.inspect(host.engine)
    jobs = host.models.job.__tablename__

    checks = {c["name"] for c in inspector.get_check_constraints(jobs)}
    indexes = {ix["name"] for ix in inspector.get_indexes(jobs)}

    assert f"ck_{jobs}_held_has_lease" in checks
    assert {f"ix_{jobs}_claim", f"uq_{jobs}_dedupe_active"} <= indexes


def test_host_primary_key_names_ignore_the_host_naming_convention(host):
    if host.engine.dialect.name in ("mysql", "mariadb"):
        pytest.skip("MySQL names every primary key PRIMARY, whatever it was declared as")
    inspector = sqlalchemy.inspect(host.engine)

    names = {table: inspector.get_pk_constraint(table)["name"] for table in host.tables}

    assert names == {table: f"pk_{table}" for table in host.tables}


def test_host_job_with_an_extra_column_runs_through_the_queue(host):
    queue = sqlq_orm.Queue(
        host.engine, models=host.models, clock=sqlq_orm.PinnedClock(1_700_000_000)
    )
    enqueued = queue.enqueue("send_invoice", {"invoice": 12}, tenant_id=7)

    (lease,) = queue.claim("worker-1")
    queue.start(lease)
    queue.succeed(lease)

    with Session(host.engine) as session:
        job = session.get(host.models.job, enqueued.id)
        assert (job.tenant_id, job.status, job.type) == (7, "SUCCEEDED", "send_invoice")
        assert [(a.attempt, a.status, a.worker_id) for a in job.attempts] == [
            (1, "SUCCEEDED", "worker-1")
        ]
        assert [e.event for e in job.events] == ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]
        assert all(e.job is job for e in job.events)


def test_host_rejects_an_unknown_extra_column(host):
    queue = sqlq_orm.Queue(host.engine, models=host.models)

    with pytest.raises(sqlq_orm.InvalidInput, match="tenant"):
        queue.enqueue("send_invoice", tenant="7")

    with host.engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(host.models.job)) == 0


def test_deleting_a_host_job_removes_its_attempts_and_events(host):
    with Session(host.engine) as session:
        made = factories.factories_for(host.models, session)
        doomed = made.attempt(status="FAILED", finished_at=factories.T0 + 5).job
        made.event(job=doomed, event="CLAIMED")
        made.attempt()
        doomed_id = doomed.id
        session.commit()
        session.expunge_all()

        session.delete(session.get(host.models.job, doomed_id))
        session.commit()

        remaining = (
            session.scalar(select(func.count()).select_from(host.models.job)),
            session.scalar(select(func.count()).select_from(host.models.attempt)),
            session.scalar(select(func.count()).select_from(host.models.event)),
        )
    assert remaining == (1, 1, 0)


def test_default_models_are_untouched_by_host_bindings():
    assert sqlq_orm.Job.__table__.name == "sqlq_jobs"
    assert sqlq_orm.Job.__table__.metadata is sqlq_orm.Base.metadata
    assert "tenant_id" not in sqlq_orm.Job.__table__.c
