"""SQLite engine hooks: PRAGMAs on every pooled connection, BEGIN IMMEDIATE for the
queue's writes (and SQLite's own DEFERRED for everything else on the engine, such as an
app's sessions), reads that never take the write lock, and two processes writing one
file at once.

These are SQLite behaviours, so the tests use a SQLite file of their own. Where a
test needs a lock to be refused, the engine's busy_timeout is short so the refusal
comes quickly; "database is locked" is the assertion, never a duration.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm.db.backends import backend_for
from sqlq_orm.db.engine import DEFAULT_BUSY_TIMEOUT_MS
from sqlq_orm.schema.models import Base, Job, JobEvent

SHORT_BUSY_TIMEOUT_MS = 200


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'queue.db'}"


@pytest.fixture
def impatient_engine(sqlite_url) -> Iterator[Engine]:
    """A hooked engine that gives up on a held write lock after 200 ms."""
    engine = sqlq_orm.create_engine(sqlite_url, busy_timeout_ms=SHORT_BUSY_TIMEOUT_MS)
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def pragma(dbapi_connection, name: str):
    return dbapi_connection.execute(f"PRAGMA {name}").fetchone()[0]


def test_every_pooled_sqlite_connection_gets_the_pragmas(sqlite_url):
    engine = sqlq_orm.create_engine(sqlite_url)
    checked_out = [engine.raw_connection() for _ in range(3)]

    seen = [
        {
            "foreign_keys": pragma(c.driver_connection, "foreign_keys"),
            "journal_mode": pragma(c.driver_connection, "journal_mode"),
            "busy_timeout": pragma(c.driver_connection, "busy_timeout"),
            "synchronous": pragma(c.driver_connection, "synchronous"),
            "driver_transactions": c.driver_connection.isolation_level,
        }
        for c in checked_out
    ]

    expected = {
        "foreign_keys": 1,
        "journal_mode": "wal",
        "busy_timeout": DEFAULT_BUSY_TIMEOUT_MS,
        "synchronous": 1,  # NORMAL
        "driver_transactions": None,  # pysqlite's own BEGIN handling is off
    }
    assert len({id(c.driver_connection) for c in checked_out}) == 3
    assert seen == [expected] * 3
    for connection in checked_out:
        connection.close()
    engine.dispose()


def test_configure_engine_hooks_a_host_apps_engine(sqlite_url):
    import sqlalchemy

    engine = sqlq_orm.configure_engine(sqlalchemy.create_engine(sqlite_url))

    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


def queue_writes(engine: Engine) -> Engine:
    """The engine as the queue's write transactions use it."""
    return engine.execution_options(**backend_for(engine).write_options)


def test_a_queue_write_transaction_takes_the_write_lock_when_it_begins(impatient_engine):
    # The first transaction runs no statement: only its BEGIN IMMEDIATE holds the lock.
    with (
        queue_writes(impatient_engine).begin(),
        queue_writes(impatient_engine).connect() as second,
        pytest.raises(OperationalError, match="database is locked"),
    ):
        second.begin()


def test_two_app_sessions_on_the_queues_engine_read_at_the_same_time(impatient_engine):
    # An app that uses sqlq's engine for its own sessions must not be serialised
    # behind BEGIN IMMEDIATE: two read-only sessions, both open, both read.
    with Session(impatient_engine) as first, Session(impatient_engine) as second:
        first.execute(select(func.count()).select_from(Job)).scalar_one()
        assert second.execute(select(func.count()).select_from(Job)).scalar_one() == 0
        first.execute(select(func.count()).select_from(Job)).scalar_one()


def test_an_app_session_that_writes_waits_for_the_queue_then_commits(impatient_engine):
    queue = sqlq_orm.Queue(impatient_engine, clock=sqlq_orm.PinnedClock(1_700_000_000))

    with Session(impatient_engine) as session, session.begin():
        queue.enqueue("from_the_app", session=session)  # first write takes the lock

    assert queue.counts_by_status()["QUEUED"] == 1


