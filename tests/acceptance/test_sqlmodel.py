"""The SQLModel recipe: the mixins on a ``DeclarativeBase`` that shares SQLModel's metadata.

The most-used FastAPI template declares its tables with SQLModel, and
``class Job(JobMixin, SQLModel, table=True)`` failed inside pydantic with
``TypeError: issubclass() arg 1 must be a class`` (or a schema error naming
``Mapped[int]``). The mixins are SQLAlchemy declarative mixins; bound to a
``DeclarativeBase`` whose ``metadata`` is ``SQLModel.metadata`` they share one
``create_all``, one Alembic ``target_metadata`` and foreign keys with the app's SQLModel
tables, and the app's SQLModel ``Session`` enqueues in its own transaction. The wrong
way is refused as the class is defined, naming the recipe (``docs/howto/sqlmodel.md``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy
from sqlalchemy import ForeignKey
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import sqlq_orm
from sqlq_orm import JobAttemptMixin, JobEventMixin, JobMixin, Models, WorkerMixin

sqlmodel = pytest.importorskip("sqlmodel", reason="the SQLModel recipe needs sqlmodel")
from sqlmodel import Field, Session, SQLModel, select  # noqa: E402


class Tenant(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str


class QueueBase(DeclarativeBase):
    """The queue's models' base: SQLAlchemy declarative, SQLModel's metadata."""

    metadata = SQLModel.metadata


class Job(JobMixin, QueueBase):
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenant.id"))


class JobAttempt(JobAttemptMixin, QueueBase):
    pass


class JobEvent(JobEventMixin, QueueBase):
    pass


class Worker(WorkerMixin, QueueBase):
    pass


MODELS = Models(job=Job, attempt=JobAttempt, event=JobEvent, worker=Worker)


def test_a_mixin_on_a_sqlmodel_class_is_refused_naming_the_recipe():
    with pytest.raises(sqlq_orm.InvalidInput, match="DeclarativeBase that shares SQLModel"):

        class BadJob(JobMixin, SQLModel, table=True):
            pass


@pytest.fixture
def app_engine(db_url) -> Iterator[sqlalchemy.Engine]:
    engine = sqlq_orm.create_engine(db_url)
    SQLModel.metadata.create_all(engine)  # the app's tables and the queue's, together
    yield engine
    engine.dispose()


def test_one_metadata_holds_the_apps_sqlmodel_tables_and_the_queues():
    assert {"tenant", "sqlq_jobs", "sqlq_job_attempts"} <= set(SQLModel.metadata.tables)
    (fk,) = SQLModel.metadata.tables["sqlq_jobs"].c.tenant_id.foreign_keys
    assert fk.column.table.name == "tenant"


def test_a_sqlmodel_session_enqueues_in_its_transaction_and_a_worker_reads_the_column(
    app_engine,
):
    queue = sqlq_orm.Queue(app_engine, models=MODELS)
    registry = sqlq_orm.TaskRegistry(queue)
    seen = []

    @registry.task(name="welcome")
    def welcome(ctx: sqlq_orm.JobContext, name: str) -> None:
        seen.append((name, ctx.columns["tenant_id"]))

    with Session(app_engine) as session:
        tenant = Tenant(name="acme")
        session.add(tenant)
        session.flush()
        welcome.options(columns={"tenant_id": tenant.id}, session=session).enqueue("acme")
        session.rollback()  # the tenant and its job go together
    with Session(app_engine) as session:
        tenant = Tenant(name="acme")
        session.add(tenant)
        session.flush()
        welcome.options(columns={"tenant_id": tenant.id}, session=session).enqueue("acme")
        session.commit()
        tenant_id = tenant.id
    sqlq_orm.Worker(queue, registry, burst=True).run()

    assert seen == [("acme", tenant_id)]
    with Session(app_engine) as session:
        assert len(session.exec(select(Tenant)).all()) == 1
    counts = queue.counts_by_status()
    assert (counts["SUCCEEDED"], sum(counts.values())) == (1, 1)  # the rolled-back one: gone
