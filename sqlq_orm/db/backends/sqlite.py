"""SQLite: PRAGMAs on every connection, ``BEGIN IMMEDIATE`` for writes, one writer.

A claim needs no row locks here: its transaction begins ``IMMEDIATE`` and so holds
the database's single write lock. Foreign keys are enforced per connection (the
hooks turn them on), which is why a table rebuild must turn them off first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy
from sqlalchemy import String, Text, cast, event, literal
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import FromClause, Select
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.backends.base import Backend, MaintenanceStatement
from sqlq_orm.db.clock import epoch_now
from sqlq_orm.errors import InvalidInput

BEGIN_OPTION = "sqlq_sqlite_begin"
"""Execution option naming the ``BEGIN`` mode of a SQLite transaction."""

_BEGIN_MODES = frozenset({"IMMEDIATE", "DEFERRED", "EXCLUSIVE"})


@compiles(epoch_now, "sqlite")
def _epoch_now(element: epoch_now, compiler: Any, **kw: Any) -> str:
    return "CAST(strftime('%s', 'now') AS INTEGER)"


def is_file(url: sqlalchemy.URL) -> bool:
    """Tell whether a SQLite URL names a file (WAL only applies to files)."""
    database = url.database or ""
    return bool(database) and database != ":memory:" and "mode=memory" not in database


def install_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    """PRAGMAs on every new connection; ``BEGIN`` in the mode the connection asks for."""
    use_wal = is_file(engine.url)

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
        connection.exec_driver_sql(f"BEGIN {mode}")


def _lock_rows(select: Select[Any], skip_locked: bool) -> Select[Any]:
    # BEGIN IMMEDIATE already serialises writers: nothing to lock row by row.
    return select


def _pick(select: Select[Any], name: str) -> FromClause:
    return select.subquery(name)


def _rows_changed(connection: Connection, result: Any) -> int:
    # pysqlite reports rowcount 0 for a statement with RETURNING; SQLite itself knows.
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
    driver_connection: Any = connection.connection.driver_connection
    driver_connection.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        driver_connection.execute("PRAGMA foreign_keys = ON")


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


BACKEND = Backend(
    name="sqlite",
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
    connections_share_database=is_file,
)