def test_a_read_proceeds_while_another_connection_holds_a_write(impatient_engine):
    queue = sqlq_orm.Queue(impatient_engine, clock=sqlq_orm.PinnedClock(1_700_000_000))
    queue.enqueue("committed")

    with queue_writes(impatient_engine).begin() as writer:
        writer.execute(
            text(
                "INSERT INTO sqlq_jobs (queue, type, status, priority, created_at, run_at,"
                " attempt_count, retry_count, max_retries)"
                " VALUES ('default', 'uncommitted', 'QUEUED', 0, 0, 0, 0, 0, 3)"
            )
        )
        with queue.read() as reader:
            seen = reader.scalars(select(Job.type)).all()
        counts = queue.counts_by_status()

    assert seen == ["committed"]
    assert counts["QUEUED"] == 1


def test_an_open_read_does_not_stop_a_writer_from_committing(impatient_engine):
    queue = sqlq_orm.Queue(impatient_engine, clock=sqlq_orm.PinnedClock(1_700_000_000))

    with queue.read() as reader:
        before = reader.scalar(select(func.count()).select_from(Job))
        queue.enqueue("written_during_a_read")
        still_before = reader.scalar(select(func.count()).select_from(Job))

    assert (before, still_before) == (0, 0)  # the reader keeps its snapshot
    assert queue.counts_by_status()["QUEUED"] == 1


# ------------------------------------------------------------ two processes

JOBS_PER_PROCESS = 150


def enqueue_many_times(url: str, name: str, start: Any, errors: Any) -> None:
    """Child process: many small write transactions (and some reads) on one file."""
    try:
        engine = sqlq_orm.create_engine(url)
        queue = sqlq_orm.Queue(engine)
        start.wait(timeout=60)
        for n in range(JOBS_PER_PROCESS):
            queue.enqueue(f"from_{name}", {"n": n})
            if n % 10 == 0:
                queue.counts_by_status()
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        errors.put(f"{name}: {type(exc).__name__}: {exc}")


def test_two_processes_writing_at_once_never_see_database_is_locked(sqlite_url):
    engine = sqlq_orm.create_engine(sqlite_url)
    Base.metadata.create_all(engine)
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    errors = context.Queue()
    processes = [
        context.Process(target=enqueue_many_times, args=(sqlite_url, name, start, errors))
        for name in ("a", "b")
    ]

    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)

    reported = []
    while not errors.empty():
        reported.append(errors.get(timeout=1))
    assert reported == []
    assert [p.exitcode for p in processes] == [0, 0]
    with engine.connect() as connection:
        per_type = dict(connection.execute(select(Job.type, func.count()).group_by(Job.type)).all())
        events = connection.scalar(select(func.count()).select_from(JobEvent))
    assert per_type == {"from_a": JOBS_PER_PROCESS, "from_b": JOBS_PER_PROCESS}
    assert events == 2 * JOBS_PER_PROCESS
    engine.dispose()


def test_a_queue_given_a_plain_sqlite_engine_installs_the_hooks_and_says_so(sqlite_url):
    import sqlalchemy

    engine = sqlalchemy.create_engine(sqlite_url)
    with engine.connect() as connection:  # the app used it before handing it over
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 0
    Base.metadata.create_all(engine)

    with pytest.warns(sqlq_orm.SqlqWarning, match="without sqlq_orm's connection settings"):
        queue = sqlq_orm.Queue(engine)

    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    job = queue.enqueue("t")
    with engine.begin() as connection:  # ON DELETE CASCADE fires now
        connection.exec_driver_sql(f"DELETE FROM sqlq_jobs WHERE id = {job.id}")
        assert connection.exec_driver_sql("SELECT count(*) FROM sqlq_job_events").scalar() == 0
    engine.dispose()


def test_a_queue_given_a_configured_engine_says_nothing(sqlite_url, recwarn):
    engine = sqlq_orm.create_engine(sqlite_url)
    Base.metadata.create_all(engine)

    sqlq_orm.Queue(engine)
    sqlq_orm.Queue(engine)

    assert [w for w in recwarn if issubclass(w.category, sqlq_orm.SqlqWarning)] == []
    engine.dispose()


def test_a_mysql_connection_waits_for_queries_without_the_greeting_timeout(engine):
    """The greeting is read with the connect timeout (issue 23, item 12); the queries
    after it must not inherit that timeout (a lock wait can be longer)."""
    if engine.dialect.driver != "pymysql":
        pytest.skip("PyMySQL's greeting timeout")
    with engine.connect() as connection:
        raw = connection.connection.dbapi_connection

        assert raw._read_timeout is None and raw._sock.gettimeout() is None
        assert connection.exec_driver_sql("SELECT SLEEP(0)").scalar() == 0
