"""MariaDB/MySQL: the queue's writes run at READ COMMITTED, its snapshots at REPEATABLE
READ, on an engine from ``sqlq_orm.create_engine`` (READ COMMITTED throughout, no
isolation statement per transaction) and on a host app's engine at the server's
default (``SET TRANSACTION`` before each queue write, nothing left behind).

READ COMMITTED is seen by what it does: a second read in the same transaction sees a
row another session committed after the first; REPEATABLE READ does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy
from sqlalchemy.engine import Connection, Engine

import sqlq_orm
from sqlq_orm import Queue
from sqlq_orm.schema.models import Base

ENGINES: dict[str, Callable[[str], Engine]] = {
    "create_engine": lambda url: sqlq_orm.create_engine(url, pool_size=1, max_overflow=0),
    "host_engine": lambda url: sqlalchemy.create_engine(url, pool_size=1, max_overflow=0),
    "create_engine_repeatable_read": lambda url: sqlq_orm.create_engine(
        url, pool_size=1, max_overflow=0, isolation_level="REPEATABLE READ"
    ),
}


@pytest.fixture(params=list(ENGINES))
def mysql_engine(request: pytest.FixtureRequest, db_url: str) -> Iterator[Engine]:
    """One pooled connection, so session counters and settings are that connection's."""
    if sqlalchemy.make_url(db_url).get_backend_name() not in ("mysql", "mariadb"):
        pytest.skip("MariaDB/MySQL isolation")
    engine = ENGINES[request.param](db_url)
    Base.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE probe (id INT) ENGINE=InnoDB")
    yield engine
    engine.dispose()


def _sees_a_row_committed_in_between(engine: Engine, connection: Connection) -> bool:
    """Read, commit a row from another session, read again: did the count change?"""
    before = connection.exec_driver_sql("SELECT count(*) FROM probe").scalar_one()
    other = sqlalchemy.create_engine(engine.url)
    with other.begin() as elsewhere:
        elsewhere.exec_driver_sql("INSERT INTO probe VALUES (1)")
    other.dispose()
    return connection.exec_driver_sql("SELECT count(*) FROM probe").scalar_one() != before


def _session_level(engine: Engine) -> str:
    with engine.connect() as connection:
        return str(connection.exec_driver_sql("SELECT @@tx_isolation").scalar_one())


def test_queue_writes_read_committed(mysql_engine):
    context = Queue(mysql_engine).context
    with context.write() as connection:
        assert _sees_a_row_committed_in_between(mysql_engine, connection)


def test_snapshots_stay_repeatable_read(mysql_engine):
    context = Queue(mysql_engine).context
    with context.snapshot() as connection:
        assert not _sees_a_row_committed_in_between(mysql_engine, connection)


def test_the_engine_keeps_its_own_level_for_everything_else(mysql_engine):
    level = _session_level(mysql_engine)
    queue = Queue(mysql_engine)
    queue.enqueue("render")
    queue.counts_by_status()
    with queue.context.snapshot():
        pass
    assert _session_level(mysql_engine) == level
    with mysql_engine.begin() as connection:  # the app's own transaction
        assert _sees_a_row_committed_in_between(mysql_engine, connection) == (
            level == "READ-COMMITTED"
        )


def test_isolation_statements_only_where_the_engine_is_at_another_level(mysql_engine):
    queue = Queue(mysql_engine)
    queue.enqueue("warm-up")  # the pool's one connection exists from here on

    def set_statements() -> int:
        with mysql_engine.connect() as connection:
            return int(
                connection.exec_driver_sql("SHOW SESSION STATUS LIKE 'Com_set_option'").one()[1]
            )

    before = set_statements()
    for number in range(5):
        queue.enqueue("render", {"n": number})
    sets = set_statements() - before
    at_read_committed = _session_level(mysql_engine) == "READ-COMMITTED"
    # One SET TRANSACTION per write where needed (SQLAlchemy's isolation_level option
    # would be SET SESSION at checkout and again at check-in).
    assert sets == (0 if at_read_committed else 5)
