"""Every difference between database dialects, in one place.

- engine hooks (SQLite PRAGMAs on every connection, ``BEGIN IMMEDIATE`` for writes,
  ``BEGIN DEFERRED`` for reads; engine disposal after ``fork``),
- the database clock as a SQL expression compiled per dialect,
- how a claim picks rows (``FOR UPDATE SKIP LOCKED`` in a ``MATERIALIZED`` CTE on
  PostgreSQL; a plain subquery inside a ``BEGIN IMMEDIATE`` transaction on SQLite),
  and how many rows a statement with ``RETURNING`` changed,
- how a claim hands each row its own lease token,
- which ``insert`` construct offers ``on_conflict_do_update``.

Nothing outside this module asks which database it is talking to.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy
from sqlalchemy import BigInteger, Integer, String, Text, cast, event, literal, type_coerce
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import FromClause, Select
from sqlalchemy.sql.elements import ColumnElement, Grouping
from sqlalchemy.sql.functions import FunctionElement

from sqlq_orm.errors import InvalidInput, SqlqError

DEFAULT_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite connection waits for the write lock before giving up."""

SQLITE_BEGIN_OPTION = "sqlq_sqlite_begin"
"""Execution option naming the ``BEGIN`` mode of a SQLite transaction."""

_BEGIN_MODES = frozenset({"IMMEDIATE", "DEFERRED", "EXCLUSIVE"})
_HOOKED_ATTR = "_sqlq_hooks_installed"


# --------------------------------------------------------------------------- clock


class epoch_now(FunctionElement[int]):  # noqa: N801 - reads like the SQL function it is
    """The database's current time as integer UTC epoch seconds."""

    type = BigInteger()
    name = "epoch_now"
    inherit_cache = True


@compiles(epoch_now)
def _epoch_now_default(element: epoch_now, compiler: Any, **kw: Any) -> str:
    raise CompileError(
        f"sqlq_orm has no database clock for dialect {compiler.dialect.name!r}; "
        "use SQLite or PostgreSQL, or pass a clock explicitly"
    )


@compiles(epoch_now, "sqlite")
def _epoch_now_sqlite(element: epoch_now, compiler: Any, **kw: Any) -> str:
    return "CAST(strftime('%s', 'now') AS INTEGER)"


@compiles(epoch_now, "postgresql")
def _epoch_now_postgresql(element: epoch_now, compiler: Any, **kw: Any) -> str:
    # CURRENT_TIMESTAMP is fixed for the transaction: one transition, one time.
    return "CAST(FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP)) AS BIGINT)"


# --------------------------------------------------------------------- engine hooks


def is_sqlite_file(url: sqlalchemy.URL) -> bool:
    """Tell whether a SQLite URL names a file (WAL only applies to files)."""
    database = url.database or ""
    return bool(database) and database != ":memory:" and "mode=memory" not in database


def _install_sqlite_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    use_wal = is_sqlite_file(engine.url)

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
        mode = connection.get_execution_options().get(SQLITE_BEGIN_OPTION, "IMMEDIATE")
        if mode not in _BEGIN_MODES:
            raise InvalidInput(f"{SQLITE_BEGIN_OPTION} must be one of {sorted(_BEGIN_MODES)}")
        connection.exec_driver_sql(f"BEGIN {mode}")


def _install_fork_guard(engine: Engine) -> None:
    # A pooled connection inherited across fork() is shared with the parent and
    # corrupts both; the child drops its copies without closing the parent's.
    ref = weakref.ref(engine)

    def _after_fork_in_child() -> None:
        inherited = ref()
        if inherited is not None:
            inherited.dispose(close=False)

    os.register_at_fork(after_in_child=_after_fork_in_child)


