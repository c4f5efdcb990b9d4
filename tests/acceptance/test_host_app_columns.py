"""A host app's own columns on the job table: bad values are the caller's bad input.

The host's job model has a required ``tenant_id`` (NOT NULL, no default), a short
``label`` and an ``order_id`` referencing its ``orders``. Every refusal is
:class:`~sqlq_orm.InvalidInput` naming the column, and nothing is written, on every
database (SQLite would otherwise store a wrong type or an over-long string silently;
PostgreSQL and MariaDB raised raw ``IntegrityError``/``DataError``). Reading a host's
tables through the library's own models (``--models`` forgotten) warns once.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from sqlalchemy import ForeignKey, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import sqlq_orm
from sqlq_orm import JobAttemptMixin, JobEventMixin, JobMixin, Models, WorkerMixin


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)


class Job(JobMixin, Base):
    tenant_id: Mapped[int] = mapped_column()
    label: Mapped[str | None] = mapped_column(String(10))
    order_id: Mapped[int | None] = mapped_column(ForeignKey("orders.id"))


class JobAttempt(JobAttemptMixin, Base):
    pass


class JobEvent(JobEventMixin, Base):
    pass


class Worker(WorkerMixin, Base):
    pass


MODELS = Models(job=Job, attempt=JobAttempt, event=JobEvent, worker=Worker)


@pytest.fixture
def host(db_url) -> Iterator[SimpleNamespace]:
    engine = sqlq_orm.create_engine(db_url)
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(Order(id=1))
        session.commit()
    yield SimpleNamespace(engine=engine, queue=sqlq_orm.Queue(engine, models=MODELS))
    engine.dispose()


def jobs(host) -> int:
    with host.engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(Job)))


BAD = {
    "a foreign key to nothing": ({"tenant_id": 7, "order_id": 999}, "order_id=999"),
    "text over the column's length": ({"tenant_id": 7, "label": "x" * 11}, "at most 10"),
    "text for an integer": ({"tenant_id": "seven"}, "holds integer values, not str"),
    "a bool for an integer": ({"tenant_id": True}, "holds integer values, not bool"),
    "a required column left out": ({"label": "a"}, "sqlq_jobs.tenant_id is required"),
    "None for a NOT NULL column": ({"tenant_id": None}, "sqlq_jobs.tenant_id is required"),
}


@pytest.mark.parametrize(("values", "named"), BAD.values(), ids=BAD.keys())
def test_a_bad_app_column_value_is_invalid_input_and_writes_nothing(host, values, named):
    # Checked before anything is written, or refused by the database and rolled back.
    with pytest.raises(sqlq_orm.InvalidInput, match=named):
        host.queue.enqueue("send_invoice", **values)
    with pytest.raises(sqlq_orm.InvalidInput, match=named):
        host.queue.enqueue_many([{"type": "ok", "tenant_id": 1}, {"type": "bad", **values}])

    assert jobs(host) == 0


def test_a_refused_value_in_the_callers_transaction_leaves_it_usable(host):
    with Session(host.engine) as session:
        session.add(Order(id=2))
        session.flush()
        with pytest.raises(sqlq_orm.InvalidInput, match="order_id=999"):
            host.queue.enqueue("send_invoice", session=session, tenant_id=7, order_id=999)
        host.queue.enqueue("send_invoice", session=session, tenant_id=7, order_id=2)
        session.commit()

    assert jobs(host) == 1


def test_good_app_column_values_are_stored(host):
    job = host.queue.enqueue("send_invoice", tenant_id=7, label="x" * 10, order_id=1)

    with Session(host.engine) as session:
        stored = session.get(Job, job.id)
        assert (stored.tenant_id, stored.label, stored.order_id) == (7, "x" * 10, 1)


def test_the_library_models_on_a_host_table_warn_once_about_the_columns_they_miss(host):
    optional = [sqlq_orm.ScheduleRecord.__table__, sqlq_orm.JobDependency.__table__]
    sqlq_orm.Base.metadata.create_all(host.engine, tables=optional)  # the library's have them

    with pytest.warns(sqlq_orm.SqlqWarning, match="label, order_id, tenant_id") as warned:
        sqlq_orm.Queue(host.engine).counts_by_status()  # at the first use
    assert "models=MODELS" in str(warned[0].message)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sqlq_orm.Queue(host.engine).counts_by_status()  # once per engine
        sqlq_orm.Queue(host.engine, models=MODELS).counts_by_status()  # all mapped


def test_lists_and_bulk_actions_filter_by_the_apps_columns_and_a_concurrency_key(host):
    from sqlq_orm.ops.joblist import JobFilter, list_jobs

    queue = host.queue
    seven = [queue.enqueue("send_invoice", tenant_id=7).id for _ in range(3)]
    eight = queue.enqueue("send_invoice", tenant_id=8, label="vip").id
    keyed = queue.enqueue(
        "send_invoice", tenant_id=8, concurrency_key="acct:1", concurrency_limit=1
    ).id

    def listed(**fields):
        return sorted(j.id for j in list_jobs(queue, JobFilter(**fields)).jobs)

    assert listed(columns={"tenant_id": 7}) == seven
    assert listed(columns={"tenant_id": 8, "label": "vip"}) == [eight]
    assert listed(columns={"tenant_id": 8, "label": None}) == [keyed]
    assert listed(concurrency_key="acct:1") == [keyed]
    assert listed(concurrency_key="acct:2") == []

    dry = queue.cancel_jobs(JobFilter(columns={"tenant_id": 7}), dry_run=True)
    assert (dry.matched, dry.acted) == (3, 0)
    done = queue.cancel_jobs(JobFilter(columns={"tenant_id": 7}))
    assert (done.matched, done.acted) == (3, 3)
    assert {queue.get_job(n).status for n in seven} == {"CANCELLED"}
    assert {queue.get_job(n).status for n in (eight, keyed)} == {"QUEUED"}


@pytest.mark.parametrize(
    ("columns", "named"),
    [
        ({"tenant": 7}, r"'tenant' is not one of the app's columns on sqlq_jobs \(those are: "
         r"label, order_id, tenant_id\)"),
        ({"status": "QUEUED"}, "'status' is not one of the app's columns"),
        ({}, "columns must be a non-empty mapping"),
        ({"tenant_id": [7]}, r"columns\['tenant_id'\] must be a string, a number or None"),
    ],
)  # fmt: skip
def test_a_column_filter_naming_no_app_column_is_refused_naming_it(host, columns, named):
    from sqlq_orm.ops.joblist import JobFilter, list_jobs

    host.queue.enqueue("send_invoice", tenant_id=7)
    with pytest.raises(sqlq_orm.InvalidInput, match=named):
        list_jobs(host.queue, JobFilter(columns=columns))
    with pytest.raises(sqlq_orm.InvalidInput, match=named):
        host.queue.cancel_jobs(JobFilter(columns=columns))
    assert host.queue.get_job(1).status == "QUEUED"


def test_a_typed_task_takes_app_column_values_through_options(host):
    # The recipe of docs/howto/app-columns.md.
    registry = sqlq_orm.TaskRegistry(host.queue)
    seen = []

    @registry.task(name="send_invoice")
    def send_invoice(ctx: sqlq_orm.JobContext, order_id: int) -> None:
        seen.append((order_id, ctx.columns["tenant_id"], ctx.columns["order_id"]))

    with Session(host.engine) as session:
        invoice = send_invoice.options(columns={"tenant_id": 7, "order_id": 1}, session=session)
        job = invoice.enqueue(order_id=1)
        session.commit()
    with pytest.raises(sqlq_orm.InvalidInput, match="sqlq_jobs.tenant_id is required"):
        send_invoice.enqueue(order_id=1)  # the options above did not change the task
    sqlq_orm.Worker(host.queue, registry, burst=True).run()

    assert seen == [(1, 7, 1)]
    assert json.loads(host.queue.get_job(job.id).payload) == {"order_id": 1}  # not the columns
