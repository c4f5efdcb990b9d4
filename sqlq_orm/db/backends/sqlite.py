"""SQLite: PRAGMAs on every connection, ``BEGIN IMMEDIATE`` for writes, one writer.

A claim needs no row locks here: its transaction begins ``IMMEDIATE`` and so holds
the database's single write lock. Foreign keys are enforced per connection (the
hooks turn them on), which is why a table rebuild must turn them off first.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy
from sqlalchemy import String, Table, Text, cast, event, literal, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn
from sqlalchemy.sql import FromClause, Select
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.backends import sqlite_rebuilds
from sqlq_orm.db.backends.base import Backend, MaintenanceStatement, WakeListener
from sqlq_orm.db.clock import epoch_now
from sqlq_orm.db.driver_sql import run_on_cursor
from sqlq_orm.db.write_locks import BUSY_TIMEOUT_OPTION
from sqlq_orm.errors import InvalidInput

BEGIN_OPTION = "sqlq_sqlite_begin"

"""Execution option naming the ``BEGIN`` mode of a SQLite transaction."""

_BEGIN_MODES = frozenset({"IMMEDIATE", "DEFERRED", "EXCLUSIVE"})

_DROP_TABLE = re.compile(
    r"""^\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:[`"\[]?\w+[`"\]]?\.)?[`"\[]?(\w+)[`"\]]?""",
    re.IGNORECASE,
)
_CREATE_INDEX = re.compile(
    r"""^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?[`"\[]?(\w+)""",
    re.IGNORECASE,
)
_SORT_WORDS = re.compile(r"\b(?:ASC|DESC)\b|[`\"\[\]\s]", re.IGNORECASE)


# Every SQLite engine in the process, a host's env.py's included (see the module).
sqlite_rebuilds.install()


@compiles(epoch_now, "sqlite")
def _epoch_now(element: epoch_now, compiler: Any, **kw: Any) -> str:
    return "CAST(strftime('%s', 'now') AS INTEGER)"


@compiles(CreateColumn, "sqlite")
def _create_column(create: Any, compiler: Any, **kw: Any) -> str | None:
    # With sqlite_autoincrement the primary key can only be declared on its column,
    # where SQLAlchemy leaves out its name: keep it (pk_sqlq_jobs), as a table-level
    # constraint would have it, so models, migrations and reflection agree.
    text: str | None = compiler.visit_create_column(create, **kw)
    column = create.element
    if text is None or not column.primary_key or " AUTOINCREMENT" not in text:
        return text
    name = compiler.preparer.format_constraint(column.table.primary_key)
    if not name:
        return text
    return text.replace(" PRIMARY KEY", f" CONSTRAINT {name} PRIMARY KEY", 1)


def is_file(url: sqlalchemy.URL) -> bool:
    """Tell whether a SQLite URL names a file (WAL only applies to files)."""
    database = url.database or ""
    return bool(database) and database != ":memory:" and "mode=memory" not in database


def install_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    """PRAGMAs on every new connection; ``BEGIN`` in the mode the connection asks for."""
    use_wal = is_file(engine.url)
    engine.update_execution_options(**{BUSY_TIMEOUT_OPTION: int(busy_timeout_ms)})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        # Switch pysqlite's own transaction handling off: it would otherwise BEGIN
        # (DEFERRED) on its own schedule and defeat BEGIN IMMEDIATE below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first, so switching to WAL waits instead of failing.
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if use_wal:
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # A DEFERRED transaction that reads and then writes fails at once with
        # "database is locked" if another writer got in between, ignoring
        # busy_timeout; IMMEDIATE takes the write lock up front and waits for it.
        # The queue asks for IMMEDIATE on its own writes (Backend.write_options); any
        # other transaction on the engine (an app's session) begins DEFERRED, as
        # SQLite's own default, so two readers never wait for each other.
        mode = connection.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
        if mode not in _BEGIN_MODES:
            raise InvalidInput(f"{BEGIN_OPTION} must be one of {sorted(_BEGIN_MODES)}")
        # On the cursor, not through exec_driver_sql: every write transaction starts
        # here, and the listeners see it just the same (driver_sql.run_on_cursor).
        if run_on_cursor(connection, f"BEGIN {mode}") is None:
            connection.exec_driver_sql(f"BEGIN {mode}")

    @event.listens_for(engine, "before_cursor_execute")
    def _on_execute(
        connection: Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        match = _DROP_TABLE.match(statement)
        if match is not None:
            _refuse_silent_cascade(connection, match.group(1))


def _refuse_silent_cascade(connection: Connection, table: str) -> None:
    """Raise :class:`SqlqError` if dropping ``table`` now would change other tables' rows.

    With foreign keys ON, SQLite's ``DROP TABLE`` first deletes every row, so rows that
    reference it ``ON DELETE CASCADE`` go too (``SET NULL``: lose the reference), with no
    error. Alembic's batch mode rebuilds a table by dropping it: a host migration
    that alters ``sqlq_jobs`` would delete every attempt and event. (On every SQLite
    engine, sqlq's job tables are guarded by :mod:`.sqlite_rebuilds` too.)
    """
    # A DBAPI cursor, not the driver's connection: aiosqlite's would need awaiting.
    cursor = connection.connection.cursor()
    try:
        if not cursor.execute("PRAGMA foreign_keys").fetchone()[0]:
            return
        hit = sqlite_rebuilds.rows_that_would_cascade(cursor, table)
    finally:
        cursor.close()
    if hit:
        raise sqlite_rebuilds.refuse_cascading_drop(table, hit)


def _lock_rows(select: Select[Any], skip_locked: bool) -> Select[Any]:
    # BEGIN IMMEDIATE already serialises writers: nothing to lock row by row.
    return select


def _pick(select: Select[Any], name: str) -> FromClause:
    return select.subquery(name)


def _rows_changed(connection: Connection, result: Any) -> int:
    # Once the rows of an ``UPDATE ... RETURNING`` are read, Python's sqlite3 (3.11 on)
    # has the statement's count of changes in the cursor's rowcount (SQLAlchemy reads
    # rowcount before the rows, so ``result.rowcount`` says 0). The caller reads the
    # rows first; only where the cursor has no count does SQLite get asked itself,
    # saving the claim a statement.
    cursor = getattr(getattr(result, "context", None), "cursor", None)
    counted = getattr(cursor, "rowcount", -1)
    if isinstance(counted, int) and counted > 0:
        return counted
    return int(connection.exec_driver_sql("SELECT changes()").scalar_one())


def _token_for_row(rn: ColumnElement[int]) -> ColumnElement[str]:
    path = literal("$[") + cast(rn - 1, String) + literal("]")
    return cast(
        sqlalchemy.func.json_extract(sqlalchemy.bindparam("tokens", type_=Text), path), String
    )


def _foreign_keys_enforced(connection: Connection) -> bool:
    # Enforced only on connections that ran PRAGMA foreign_keys = ON (the hooks do).
    return bool(connection.exec_driver_sql("PRAGMA foreign_keys").scalar())


def _foreign_key_problems(connection: Connection) -> list[str]:
    # One entry per offending row: the table it is in.
    return [row[0] for row in connection.exec_driver_sql("PRAGMA foreign_key_check").all()]


@contextmanager
def _suspend_foreign_keys(connection: Connection) -> Iterator[None]:
    # Alembic's batch mode alters a table by copying it, dropping the original and
    # renaming the copy; with enforcement on, dropping sqlq_jobs would cascade and
    # delete every attempt and event. SQLite ignores the pragma inside a transaction.
    if connection.in_transaction():
        yield
        return
    _driver_sql(connection, "PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        _driver_sql(connection, "PRAGMA foreign_keys = ON")


def _driver_sql(connection: Connection, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
    """Run ``sql`` on the DBAPI connection under ``connection``, outside SQLAlchemy's
    transaction bookkeeping. Through a DBAPI cursor, which every driver makes
    synchronous (aiosqlite's own connection would return coroutines here)."""
    cursor = connection.connection.cursor()
    try:
        cursor.execute(sql, parameters)
        return list(cursor.fetchall()) if cursor.description else []
    finally:
        cursor.close()


def _autoincrement_missing(connection: Connection, table: str) -> bool:
    created = connection.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).scalar()
    return created is not None and re.search(r"\bAUTOINCREMENT\b", created, re.I) is None


def _lock_for_migration(connection: Connection) -> None:
    # The migration's transaction must be a real one, so a failed step leaves nothing
    # behind: sqlq's begin hook sends BEGIN IMMEDIATE, but a plain engine (Alembic's
    # templates, sync or async) leaves pysqlite/aiosqlite to begin one only before the
    # first INSERT/UPDATE/DELETE, running the DDL before it outside any transaction.
    if not getattr(connection.connection.driver_connection, "in_transaction", True):
        _driver_sql(connection, "BEGIN IMMEDIATE")


def _descending_index_columns(connection: Connection, table: str, index: str) -> set[str] | None:
    # SQLAlchemy's SQLite reflection drops DESC; index_xinfo keeps it. Rows: seqno,
    # cid, name, desc, collation, key (key columns only, not the rowid).
    rows = connection.exec_driver_sql(f'PRAGMA index_xinfo("{index}")').all()
    if not rows:
        return None
    return {row[2] for row in rows if row[5] and row[3] and row[2] is not None}


@contextmanager
def _keep_index_order(connection: Connection) -> Iterator[None]:
    # Alembic's batch mode recreates a rebuilt table's indexes from SQLAlchemy's
    # reflection, which drops DESC: the claim index would come back ascending and the
    # claim would sort in a temporary B-tree. When a table is dropped, remember its
    # indexes' CREATE statements; when one comes back under the same name with the
    # same columns but no sort order, run the remembered statement instead.
    dropped: dict[str, str] = {}

    def _before_execute(
        conn: Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> tuple[str, Any]:
        drop = _DROP_TABLE.match(statement)
        if drop is not None:
            rows = _driver_sql(
                conn,
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                "AND sql IS NOT NULL",
                (drop.group(1),),
            )
            dropped.update({name: sql for name, sql in rows})
            return statement, parameters
        create = _CREATE_INDEX.match(statement)
        if create is not None:
            original = dropped.pop(create.group(1), None)
            if original is not None and _without_sort_order(original) == _without_sort_order(
                statement
            ):
                return original, parameters
        return statement, parameters

    event.listen(connection, "before_cursor_execute", _before_execute, retval=True)
    try:
        yield
    finally:
        event.remove(connection, "before_cursor_execute", _before_execute)


def _without_sort_order(create_index: str) -> str:
    return _SORT_WORDS.sub("", create_index).lower()


def _maintenance(engine: Engine, task: str, tables: Sequence[Any]) -> MaintenanceStatement:
    if task == "checkpoint":
        return MaintenanceStatement(
            task,
            "PRAGMA wal_checkpoint(TRUNCATE)",
            "copied the WAL into the database file and truncated it "
            "(output: busy, WAL pages, pages checkpointed; busy=1 means a reader held it)",
        )
    return MaintenanceStatement(
        task,
        "VACUUM",
        "rewrote the database file to return free pages to the file system "
        "(exclusive lock for its whole run: off-peak work)",
    )


_DATA_VERSION_POLL = 0.01  # seconds between two looks at PRAGMA data_version


class _DataVersionWatch:
    """A connection of its own that notices other connections' commits.

    ``PRAGMA data_version`` changes on a connection whenever another connection has
    committed a change to the database file; reading it takes no lock and costs
    next to nothing. A transaction that changes nothing (an empty claim) leaves it
    alone, so a worker's own idle claims do not wake it.
    """

    def __init__(self, engine: Engine, poll_seconds: float = _DATA_VERSION_POLL) -> None:
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        # The standard library's driver whatever the engine's (aiosqlite's would need
        # an event loop): this connection is read from a thread of its own.
        self._connection = sqlite3.connect(*cargs, **cparams)  # type: ignore[call-overload]
        self._connection.isolation_level = None  # no transaction: each read is fresh
        self._poll = poll_seconds
        self._path = str(cargs[0])
        self._file = _file_identity(self._path)
        self._version = self._read()

    def _read(self) -> int:
        return int(self._connection.execute("PRAGMA data_version").fetchone()[0])

    def wait(self, timeout: float) -> frozenset[str] | None:
        # A file deleted and made again at the same path (a test's or bench's fresh
        # database) would leave this connection watching the old one, hearing nothing:
        # fail instead, so the caller opens a new watch (and polls meanwhile).
        if _file_identity(self._path) != self._file:
            raise OSError(f"the SQLite database file {self._path} was replaced")
        deadline = time.monotonic() + timeout
        while True:
            version = self._read()
            if version != self._version:
                self._version = version
                return None  # a commit somewhere: which queue, SQLite cannot say
            left = deadline - time.monotonic()
            if left <= 0:
                return frozenset()
            time.sleep(min(left, self._poll))

    def close(self) -> None:
        self._connection.close()


def _file_identity(path: str) -> tuple[int, int] | None:
    """The file's device and inode (None: no such file, or a ``file:`` URI)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _open_wake_listener(
    engine: Engine,
    channel: str,
    poll_seconds: float = _DATA_VERSION_POLL,
    mark: tuple[int, int] | None = None,
) -> WakeListener | None:
    # mark is PostgreSQL's: every commit changes data_version, no one need ask for it.
    if not is_file(engine.url):
        return None  # an in-memory database is private to its connection
    return _DataVersionWatch(engine, poll_seconds)


def _table_bytes(connection: Connection, tables: Sequence[Table]) -> dict[str, int]:
    """Each table with its indexes from ``dbstat`` where SQLite was built with it;
    otherwise nothing per table (the caller still has the file's size)."""
    names = ", ".join(f":t{i}" for i in range(len(tables)))
    statement = text(
        "SELECT s.tbl_name, SUM(d.pgsize) FROM dbstat AS d"
        " JOIN sqlite_schema AS s ON s.name = d.name"
        f" WHERE d.aggregate = 1 AND s.tbl_name IN ({names}) GROUP BY s.tbl_name"
    )
    try:
        rows = connection.execute(statement, {f"t{i}": t.name for i, t in enumerate(tables)})
        return {str(name): int(size) for name, size in rows}
    except OperationalError:  # no dbstat in this build
        return {}


def _file_bytes(connection: Connection) -> int:
    pages = connection.exec_driver_sql("PRAGMA page_count").scalar_one()
    size = connection.exec_driver_sql("PRAGMA page_size").scalar_one()
    return int(pages) * int(size)


PROGRESS_STEPS = 1000
"""SQLite virtual-machine instructions between two looks at a time-limited read's clock."""


@contextmanager
def _time_limited(connection: Connection, seconds: float) -> Iterator[None]:
    # SQLite has no statement timeout: a progress handler, called every
    # PROGRESS_STEPS instructions, interrupts the statement once its deadline passed
    # (sqlite3.OperationalError "interrupted").
    deadline = time.monotonic() + max(0.0, seconds)
    raw: Any = connection.connection.dbapi_connection
    raw.set_progress_handler(lambda: time.monotonic() >= deadline, PROGRESS_STEPS)
    try:
        yield
    finally:
        raw.set_progress_handler(None, 0)


def is_out_of_time(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement interrupted by :func:`_time_limited`."""
    orig = getattr(exc, "orig", exc)
    return isinstance(orig, sqlite3.OperationalError) and "interrupted" in str(orig)


BACKEND = Backend(
    name="sqlite",
    table_bytes=_table_bytes,
    database_bytes=_file_bytes,
    title="SQLite",
    insert=sqlite.insert,
    read_options={BEGIN_OPTION: "DEFERRED"},
    write_options={BEGIN_OPTION: "IMMEDIATE"},
    pick=_pick,
    token_for_row=_token_for_row,
    bind_tokens=lambda tokens: json.dumps(list(tokens)),
    lock_rows=_lock_rows,
    rows_changed=_rows_changed,
    maintenance=_maintenance,
    autocommit=("isolation_level", None),  # pysqlite: isolation_level None is autocommit
    # A WAL reader keeps the snapshot of its first read until the transaction ends.
    snapshot_options={BEGIN_OPTION: "DEFERRED"},
    install_hooks=install_hooks,
    foreign_keys_enforced=_foreign_keys_enforced,
    foreign_key_problems=_foreign_key_problems,
    suspend_foreign_keys=_suspend_foreign_keys,
    lock_for_migration=_lock_for_migration,
    autoincrement_missing=_autoincrement_missing,
    connections_share_database=is_file,
    needs_hooks=True,
    serialize_writes=True,
    keep_index_order=_keep_index_order,
    descending_index_columns=_descending_index_columns,
    open_wake_listener=_open_wake_listener,
    prebuilt_as_driver_sql=True,
    time_limited=_time_limited,
    is_out_of_time=is_out_of_time,
)