def configure_engine(engine: Engine, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> Engine:
    """Install sqlq_orm's hooks on an existing engine (a host app's) and return it.

    On SQLite every new pooled connection gets ``foreign_keys=ON``,
    ``journal_mode=WAL`` (file databases), ``busy_timeout`` and
    ``synchronous=NORMAL``, and transactions begin with ``BEGIN IMMEDIATE`` unless
    the connection asks for a read (see :func:`read_options`). Connections already
    in the pool are not touched, so call this before the engine is first used.
    Calling it twice is harmless.
    """
    if getattr(engine, _HOOKED_ATTR, False):
        return engine
    if engine.dialect.name == "sqlite":
        _install_sqlite_hooks(engine, busy_timeout_ms)
    _install_fork_guard(engine)
    setattr(engine, _HOOKED_ATTR, True)
    return engine


def create_engine(
    url: str | sqlalchemy.URL,
    *,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    **kwargs: Any,
) -> Engine:
    """Create a SQLAlchemy engine with sqlq_orm's hooks installed.

    Keyword arguments go to :func:`sqlalchemy.create_engine`. A PostgreSQL URL with
    no driver uses psycopg 3.
    """
    parsed = sqlalchemy.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    engine = sqlalchemy.create_engine(parsed, **kwargs)
    return configure_engine(engine, busy_timeout_ms=busy_timeout_ms)


# ------------------------------------------------------------- per-dialect support


@dataclass(frozen=True)
class DialectSupport:
    """What the service needs to know about one dialect."""

    name: str
    insert: Callable[..., Any]
    """``insert`` construct with ``on_conflict_do_update`` / ``do_nothing``."""
    read_options: dict[str, Any]
    """Execution options for a read-only transaction."""
    lock_rows: Callable[[Select[Any], bool], Select[Any]]
    """Make a claim's candidate ``SELECT`` lock what it reads (``skip_locked``: pass
    over rows another transaction holds instead of waiting for them)."""
    pick: Callable[[Select[Any], str], FromClause]
    """Wrap the claim's ``SELECT ... LIMIT n`` so an ``UPDATE ... FROM`` can use it."""
    token_for_row: Callable[[ColumnElement[int]], ColumnElement[str]]
    """Expression picking row ``rn``'s token (1-based) out of the ``tokens`` param."""
    bind_tokens: Callable[[Sequence[str]], Any]
    """Turn a list of tokens into the value bound to the ``tokens`` param."""
    rows_changed: Callable[[Connection, Any], int]
    """How many rows the statement that produced ``result`` changed (all fetched)."""
    snapshot_options: dict[str, Any] = field(default_factory=dict)
    """Execution options for a read-only transaction whose statements all see one
    snapshot (several queries that must agree, e.g. :mod:`sqlq_orm.invariants`)."""


def _lock_rows_sqlite(select: Select[Any], skip_locked: bool) -> Select[Any]:
    # BEGIN IMMEDIATE already serialises writers: nothing to lock row by row.
    return select


def _lock_rows_postgresql(select: Select[Any], skip_locked: bool) -> Select[Any]:
    return select.with_for_update(skip_locked=skip_locked)


def _pick_sqlite(select: Select[Any], name: str) -> FromClause:
    return select.subquery(name)


def _pick_postgresql(select: Select[Any], name: str) -> FromClause:
    # MATERIALIZED: evaluate the locking SELECT exactly once. Inlined as
    # "IN (SELECT ... LIMIT n)" it may be re-run and claim more than n rows.
    return select.cte(name).prefix_with("MATERIALIZED")


def _rows_changed_sqlite(connection: Connection, result: Any) -> int:
    # pysqlite reports rowcount 0 for a statement with RETURNING; SQLite itself knows.
    return int(connection.exec_driver_sql("SELECT changes()").scalar_one())


def _token_sqlite(rn: ColumnElement[int]) -> ColumnElement[str]:
    path = literal("$[") + cast(rn - 1, String) + literal("]")
    return cast(
        sqlalchemy.func.json_extract(sqlalchemy.bindparam("tokens", type_=Text), path), String
    )


def _token_postgresql(rn: ColumnElement[int]) -> ColumnElement[str]:
    tokens = sqlalchemy.bindparam("tokens", type_=postgresql.ARRAY(Text))
    # (CAST(:tokens AS TEXT[]))[rn]: the parentheses are required before a subscript.
    array = type_coerce(Grouping(cast(tokens, postgresql.ARRAY(Text))), postgresql.ARRAY(Text))
    return array[rn]


_SUPPORT: dict[str, DialectSupport] = {
    "sqlite": DialectSupport(
        name="sqlite",
        insert=sqlite.insert,
        read_options={SQLITE_BEGIN_OPTION: "DEFERRED"},
        pick=_pick_sqlite,
        token_for_row=_token_sqlite,
        bind_tokens=lambda tokens: json.dumps(list(tokens)),
        lock_rows=_lock_rows_sqlite,
        rows_changed=_rows_changed_sqlite,
        # A WAL reader keeps the snapshot of its first read until the transaction ends.
        snapshot_options={SQLITE_BEGIN_OPTION: "DEFERRED"},
    ),
    "postgresql": DialectSupport(
        name="postgresql",
        insert=postgresql.insert,
        read_options={},  # MVCC: reads never block writers
        pick=_pick_postgresql,
        token_for_row=_token_postgresql,
        bind_tokens=list,
        lock_rows=_lock_rows_postgresql,
        rows_changed=lambda connection, result: int(result.rowcount),
        # READ COMMITTED takes a new snapshot per statement; checks that join several
        # queries would see a job move between them and report a false violation.
        snapshot_options={"isolation_level": "REPEATABLE READ"},
    ),
}


def support_for(dialect: Dialect | Engine) -> DialectSupport:
    """Return the support record for an engine's dialect, or raise a clear error."""
    name = dialect.dialect.name if isinstance(dialect, Engine) else dialect.name
    try:
        return _SUPPORT[name]
    except KeyError:
        raise InvalidInput(
            f"sqlq_orm supports SQLite and PostgreSQL; got dialect {name!r}"
        ) from None


def row_number() -> ColumnElement[int]:
    """``row_number() OVER ()``, typed as an integer (same on every dialect)."""
    return sqlalchemy.func.row_number(type_=Integer).over()


# ------------------------------------------------------------------ schema changes


@contextmanager
def foreign_keys_suspended(connection: Connection) -> Iterator[None]:
    """Run a schema change on ``connection`` with SQLite's foreign key enforcement off.

    Alembic's batch mode alters a SQLite table by copying it, dropping the original
    and renaming the copy. With enforcement on, dropping ``sqlq_jobs`` would cascade
    and silently delete every attempt and event. SQLite ignores the pragma inside a
    transaction, so enter this before the migration's transaction begins, and call
    :func:`check_foreign_keys` before it commits. On other databases it does nothing.
    """
    if connection.dialect.name != "sqlite" or connection.in_transaction():
        yield
        return
    driver_connection: Any = connection.connection.driver_connection
    driver_connection.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        driver_connection.execute("PRAGMA foreign_keys = ON")


MIGRATION_LOCK_KEY = 0x5351_4C51  # "SQLQ": one advisory lock id for schema changes


def lock_for_migration(connection: Connection) -> None:
    """Serialise schema changes: call first thing inside the migration transaction.

    Two first-time upgrades at once would otherwise both create the version table on
    PostgreSQL, and one would fail. A transaction-scoped advisory lock makes the second
    wait and then find the work done. SQLite needs nothing: its migration transaction
    begins IMMEDIATE and so already holds the database's single write lock.
    """
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")


def check_foreign_keys(connection: Connection) -> None:
    """Raise :class:`SqlqError` if a row breaks a foreign key (SQLite only).

    Other databases check foreign keys on every statement and never let one through.
    """
    if connection.dialect.name != "sqlite":
        return
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        tables = sorted({row[0] for row in broken})
        raise SqlqError(
            f"the schema change left {len(broken)} row(s) breaking a foreign key in "
            f"{', '.join(tables)}; it was rolled back"
        )


# -------------------------------------------------------------------- maintenance


def foreign_keys_enforced(connection: Connection) -> bool:
    """Tell whether ``ON DELETE CASCADE`` fires on this connection.

    SQLite enforces foreign keys only on connections that ran ``PRAGMA foreign_keys
    = ON`` (the engine hooks do it on each); PostgreSQL always enforces them.
    """
    if connection.dialect.name != "sqlite":
        return True
    return bool(connection.exec_driver_sql("PRAGMA foreign_keys").scalar())


@dataclass(frozen=True)
class MaintenanceStatement:
    """The statement one maintenance task runs on a dialect (``sql`` None: not needed)."""

    task: str
    sql: str | None
    note: str


def maintenance_statement(engine: Engine, task: str, tables: Sequence[Any]) -> MaintenanceStatement:
    """Return what ``task`` ("checkpoint" or "vacuum") means on ``engine``'s database."""
    name = engine.dialect.name
    if task not in ("checkpoint", "vacuum"):
        raise InvalidInput(f"unknown maintenance task {task!r}; use 'checkpoint' or 'vacuum'")
    if name == "sqlite":
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
    if name == "postgresql":
        if task == "checkpoint":
            return MaintenanceStatement(
                task, None, "PostgreSQL checkpoints its write-ahead log itself; nothing to do"
            )
        preparer = engine.dialect.identifier_preparer
        listed = ", ".join(preparer.format_table(table) for table in tables)
        return MaintenanceStatement(
            task,
            f"VACUUM (ANALYZE) {listed}",
            "made dead rows' space reusable and refreshed planner statistics "
            "(the files do not shrink; VACUUM FULL would, under an exclusive lock)",
        )
    support_for(engine)  # raises the clear "unsupported dialect" error
    raise AssertionError("unreachable")


def run_outside_transaction(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    """Run one statement that must not be inside a transaction (VACUUM, checkpoints).

    Uses a raw pooled connection in the driver's autocommit mode, so SQLAlchemy's
    ``begin`` hook (``BEGIN IMMEDIATE`` on SQLite) never wraps it.
    """
    raw = engine.raw_connection()
    try:
        driver: Any = raw.driver_connection
        if engine.dialect.name == "postgresql":
            attribute, autocommit = "autocommit", True
        else:  # pysqlite: isolation_level None is autocommit
            attribute, autocommit = "isolation_level", None
        previous = getattr(driver, attribute)
        setattr(driver, attribute, autocommit)
        try:
            cursor = raw.cursor()
            try:
                cursor.execute(sql)
                return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
            finally:
                cursor.close()
        finally:
            setattr(driver, attribute, previous)
    finally:
        raw.close()
