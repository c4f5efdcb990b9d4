"""One queue's database context: engine, tables, dialect, clock, statements, transactions.

Everything that runs SQL for a queue takes a :class:`QueueContext`: the queue
operations (:mod:`sqlq_orm.queue`), the stats, timeline, retention and invariant
readers (:mod:`sqlq_orm.ops`). Nothing below the queue layer needs to know the
:class:`~sqlq_orm.Queue` class itself, which is what keeps imports pointing one way.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.orm import Session

from sqlq_orm.core import validation
from sqlq_orm.db.backends import Backend, backend_for
from sqlq_orm.db.backends.base import AFTER_TRANSACTION
from sqlq_orm.db.clock import Clock, DatabaseClock
from sqlq_orm.db.engine import DEFAULT_BUSY_TIMEOUT_MS, adopt_engine
from sqlq_orm.db.statements import Statements
from sqlq_orm.db.tables import Models, Tables
from sqlq_orm.db.wakeups import Wakeups, wakeups_for
from sqlq_orm.db.write_locks import BUSY_TIMEOUT_OPTION, taking_turns, write_lock_for
from sqlq_orm.errors import InvalidInput


class QueueContext:
    """The database side of one queue: what to run, where, and in which transaction.

    ``engine`` must carry sqlq's hooks (:func:`sqlq_orm.configure_engine`); ``models``
    names the mapped classes (the library's by default, or a host app's); ``clock``
    says "now" in SQL (the database's own clock unless a test pins one). ``schema``
    puts the tables in a schema of that name (PostgreSQL; a database on MariaDB).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        models: Models | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        adopt_engine(engine)
        self.engine = engine
        self.models = models or Models.default()
        self.clock = clock or DatabaseClock()
        self.dialect: Backend = backend_for(engine)
        self.schema = schema_for(engine, schema)
        self.tables: Tables = self.models.tables(self.schema)
        self.sql = Statements(self.tables, self.dialect, self.clock.sql_now())
        # The statements name the schema; the ORM reads (the models' own tables) are
        # sent there by the translation on the queue's engines.
        in_schema = {} if self.schema is None else {"schema_translate_map": {None: self.schema}}
        self._read_engine = engine.execution_options(**self.dialect.read_options, **in_schema)
        self._write_engine = engine.execution_options(**self.dialect.write_options, **in_schema)
        self._snapshot_engine = engine.execution_options(
            **self.dialect.snapshot_options, **in_schema
        )
        self._same_database: weakref.WeakSet[Engine] = weakref.WeakSet()
        self._write_lock = write_lock_for(engine) if self.dialect.serialize_writes else None
        busy_ms = engine.get_execution_options().get(BUSY_TIMEOUT_OPTION, DEFAULT_BUSY_TIMEOUT_MS)
        self._write_lock_wait = busy_ms / 1000
        # Shared by every queue in this process on the same job table, whatever engine.
        self.wakeups: Wakeups = wakeups_for(
            (database_identity(engine.url), self.tables.jobs.fullname)
        )
        self._first_use_check: Callable[[], bool] | None = None
        self._first_use_lock = threading.Lock()
        self._first_use_thread: int | None = None

    def check_before_first_use(self, check: Callable[[], bool]) -> None:
        """Run ``check`` before the first transaction or session this context opens
        (constructing a queue never touches the database: a module-level queue imports
        without one). ``check`` returns whether it is done; until then, and while it
        raises, the next use runs it again. Its own reads do not run it."""
        self._first_use_check = check

    def _before_use(self) -> None:
        if self._first_use_check is None or self._first_use_thread == threading.get_ident():
            return
        with self._first_use_lock:
            self._run_first_use_check()

    def _run_first_use_check(self) -> None:
        check = self._first_use_check
        if check is None:
            return  # another thread ran it while this one waited
        self._first_use_thread = threading.get_ident()
        try:
            if check():
                self._first_use_check = None
        finally:
            self._first_use_thread = None

    @contextmanager
    def write(self, session: Session | None = None) -> Iterator[Connection]:
        """A write transaction: the caller's session's, or a short one of our own."""
        self._before_use()
        if session is not None:
            connection = session.connection()
            self._require_same_database(connection.engine)
            yield connection
            return
        if self._write_lock is None:
            with (
                self._write_engine.connect() as connection,
                _then_after_transaction(connection),
                connection.begin(),
            ):
                yield connection
            return
        with (
            taking_turns(self._write_lock, self._write_lock_wait),
            self._write_engine.begin() as connection,
        ):
            yield connection

    def _require_same_database(self, engine: Engine) -> None:
        """Refuse a caller's session on another database: the job would land there."""
        if engine is self.engine or engine in self._same_database:
            return
        if database_identity(engine.url) != database_identity(self.engine.url):
            raise InvalidInput(
                f"session is bound to {engine.url.render_as_string(hide_password=True)}, "
                f"not the queue's database "
                f"({self.engine.url.render_as_string(hide_password=True)}); "
                "pass a session on the queue's database, or none"
            )
        self._same_database.add(engine)

    @contextmanager
    def read(self, *, first_use_check: bool = True) -> Iterator[Connection]:
        """A read-only transaction that never takes SQLite's write lock (the check's own
        reads pass ``first_use_check=False``)."""
        if first_use_check:
            self._before_use()
        with self._read_engine.connect() as connection, connection.begin():
            yield connection

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A read-only transaction whose queries all see one snapshot.

        Like :meth:`read` (SQLite: ``BEGIN DEFERRED``, never the write lock), but on
        PostgreSQL at REPEATABLE READ, so the numbers of one report agree with each
        other (a job moving between two queries is not counted twice). A read-only
        REPEATABLE READ transaction never fails to commit.
        """
        self._before_use()
        with self._snapshot_engine.connect() as connection, connection.begin():
            yield connection

    def session(self) -> Session:
        """An ORM session for reads (``Job``, its ``attempts`` and ``events``)."""
        self._before_use()
        return Session(self._read_engine, expire_on_commit=False)

    def now(self, connection: Connection) -> int:
        """Read "now" (epoch seconds) from the queue's clock, in SQL."""
        return int(connection.execute(select(self.clock.sql_now())).scalar_one())

    def read_now(self) -> int:
        """Read "now" in a read transaction of its own."""
        with self.read() as connection:
            return self.now(connection)


@contextmanager
def _then_after_transaction(connection: Connection) -> Iterator[None]:
    """Around a transaction of our own: run what it asked to run once it has ended
    (:func:`~sqlq_orm.db.backends.base.after_transaction`, e.g. letting go of MySQL
    named locks), committed or rolled back. A call that fails invalidates the
    connection: the session, and whatever it held, goes away with it."""
    try:
        yield
    finally:
        for call in connection.info.pop(AFTER_TRANSACTION, []):
            try:
                call(connection)
            except Exception:  # noqa: BLE001 - the transaction's own outcome comes first
                connection.invalidate()
                break


def schema_for(engine: Engine, schema: object) -> str | None:
    """``schema`` checked: a valid name, on a database that has schemas (not SQLite)."""
    name = validation.schema_name(schema)
    if name is not None and engine.dialect.name == "sqlite":
        raise InvalidInput(
            f"schema={name!r}: SQLite has no schemas; give the queue a database file of "
            "its own instead"
        )
    return name


def database_identity(url: URL) -> tuple[str, str | None]:
    """Which database a URL names, as far as the URL can tell.

    Two engines on one database may differ in driver, options and even host spelling
    (``localhost`` / ``127.0.0.1``), so a server database is named by its backend and
    database name only; a SQLite file by its real path.
    """
    database = url.database
    if url.get_backend_name() == "sqlite" and database and database != ":memory:":
        database = os.path.realpath(database)
    return url.get_backend_name(), database


class HasContext(Protocol):
    """Anything that carries a :class:`QueueContext` (a :class:`~sqlq_orm.Queue` does)."""

    @property
    def context(self) -> QueueContext: ...


def context_of(target: QueueContext | HasContext | Any) -> QueueContext:
    """The context of a Queue (or a context itself); a clear error for anything else."""
    if isinstance(target, QueueContext):
        return target
    context = getattr(target, "context", None)
    if isinstance(context, QueueContext):
        return context
    raise InvalidInput(f"expected a sqlq_orm.Queue or a QueueContext, got {target!r}")
