"""Enqueue edge cases a new user met (issue #11): prepared statements and the dedupe
index, input Python cannot encode, a dedupe key reused for another job, a session on
another database, fractional ``run_at``."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
import sqlalchemy
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm import DedupeConflict, InvalidInput, Queue
from tests.conftest import PINNED_START as T0
from tests.support.backends import engine_for
from tests.support.queue_helpers import job_row, row_counts

# ------------------------------------------- dedupe on one long-lived connection


def _one_connection_queue(db_url: str, clock: sqlq_orm.PinnedClock) -> Queue:
    # One pooled connection: on PostgreSQL psycopg prepares a statement after its 5th
    # run on a connection, and the generic plan of a predicate with bound parameters
    # cannot be matched to the partial unique index ON CONFLICT names.
    engine = engine_for(db_url, pool_size=1, max_overflow=0)
    return Queue(engine, clock=clock)


def test_forty_dedupe_enqueues_on_one_connection_all_succeed(db_url, engine, clock):
    queue = _one_connection_queue(db_url, clock)
    created = [queue.enqueue("sync", dedupe_key=f"key-{n}").created for n in range(40)]
    again = [queue.enqueue("sync", dedupe_key=f"key-{n}").created for n in range(40)]

    assert created == [True] * 40 and again == [False] * 40
    assert row_counts(engine)["sqlq_jobs"] == 40
    queue.engine.dispose()


def test_forty_dedupe_enqueues_in_the_callers_session_all_commit(db_url, engine, clock):
    queue = _one_connection_queue(db_url, clock)
    with Session(queue.engine) as session, session.begin():
        ids = [queue.enqueue("sync", dedupe_key=f"k{n}", session=session).id for n in range(40)]
        duplicates = [queue.enqueue("sync", dedupe_key=f"k{n}", session=session) for n in range(5)]

    assert [d.id for d in duplicates] == ids[:5]
    assert row_counts(engine)["sqlq_jobs"] == 40
    queue.engine.dispose()


# ------------------------------------------------- text Python cannot encode


@pytest.mark.parametrize("argument", ["type", "queue", "dedupe_key", "payload_ref"])
def test_a_lone_surrogate_in_a_name_is_refused_naming_it(queue, engine, argument):
    arguments = {"type": "t", argument: "bad\ud800name"}

    with pytest.raises(InvalidInput, match=f"{argument} is not valid Unicode.*ud800"):
        queue.enqueue(arguments.pop("type"), **arguments)

    assert row_counts(engine)["sqlq_jobs"] == 0


def test_a_lone_surrogate_in_a_payload_is_refused(queue, engine):
    with pytest.raises(InvalidInput, match="payload is not valid Unicode"):
        queue.enqueue("t", {"text": "half a pair: \udc80"})

    assert row_counts(engine)["sqlq_jobs"] == 0


def test_a_lone_surrogate_in_a_worker_id_is_refused_and_nothing_is_claimed(queue):
    job = queue.enqueue("t")

    with pytest.raises(InvalidInput, match="worker_id is not valid Unicode"):
        queue.claim("worker-\ud800")

    assert queue.get_job(job.id).status == "QUEUED"


def test_a_payload_nested_five_thousand_deep_is_refused(queue, engine):
    payload: list = []
    for _ in range(5000):
        payload = [payload]

    with pytest.raises(InvalidInput, match="payload is nested too deeply"):
        queue.enqueue("t", payload)

    assert row_counts(engine)["sqlq_jobs"] == 0


def test_a_bulk_enqueue_with_a_deep_payload_is_refused_by_position(queue, engine):
    payload: dict = {}
    for _ in range(5000):
        payload = {"x": payload}

    with pytest.raises(InvalidInput, match="job #1 of enqueue_many: payload is nested too deeply"):
        queue.enqueue_many([{"type": "ok"}, {"type": "t", "payload": payload}])

    assert row_counts(engine)["sqlq_jobs"] == 0


# ------------------------------------------------- a dedupe key names one job


@pytest.mark.parametrize(
    "other, what",
    [({"type": "report"}, "type 'report'"), ({"type": "sync", "queue": "bulk"}, "queue 'bulk'")],
)
def test_the_same_dedupe_key_for_a_different_job_is_refused(queue, engine, other, what):
    first = queue.enqueue("sync", dedupe_key="account-7")
    other = dict(other)
    kind = other.pop("type")

    with pytest.raises(DedupeConflict, match=f"dedupe_key 'account-7'.*job {first.id}.*{what}"):
        queue.enqueue(kind, dedupe_key="account-7", **other)

    assert row_counts(engine)["sqlq_jobs"] == 1


def test_the_same_dedupe_key_and_job_with_another_payload_returns_the_existing_job(queue):
    first = queue.enqueue("sync", {"v": 1}, dedupe_key="account-7")
    second = queue.enqueue("sync", {"v": 2}, dedupe_key="account-7")

    assert (second.id, second.created) == (first.id, False)


# ------------------------------------------- a session on another database


def test_a_session_bound_to_another_database_is_refused(queue, engine, tmp_path):
    elsewhere = sqlq_orm.create_engine(f"sqlite:///{tmp_path / 'other.db'}")
    sqlq_orm.migrate.upgrade(elsewhere)

    refused = pytest.raises(InvalidInput, match="session is bound to .*other.db.*not the queue's")
    with Session(elsewhere) as session, session.begin(), refused:
        queue.enqueue("t", session=session)

    assert row_counts(engine)["sqlq_jobs"] == 0
    with elsewhere.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM sqlq_jobs").scalar() == 0
    elsewhere.dispose()


def test_a_session_on_another_engine_for_the_same_database_is_accepted(db_url, queue, engine):
    app_engine = sqlalchemy.create_engine(db_url)  # the app's own engine, same database
    with Session(app_engine) as session, session.begin():
        job = queue.enqueue("t", session=session)

    assert job_row(engine, job.id).status == "QUEUED"
    app_engine.dispose()


# ------------------------------------------------------------ fractional run_at


def test_a_float_run_at_is_accepted_and_never_runs_early(queue, engine, clock):
    job = queue.enqueue("t", run_at=T0 + 60.25)

    assert job_row(engine, job.id).run_at == T0 + 61
    clock.advance(60)
    assert queue.claim("worker-a") == []
    clock.advance(1)
    assert [lease.job_id for lease in queue.claim("worker-a")] == [job.id]


def test_an_aware_datetime_with_microseconds_rounds_up_too(queue, engine):
    when = datetime.fromtimestamp(T0 + 10, tz=UTC).replace(microsecond=500_000)
    job = queue.enqueue("t", run_at=when)

    assert job_row(engine, job.id).run_at == T0 + 11


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.5, True])
def test_a_run_at_that_is_no_time_is_refused(queue, engine, bad):
    with pytest.raises(InvalidInput, match="run_at"):
        queue.enqueue("t", run_at=bad)

    assert row_counts(engine)["sqlq_jobs"] == 0
