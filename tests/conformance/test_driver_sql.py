"""SQLite's hot paths as cached driver SQL (:mod:`sqlq_orm.db.driver_sql`) do exactly
what the same statements do through SQLAlchemy Core.

Only SQLite sends them this way (``Backend.prebuilt_as_driver_sql``), so the module
uses SQLite files of its own: one queue as built, one with the driver path switched
off, the same calls on both, and the SQL the engine saw and the rows written compared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import InvalidRequestError, OperationalError

import sqlq_orm
from sqlq_orm.schema.models import Base
from tests.conftest import PINNED_START
from tests.support.queue_helpers import statements_seen

TOKEN_COLUMNS = {"lease_token"}


def _engine(path: Path) -> Engine:
    engine = sqlq_orm.create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    return engine


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    driver, core = _engine(tmp_path / "driver.db"), _engine(tmp_path / "core.db")
    yield driver, core
    driver.dispose()
    core.dispose()


def _queue(engine: Engine, clock: sqlq_orm.PinnedClock, *, driver_sql: bool) -> sqlq_orm.Queue:
    # No jitter: both queues must schedule the retry alike.
    queue = sqlq_orm.Queue(engine, clock=clock, retry_policy=sqlq_orm.RetryPolicy(jitter=0))
    assert (queue.sql._driver is not None) is queue.dialect.prebuilt_as_driver_sql
    if not driver_sql:
        queue.sql._driver = None  # every statement through connection.execute
    return queue


def _workload(queue: sqlq_orm.Queue, clock: sqlq_orm.PinnedClock) -> None:
    """One of each call on the hot paths, the clock moving between them."""
    queue.enqueue("a", {"n": 1})
    queue.enqueue("b", [1, 2], priority=5, max_runtime_seconds=60, dedupe_key="k")
    queue.enqueue("b", None, dedupe_key="k")  # a duplicate: no new job
    queue.enqueue("c", "late", delay=30)
    clock.advance(2)
    batch = queue.claim("w1", limit=2, start=True)
    assert len(batch) == 2
    assert queue.succeed_many(batch) == []
    clock.advance(40)
    (late,) = queue.claim("w2", lease_seconds=10)
    late = queue.start(late)
    queue.fail(late, "APP:BOOM", "retry me")
    clock.advance(3600)
    (again,) = queue.claim("w2")
    queue.succeed(queue.start(again), result={"ok": True})
    queue.enqueue_many([{"type": "d", "payload": {"n": n}} for n in range(5)])
    held = queue.claim("w3", limit=5, start=True)
    queue.succeed_many(held[:3])
    for lease in held[3:]:
        queue.succeed(lease)


def _rows(engine: Engine) -> dict[str, list[tuple[object, ...]]]:
    tables = {t.name: t for t in Base.metadata.sorted_tables}
    with engine.connect() as connection:
        return {
            name: [
                tuple(v for c, v in row._mapping.items() if c not in TOKEN_COLUMNS)
                for row in connection.execute(select(table).order_by(*table.primary_key))
            ]
            for name, table in tables.items()
        }


def test_the_hot_paths_send_the_same_sql_and_write_the_same_rows(engines):
    driver_engine, core_engine = engines
    seen: dict[str, list[str]] = {}
    for name, engine in (("driver", driver_engine), ("core", core_engine)):
        clock = sqlq_orm.PinnedClock(PINNED_START)
        queue = _queue(engine, clock, driver_sql=name == "driver")
        with statements_seen(engine) as statements:
            _workload(queue, clock)
        seen[name] = statements

    assert seen["driver"] == seen["core"]
    assert any(s.startswith("INSERT INTO sqlq_jobs") for s in seen["driver"])
    driver_rows, core_rows = _rows(driver_engine), _rows(core_engine)
    assert driver_rows["sqlq_jobs"], "the workload wrote no jobs"
    assert driver_rows == core_rows


def test_a_pinned_clock_is_read_on_every_call_not_once(engines):
    engine, _ = engines
    clock = sqlq_orm.PinnedClock(PINNED_START)
    queue = _queue(engine, clock, driver_sql=True)
    first = queue.enqueue("a")
    clock.advance(7)
    second = queue.enqueue("a")

    assert queue.get_job(second).created_at - queue.get_job(first).created_at == 7


def test_begin_and_the_history_run_on_the_cursor_and_listeners_still_see_them(engines):
    engine, _ = engines
    queue = _queue(engine, sqlq_orm.PinnedClock(PINNED_START), driver_sql=True)
    queue.check_schema()  # the first use's read of the schema, before listening
    seen: list[tuple[str, bool]] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        seen.append((" ".join(statement.split()[:3]), context is None))

    event.listen(engine, "before_cursor_execute", record)
    try:
        queue.enqueue("a")
        (lease,) = queue.claim("w")
        queue.succeed(queue.start(lease))
    finally:
        event.remove(engine, "before_cursor_execute", record)

    on_cursor = {statement for statement, no_context in seen if no_context}
    assert on_cursor == {
        "BEGIN IMMEDIATE",
        "INSERT INTO sqlq_job_events",
        "INSERT INTO sqlq_job_attempts",
    }
    # The claim's count of changed rows comes from its cursor: no statement for it.
    assert [s for s, _ in seen].count("BEGIN IMMEDIATE") == 4
    assert not any(statement.startswith("SELECT changes()") for statement, _ in seen)


def test_a_driver_error_on_the_cursor_is_sqlalchemys_and_rolls_the_call_back(engines):
    engine, _ = engines
    queue = _queue(engine, sqlq_orm.PinnedClock(PINNED_START), driver_sql=True)

    def break_the_event_insert(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        return statement.replace("INSERT INTO sqlq_job_events", "INSERT INTO no_such"), parameters

    event.listen(engine, "before_cursor_execute", break_the_event_insert, retval=True)
    try:
        with pytest.raises(OperationalError, match="no such table: no_such"):
            queue.enqueue("a")
    finally:
        event.remove(engine, "before_cursor_execute", break_the_event_insert)
    assert queue.counts_by_status().get("QUEUED", 0) == 0


def test_rows_changed_asks_sqlite_when_the_cursor_has_no_count(engines):
    engine, _ = engines
    queue = _queue(engine, sqlq_orm.PinnedClock(PINNED_START), driver_sql=True)
    queue.enqueue_many([{"type": "a"} for _ in range(3)])
    with engine.begin() as connection:
        update = "UPDATE sqlq_jobs SET priority = 1 WHERE id <= 2 RETURNING id"
        connection.exec_driver_sql(update).all()
        # A result whose cursor is gone (no rowcount to read): SELECT changes().
        assert queue.dialect.rows_changed(connection, object()) == 2


def test_a_missing_parameter_is_refused_as_core_refuses_it(engines):
    engine, _ = engines
    queue = _queue(engine, sqlq_orm.PinnedClock(PINNED_START), driver_sql=True)
    lease_call = {"p_id": 1}  # no p_token

    with engine.begin() as connection, pytest.raises(InvalidRequestError, match="p_token"):
        queue.sql.execute(connection, queue.sql.start, lease_call)
