"""Enqueueing: one job and its ENQUEUED event, atomically; in bulk; inside the
caller's own transaction; idempotently with a dedupe key; with the app's columns."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, event, func, insert, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sqlq_orm import (
    EnqueuedJob,
    JobAttemptMixin,
    JobEventMixin,
    JobMixin,
    JobSpec,
    Models,
    PinnedClock,
    Queue,
    WorkerRecord,
)
from sqlq_orm.schema.models import Job
from tests.conftest import PINNED_START as T0
from tests.support.queue_helpers import (
    event_names,
    is_sqlite,
    job_row,
    row_counts,
    second_engine,
    snapshot,
    statements_seen,
)


def test_enqueue_writes_the_job_and_its_event(queue, engine):
    job = queue.enqueue(
        "send_email", {"to": "a@example.com"}, queue="mail", priority=5, max_retries=7,
        max_runtime_seconds=120, payload_ref="s3://bucket/body.html",
    )  # fmt: skip

    state = snapshot(engine, job.id)
    row = state["job"]
    assert job.created
    assert (row["queue"], row["type"], row["status"], row["priority"]) == (
        "mail", "send_email", "QUEUED", 5,
    )  # fmt: skip
    assert json.loads(row["payload"]) == {"to": "a@example.com"}
    assert (row["created_at"], row["run_at"], row["max_retries"]) == (T0, T0, 7)
    assert (row["max_runtime_seconds"], row["payload_ref"]) == (120, "s3://bucket/body.html")
    assert [(e["event"], e["ts"], json.loads(e["detail"])) for e in state["events"]] == [
        ("ENQUEUED", T0, {"queue": "mail", "type": "send_email"})
    ]


def test_delay_and_run_at_hold_a_job_back(queue, engine, clock):
    delayed = queue.enqueue("a", delay=60)
    scheduled = queue.enqueue("b", run_at=datetime.fromtimestamp(T0 + 30, tz=UTC))

    assert (job_row(engine, delayed.id).run_at, job_row(engine, scheduled.id).run_at) == (
        T0 + 61,
        T0 + 30,
    )  # fmt: skip  (a delay counts from a truncated "now": one more second, never early)
    assert queue.claim("worker-a") == []
    clock.advance(30)
    assert [lease.job_id for lease in queue.claim("worker-a", limit=5)] == [scheduled.id]


def test_enqueue_many_writes_thousands_of_jobs_and_events_in_a_few_statements(queue, engine):
    specs = [JobSpec("thumbnail", {"n": n}, priority=n % 3) for n in range(3000)]
    with statements_seen(engine) as seen:
        ids = queue.enqueue_many(specs)

    writes = [s for s in seen if s.lstrip().upper().startswith("INSERT")]
    assert len(ids) == len(set(ids)) == 3000
    assert len(writes) <= 10, f"{len(writes)} INSERT statements for 3000 jobs"
    assert row_counts(engine)["sqlq_jobs"] == 3000
    with engine.connect() as connection:
        jobs = Job.__table__
        payloads = dict(connection.execute(select(jobs.c.id, jobs.c.payload)).all())
    assert [json.loads(payloads[i])["n"] for i in ids] == list(range(3000))  # ids in order
    assert event_names(engine, ids[-1]) == ["ENQUEUED"]
    assert row_counts(engine)["sqlq_job_events"] == 3000


def test_enqueue_many_writes_nothing_when_one_job_is_bad(queue, engine):
    before = row_counts(engine)
    with pytest.raises(Exception, match=r"job #2 of enqueue_many: type must be a non-empty"):
        queue.enqueue_many([{"type": "a"}, {"type": "b"}, {"type": ""}])
    assert row_counts(engine) == before


# ----------------------------------------------------------- caller's transaction

app_metadata = MetaData()
orders = Table(
    "app_orders",
    app_metadata,
    Column("id", Integer, primary_key=True),
    Column("total", Integer, nullable=False),
)


def _order_count(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(orders)).scalar_one()


def test_enqueue_in_a_rolled_back_session_leaves_no_job_and_no_event(queue, engine):
    app_metadata.create_all(engine)
    before = row_counts(engine)
    with Session(engine) as session:
        session.execute(insert(orders).values(id=1, total=42))
        job = queue.enqueue("email_receipt", {"order": 1}, session=session)
        session.rollback()

    assert job.created
    assert row_counts(engine) == before
    assert _order_count(engine) == 0


def test_enqueue_in_a_committed_session_commits_with_the_apps_own_row(queue, engine):
    app_metadata.create_all(engine)
    with Session(engine) as session:
        session.execute(insert(orders).values(id=1, total=42))
        job = queue.enqueue("email_receipt", {"order": 1}, session=session)
        session.commit()

    assert _order_count(engine) == 1
    assert job_row(engine, job.id).status == "QUEUED"
    assert event_names(engine, job.id) == ["ENQUEUED"]


# -------------------------------------------------------------------- dedupe


def test_enqueue_with_a_live_dedupe_key_returns_the_existing_job(queue, engine):
    first = queue.enqueue("sync", {"v": 1}, dedupe_key="account-7")
    second = queue.enqueue("sync", {"v": 2}, dedupe_key="account-7")

    assert (first.created, second.created, second.id) == (True, False, first.id)
    assert row_counts(engine)["sqlq_jobs"] == 1
    assert event_names(engine, first.id) == ["ENQUEUED"]
    assert json.loads(job_row(engine, first.id).payload) == {"v": 1}


def test_a_dedupe_key_is_free_again_once_its_job_has_finished(queue, engine):
    first = queue.enqueue("sync", dedupe_key="account-7")
    held = queue.enqueue("sync", dedupe_key="account-7")  # while running: same job
    (lease,) = queue.claim("worker-a", start=True)
    while_running = queue.enqueue("sync", dedupe_key="account-7")
    queue.succeed(lease)
    after = queue.enqueue("sync", dedupe_key="account-7")

    assert held.id == while_running.id == first.id
    assert after.created and after.id != first.id
    assert job_row(engine, after.id).status == "QUEUED"


def test_enqueue_survives_the_duplicate_finishing_between_insert_and_lookup(db_url, engine, clock):
    if is_sqlite(engine):
        pytest.skip("SQLite serialises writers: nothing can finish between the two statements")
    if engine.dialect.name in ("mysql", "mariadb"):
        pytest.skip(
            "InnoDB keeps a shared lock on the duplicate's index entry until the enqueue "
            "commits: the duplicate cannot finish between the two statements"
        )
    enqueuer_engine = second_engine(db_url)
    enqueuer, other = Queue(enqueuer_engine, clock=clock), Queue(engine, clock=clock)
    existing = other.enqueue("sync", dedupe_key="account-7")
    cancelled = []

    @event.listens_for(enqueuer_engine, "after_cursor_execute")
    def cancel_the_duplicate(conn, cursor, statement, params, context, executemany):
        # Right after our insert found the live duplicate, it finishes elsewhere.
        if "ON CONFLICT" in statement and cursor.rowcount == 0 and not cancelled:
            other.cancel(existing.id)
            cancelled.append(existing.id)

    job = enqueuer.enqueue("sync", dedupe_key="account-7")

    assert cancelled == [existing.id]
    assert job.created and job.id != existing.id
    assert event_names(engine, job.id) == ["ENQUEUED"]
    enqueuer_engine.dispose()


# --------------------------------------------------------------- app columns


class HostBase(DeclarativeBase):
    pass


class HostJob(JobMixin, HostBase):
    __tablename__ = "host_jobs"
    __sqlq_attempt_model__ = "HostAttempt"
    __sqlq_event_model__ = "HostEvent"
    tenant: Mapped[str | None] = mapped_column(String(50))


class HostAttempt(JobAttemptMixin, HostBase):
    __tablename__ = "host_job_attempts"
    __sqlq_job_table__ = "host_jobs"
    __sqlq_job_model__ = "HostJob"


class HostEvent(JobEventMixin, HostBase):
    __tablename__ = "host_job_events"
    __sqlq_job_table__ = "host_jobs"
    __sqlq_job_model__ = "HostJob"


def test_enqueue_fills_a_column_the_app_added_to_its_job_model(engine):
    HostBase.metadata.create_all(engine)
    host_queue = Queue(
        engine,
        clock=PinnedClock(T0),
        models=Models(job=HostJob, attempt=HostAttempt, event=HostEvent, worker=WorkerRecord),
    )
    job = host_queue.enqueue("bill", tenant="acme")

    with engine.connect() as connection:
        tenant = connection.execute(
            select(HostJob.__table__.c.tenant).where(HostJob.__table__.c.id == job.id)
        ).scalar_one()
    assert tenant == "acme"
    assert host_queue.get_job(job.id).events[0].event == "ENQUEUED"


def _host_queue(engine) -> Queue:
    HostBase.metadata.create_all(engine)
    return Queue(
        engine,
        clock=PinnedClock(T0),
        models=Models(job=HostJob, attempt=HostAttempt, event=HostEvent, worker=WorkerRecord),
    )


def _tenants(engine, ids: list[int]) -> list[str | None]:
    jobs = HostJob.__table__
    with engine.connect() as connection:
        rows = connection.execute(select(jobs.c.id, jobs.c.tenant).where(jobs.c.id.in_(ids)))
        found = {job_id: tenant for job_id, tenant in rows}
    return [found[i] for i in ids]


def test_enqueue_many_fills_app_columns_given_by_name_or_in_columns(engine):
    host_queue = _host_queue(engine)

    ids = host_queue.enqueue_many(
        [
            {"type": "bill", "tenant": "acme"},
            JobSpec("bill", columns={"tenant": "globex"}),
            {"type": "bill"},
            {"type": "bill", "tenant": "initech", "priority": 3},
        ]
    )

    assert len(set(ids)) == 4
    assert _tenants(engine, ids) == ["acme", "globex", None, "initech"]
    assert [host_queue.get_job(i).events[0].event for i in ids] == ["ENQUEUED"] * 4


def test_enqueue_many_refuses_an_unknown_column_naming_the_job(queue, engine):
    with pytest.raises(Exception, match=r"job #1 of enqueue_many: unknown job column\(s\) \['x'\]"):
        queue.enqueue_many([{"type": "a"}, {"type": "b", "x": 1}])

    assert row_counts(engine)["sqlq_jobs"] == 0


def test_enqueue_many_with_dedupe_keys_returns_the_holder_of_a_live_key(queue, engine):
    held = queue.enqueue("sync", dedupe_key="account-7")

    ids = queue.enqueue_many(
        [
            {"type": "sync", "dedupe_key": "account-7"},  # held before the batch
            {"type": "sync", "dedupe_key": "account-8"},  # new
            {"type": "sync"},
            {"type": "sync", "dedupe_key": "account-8"},  # held earlier in this batch
        ]
    )

    assert ids[0] == held.id and ids[3] == ids[1]
    assert len({held.id, ids[1], ids[2]}) == 3
    assert row_counts(engine)["sqlq_jobs"] == 3
    assert [event_names(engine, i) for i in (held.id, ids[1], ids[2])] == [["ENQUEUED"]] * 3


# ------------------------------------ one result type for every enqueue (issue 22, item 11)


def test_every_enqueue_call_returns_enqueued_jobs_that_are_their_ids(queue):
    held = queue.enqueue("sync", dedupe_key="account-7")

    many = queue.enqueue_many([{"type": "sync", "dedupe_key": "account-7"}, JobSpec("a")])
    chain = queue.enqueue_chain([JobSpec("extract"), JobSpec("load")])
    fan_in = queue.enqueue_fan_in([JobSpec("part")], then=JobSpec("merge"))

    jobs = [held, *many, *chain, *fan_in]
    assert all(isinstance(job, EnqueuedJob) for job in jobs)
    assert [job.created for job in jobs] == [True, False, True, True, True, True, True]
    assert many[0] == held == held.id and type(held.id) is int
    assert [int(job) for job in jobs] == [job.id for job in jobs]
    assert f"job {held}" == f"job {held.id}" and json.dumps(many) == json.dumps(
        [j.id for j in many]
    )
    queue.cancel(chain[0])  # an EnqueuedJob goes wherever a job id does
    assert queue.get_job(chain[1]).status == "CANCELLED"
    assert queue.dependencies_of(fan_in[1])[0][0].id == fan_in[0]
