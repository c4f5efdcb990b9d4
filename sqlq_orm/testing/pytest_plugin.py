"""The pytest plugin: ``sqlq_*`` fixtures over :mod:`sqlq_orm.testing`.

pytest loads it by itself once sqlq_orm is installed (the ``pytest11`` entry point
``sqlq_orm``; ``-p no:sqlq_orm`` leaves it out). Every fixture is named ``sqlq_*``:

- ``sqlq_engine``: an engine on a migrated SQLite file of the test's own (copied from
  one migrated once per session). Override it in your ``conftest.py`` to return your
  app's engine (PostgreSQL, say), migrated as your app migrates it;
- ``sqlq_clock``: a :class:`~sqlq_orm.PinnedClock` at :data:`PINNED_START`, the one
  ``sqlq_queue`` uses: ``sqlq_clock.advance(60)`` moves the queue a minute on;
- ``sqlq_queue``: a :class:`~sqlq_orm.Queue` on ``sqlq_engine`` with ``sqlq_clock``;
- ``sqlq_connection``: a connection on ``sqlq_engine`` inside a transaction that is
  rolled back after the test;
- ``sqlq_session``: an ORM session on that connection
  (``join_transaction_mode="create_savepoint"``: the code under test may commit);
- ``sqlq_queue_in_transaction``: ``sqlq_queue`` working inside that transaction
  (:func:`~sqlq_orm.testing.queue_in_transaction`), for the rolled-back pattern.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.orm import Session

    from sqlq_orm.db.clock import PinnedClock
    from sqlq_orm.queue.queue import Queue

# The package is imported by the fixtures that need it, not when pytest loads the
# plugin: a test session that uses none of them (sqlq_orm's own suite, say) starts
# as it would without it.

PINNED_START = 1_700_000_000
"""Where ``sqlq_clock`` starts: 2023-11-14 22:13:20 UTC, in epoch seconds."""


@pytest.fixture(scope="session")
def sqlq_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the latest revision once per session; each test's
    ``sqlq_engine`` gets a copy."""
    from sqlq_orm import migrate
    from sqlq_orm.db.engine import create_engine

    path = tmp_path_factory.mktemp("sqlq_template") / "template.db"
    engine = create_engine(f"sqlite:///{path}")
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    return path


@pytest.fixture
def sqlq_engine(sqlq_sqlite_template: Path, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a migrated SQLite file of this test's own; override to use yours."""
    from sqlq_orm.db.engine import create_engine

    path = tmp_path / "sqlq.db"
    shutil.copyfile(sqlq_sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


@pytest.fixture
def sqlq_clock() -> PinnedClock:
    """A clock that moves only when told (``advance(seconds)``, ``set(epoch)``)."""
    from sqlq_orm.db.clock import PinnedClock

    return PinnedClock(PINNED_START)


@pytest.fixture
def sqlq_queue(sqlq_engine: Engine, sqlq_clock: PinnedClock) -> Queue:
    """A queue on ``sqlq_engine`` whose "now" is ``sqlq_clock``."""
    from sqlq_orm.queue.queue import Queue

    return Queue(sqlq_engine, clock=sqlq_clock)


@pytest.fixture
def sqlq_connection(sqlq_engine: Engine) -> Iterator[Connection]:
    """A connection inside a transaction that is rolled back after the test."""
    connection = sqlq_engine.connect()
    outer = connection.begin()
    try:
        yield connection
    finally:
        if outer.is_active:
            outer.rollback()
        connection.close()


@pytest.fixture
def sqlq_session(sqlq_connection: Connection) -> Iterator[Session]:
    """An ORM session inside the rolled-back transaction; its commits are savepoints."""
    from sqlalchemy.orm import Session

    session = Session(bind=sqlq_connection, join_transaction_mode="create_savepoint")
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def sqlq_queue_in_transaction(sqlq_queue: Queue, sqlq_connection: Connection) -> Queue:
    """``sqlq_queue`` working inside the test's rolled-back transaction."""
    from sqlq_orm.testing.transaction import queue_in_transaction

    return queue_in_transaction(sqlq_queue, sqlq_connection)
