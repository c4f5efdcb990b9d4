"""MariaDB (10.6+) and MySQL (8.0+): InnoDB at READ COMMITTED, no ``UPDATE ... RETURNING``.

The queue's writes run at READ COMMITTED: an engine from :func:`sqlq_orm.create_engine`
runs there throughout; on a host app's engine at another level, each queue write
transaction asks for it with ``SET TRANSACTION`` (:func:`install_hooks`).

MariaDB has ``INSERT ... RETURNING`` but no ``UPDATE ... RETURNING`` (MySQL has
neither for UPDATE), so the statements that read back what they changed lock the rows
(``SELECT ... FOR UPDATE [SKIP LOCKED]``), update them by id and read them again, in
the caller's transaction (:mod:`sqlq_orm.db.statements.returning`). Upserts go through
``ON DUPLICATE KEY UPDATE``. A partial unique index (one live job per dedupe key) is
emulated by a unique index over a generated column that holds the key only while the
index's predicate holds, and is NULL otherwise (InnoDB allows any number of NULLs).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import String, Table, cast, event, func, literal, literal_column, text
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import CompileError, IntegrityError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex, Index
from sqlalchemy.sql import FromClause, Select
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.sqltypes import NullType

from sqlq_orm.db.backends.base import Backend, MaintenanceStatement, after_transaction
from sqlq_orm.db.clock import epoch_now
from sqlq_orm.errors import SqlqError
from sqlq_orm.schema.mixins import DEDUPE_KEY_MAX

DIALECTS = ("mysql", "mariadb")
"""SQLAlchemy names both (``mysql+pymysql://`` and ``mariadb+pymysql://``)."""

MIGRATION_LOCK = "sqlq_migration"
MIGRATION_LOCK_WAIT_SECONDS = 600
IDENTIFIER_MAX = 64

ER_DUP_ENTRY = 1062
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
RETRYABLE_ERRORS = frozenset({ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK})
"""Errors after which the whole transaction can run again: InnoDB rolled back the
deadlock victim's transaction (1213); the queue rolls back its own after a lock wait
timeout (1205), which InnoDB only undoes for the one statement."""


def _epoch_now(element: epoch_now, compiler: Any, **kw: Any) -> str:
    # Evaluated once per statement (MariaDB has no transaction timestamp).
    return "UNIX_TIMESTAMP()"


@functools.cache
def insert_class() -> type[Any]:
    """MySQL's ``INSERT ... ON DUPLICATE KEY UPDATE`` under the names the statements use.

    Made on first use: SQLAlchemy's MySQL dialect is imported where it is needed, not
    with the package (an app on another database never pays for it).
    """
    from sqlalchemy.dialects import mysql

    class Insert(mysql.Insert):
        """MySQL's ``INSERT ... ON DUPLICATE KEY UPDATE`` under the names the statements use.

        ``on_conflict_do_update(index_elements=, set_=)`` and ``excluded`` are PostgreSQL's
        and SQLite's spelling; MySQL has no conflict target (any unique key conflicts) and
        names the proposed row ``inserted``. Never ``REPLACE``: it deletes the old row,
        cascading to its children.
        """

        inherit_cache = True

        @property
        def excluded(self) -> Any:
            """The row the insert proposed (``VALUES(col)`` / ``inserted`` in MySQL)."""
            return self.inserted

        def on_conflict_do_update(self, *, index_elements: Sequence[Any], set_: Any) -> Any:
            """Update ``set_`` on a duplicate key (the unique key is the table's only one
            besides the primary key, so ``index_elements`` names it). Assignments keep the
            order of ``set_``: MySQL runs them left to right, later ones seeing earlier
            ones' new values."""
            pairs = list(set_.items()) if isinstance(set_, dict) else set_
            return self.on_duplicate_key_update(pairs)

        def on_conflict_do_nothing(self, **kw: Any) -> Any:
            """Refused: ``ON DUPLICATE KEY UPDATE id = id`` still returns the existing row
            from ``RETURNING``, so a skipped insert would look like a new one. The queue
            uses :attr:`Backend.is_duplicate_key` (a savepoint) instead."""
            raise CompileError(
                "MySQL cannot skip a conflicting insert and say so; see is_duplicate_key"
            )

    return Insert


def _insert(table: Any) -> Any:
    return insert_class()(table)


def _lock_rows(select: Select[Any], skip_locked: bool) -> Select[Any]:
    return select.with_for_update(skip_locked=skip_locked)


def _pick(select: Select[Any], name: str) -> FromClause:
    return select.subquery(name)


def _by_primary_key(update: Update) -> Update:
    for dialect in DIALECTS:
        update = update.with_hint("FORCE INDEX (PRIMARY)", dialect_name=dialect)
    return update


def _in_claim_order(select: Select[Any], jobs: Table) -> Select[Any]:
    claim_index = next(index.name for index in jobs.indexes if str(index.name).endswith("_claim"))
    for dialect in DIALECTS:
        select = select.with_hint(jobs, f"FORCE INDEX ({claim_index})", dialect_name=dialect)
    return select


def _plain_cte(select: Select[Any], name: str) -> FromClause:
    return select.cte(name)  # MariaDB has no MATERIALIZED keyword


def _derived(select: Select[Any]) -> Select[Any]:
    # "IN (SELECT ... LIMIT n)" is refused (1235), and so is reading the table a DELETE
    # changes (1093); a derived table is materialised first, which allows both.
    derived = select.subquery("limited")
    return sa_select(*derived.c)


def _token_for_row(rn: ColumnElement[int]) -> ColumnElement[str]:
    # JSON_VALUE('["t1","t2"]', '$[rn-1]'): the unquoted string at that position.
    from sqlalchemy import bindparam

    path = func.concat(literal("$["), cast(rn - 1, String), literal("]"))
    return func.json_value(bindparam("tokens", type_=String), path, type_=String)


def _error_number(exc: BaseException) -> int | None:
    orig = getattr(exc, "orig", exc)
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_duplicate_key(exc: BaseException) -> bool:
    """Whether ``exc`` (a SQLAlchemy or driver error) is MySQL's duplicate-key error."""
    return _error_number(exc) == ER_DUP_ENTRY


def is_deadlock(exc: BaseException) -> bool:
    """Whether ``exc`` is a deadlock (1213): InnoDB rolled the whole transaction back."""
    return _error_number(exc) == ER_LOCK_DEADLOCK


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a deadlock (1213) or lock wait timeout (1205)."""
    return _error_number(exc) in RETRYABLE_ERRORS


OUT_OF_TIME_ERRORS = frozenset({1969, 3024})
"""MariaDB's ER_STATEMENT_TIMEOUT (``max_statement_time``), MySQL's
ER_QUERY_TIMEOUT (``max_execution_time``)."""


def _time_limit_variable(connection: Connection) -> tuple[str, float]:
    """MariaDB's ``max_statement_time`` (seconds) or MySQL's ``max_execution_time``
    (milliseconds, SELECTs only), and the factor from seconds."""
    if connection.dialect.name == "mariadb" or getattr(connection.dialect, "is_mariadb", False):
        return "max_statement_time", 1.0
    return "max_execution_time", 1000.0


@contextmanager
def _time_limited(connection: Connection, seconds: float) -> Iterator[None]:
    # A session variable: set for these statements, and put back after them.
    name, per_second = _time_limit_variable(connection)
    before = connection.exec_driver_sql(f"SELECT @@SESSION.{name}").scalar()
    limit = max(0.001, seconds) if per_second == 1 else max(1, int(seconds * per_second))
    connection.exec_driver_sql(f"SET SESSION {name} = {limit}")
    try:
        yield
    finally:
        connection.exec_driver_sql(f"SET SESSION {name} = {before}")


def is_out_of_time(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement stopped by its time limit (1969, 3024)."""
    return _error_number(exc) in OUT_OF_TIME_ERRORS


ER_CONSTRAINT_FAILED = 4025

WRITE_ISOLATION = "READ COMMITTED"
"""The queue's write transactions run at this level: locking reads see the newest
committed row and InnoDB takes no gap locks, so claimers skip each other's rows
instead of waiting on gaps, and a dedupe insert's loser sees the winner's row.
:func:`sqlq_orm.create_engine` makes the whole engine run at it."""

WRITE_ISOLATION_OPTION = "sqlq_write_isolation"
"""Execution option naming the level a queue write transaction needs (its value is
:data:`WRITE_ISOLATION`); the ``begin`` hook of :func:`install_hooks` acts on it."""


def _write_isolation(connection: Connection) -> None:
    # SQLAlchemy's own isolation_level option would cost four round trips per
    # transaction (SET SESSION ... and COMMIT at checkout, the same again to put the
    # default back at check-in). SET TRANSACTION, without SESSION, applies to the
    # next transaction only: one round trip, nothing to undo, and none at all when
    # the connection already runs at that level (an engine made by create_engine).
    options = connection.get_execution_options()
    wanted = options.get(WRITE_ISOLATION_OPTION)
    current = options.get("isolation_level", connection.dialect.default_isolation_level)
    if wanted is None or wanted == current:
        return
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {wanted}")
    finally:
        cursor.close()


DEFAULT_CONNECT_TIMEOUT = 10
"""PyMySQL's own default ``connect_timeout``, in seconds."""


POSTGRESQL_PORT = 5432


def greeting_timeout_message(cparams: dict[str, Any], timeout: float) -> str:
    """What to say when no server greeting came within ``timeout`` seconds.

    PostgreSQL waits for the client to speak first, so a MySQL URL pointed at its port
    times out here; a partitioned or stalled MariaDB server does too. Only the port
    tells them apart (no byte came back): PostgreSQL is named only for its port.
    """
    where = f"{cparams.get('host', 'localhost')}:{cparams.get('port', 3306)}"
    said = f"no MySQL/MariaDB server greeting from {where} within {timeout:g}s"
    if int(cparams.get("port") or 3306) == POSTGRESQL_PORT:
        return (
            f"{said}: that is PostgreSQL's port (5432), which waits for the client to "
            "speak first; check the port in the URL"
        )
    return (
        f"{said}: the server did not answer in time (down, overloaded, or the network "
        "between is dropping packets); raise the wait with ?connect_timeout=SECONDS in "
        "the URL if it is only slow"
    )


def _connect_with_greeting_timeout(
    dialect: Any, record: Any, cargs: tuple[Any, ...], cparams: dict[str, Any]
) -> Any:
    """Connect with PyMySQL, waiting for the server's greeting no longer than the
    connect timeout.

    A MySQL server speaks first. PyMySQL's ``connect_timeout`` covers only the TCP
    connect, and its ``read_timeout`` (none by default) the greeting: a URL that
    points at another server's port (PostgreSQL's 5432, which waits for the client
    to speak first) then hangs until that server gives up (60 s). The greeting is read
    here with ``read_timeout = connect_timeout``; afterwards reads wait as before.
    """
    if cparams.get("read_timeout") is not None:
        return None  # the caller chose a read timeout: PyMySQL applies it to the greeting
    timeout = float(cparams.get("connect_timeout") or DEFAULT_CONNECT_TIMEOUT)
    try:
        connection = dialect.loaded_dbapi.connect(*cargs, **cparams, read_timeout=timeout)
    except dialect.loaded_dbapi.OperationalError as exc:
        if "timed out" not in str(exc):
            raise
        raise dialect.loaded_dbapi.OperationalError(
            2013, greeting_timeout_message(cparams, timeout)
        ) from None
    # After the greeting, queries wait as long as they need (PyMySQL's attribute for
    # the read timeout; tests/conformance/test_engine_hooks.py checks it is reset).
    connection._read_timeout = None
    if connection._sock is not None:
        connection._sock.settimeout(None)
    connection._current_timeout = None
    return connection


def install_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    """Begin the queue's write transactions at :data:`WRITE_ISOLATION`, and report a
    violated CHECK constraint as :class:`~sqlalchemy.exc.IntegrityError`.

    MariaDB's error 4025 (``CONSTRAINT ... failed``) reaches SQLAlchemy as an
    OperationalError (PyMySQL maps only the older integrity errors), which callers
    would take for a lost connection rather than a row the schema refused.
    """
    event.listen(engine, "begin", _write_isolation)
    if engine.dialect.driver == "pymysql":
        event.listen(engine, "do_connect", _connect_with_greeting_timeout)

    @event.listens_for(engine, "handle_error")
    def _integrity(context: Any) -> Any:
        error = context.sqlalchemy_exception
        if _error_number(context.original_exception) != ER_CONSTRAINT_FAILED or error is None:
            return None
        return IntegrityError(error.statement, error.params, context.original_exception)


KEY_LOCK_WAIT_SECONDS = 10
"""How long a claim waits for a concurrency key's named lock (held by another claim
for its recount and commit: milliseconds) before it rolls back and claims again."""


def key_lock_name(scope: str, key: str) -> str:
    """The named lock of one concurrency key of one job table (64 characters at most,
    whatever the key: a digest; a collision only makes two keys wait for each other)."""
    return "sqlq_key:" + hashlib.sha1(f"{scope}\0{key}".encode()).hexdigest()


def _lock_concurrency_keys(connection: Connection, scope: str, keys: Sequence[str]) -> bool:
    # Named locks, not a locking read of the keys' held rows: such a read waits for
    # any transaction holding one of those rows (an app transaction that enqueued a
    # child of a running job), stalling every claim of the key. A named lock belongs
    # to the session, so it is let go once the claim's transaction has ended
    # (committed: a claim that waited counts what this one claimed).
    for key in sorted(set(keys)):
        name = key_lock_name(scope, key)
        got = connection.execute(sa_select(func.get_lock(name, KEY_LOCK_WAIT_SECONDS))).scalar()
        if got != 1:
            return False
        after_transaction(connection, functools.partial(_release_lock, name=name))
    return True


def _release_lock(connection: Connection, *, name: str) -> None:
    connection.execute(sa_select(func.release_lock(name)))


def _get_migration_lock(connection: Connection) -> None:
    got = connection.exec_driver_sql(
        f"SELECT GET_LOCK('{MIGRATION_LOCK}', {MIGRATION_LOCK_WAIT_SECONDS})"
    ).scalar()
    if got != 1:
        raise SqlqError(
            f"another migration held the lock {MIGRATION_LOCK!r} for "
            f"{MIGRATION_LOCK_WAIT_SECONDS}s; try again when it has finished"
        )


@contextmanager
def _hold_migration_lock(connection: Connection) -> Iterator[None]:
    # A named lock belongs to the session, not the transaction: it outlives the
    # implicit commits of DDL. GET_LOCK nests, so the migration transaction's own
    # (below) only counts up and down inside this one.
    _get_migration_lock(connection)
    connection.rollback()  # the migration starts outside a transaction
    try:
        yield
    finally:
        connection.rollback()
        connection.exec_driver_sql(f"SELECT RELEASE_LOCK('{MIGRATION_LOCK}')")
        connection.rollback()


@contextmanager
def _migrate_in_schema(connection: Connection, schema: str) -> Iterator[None]:
    # A schema is a database here, and DDL commits as it goes: USE it for the run
    # (the name is validated: letters, digits, underscores), then the one before.
    before = connection.exec_driver_sql("SELECT DATABASE()").scalar()
    connection.exec_driver_sql(f"USE `{schema}`")
    try:
        yield
    finally:
        if before is not None:
            connection.exec_driver_sql(f"USE `{before}`")


def _lock_for_migration(connection: Connection) -> None:
    # DDL commits implicitly in MySQL, so a transaction-scoped lock would not last:
    # take the named lock for the session and let it go when the migration's
    # transaction ends either way (a host app's Alembic enters here only).
    _get_migration_lock(connection)

    def _release(conn: Connection) -> None:
        conn.exec_driver_sql(f"SELECT RELEASE_LOCK('{MIGRATION_LOCK}')")

    for name in ("commit", "rollback"):
        event.listen(connection, name, _release, once=True)


def _descending_index_columns(connection: Connection, table: str, index: str) -> set[str] | None:
    # SQLAlchemy's MySQL reflection drops DESC; information_schema keeps it ('D').
    rows = connection.exec_driver_sql(
        "SELECT COLUMN_NAME, COLLATION FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND INDEX_NAME = %s",
        (table, index),
    ).all()
    if not rows:
        return None
    return {str(name) for name, collation in rows if collation == "D"}


def _maintenance(engine: Engine, task: str, tables: Sequence[Any]) -> MaintenanceStatement:
    if task == "checkpoint":
        return MaintenanceStatement(
            task, None, "InnoDB checkpoints its redo log itself; nothing to do"
        )
    preparer = engine.dialect.identifier_preparer
    listed = ", ".join(preparer.format_table(table) for table in tables)
    return MaintenanceStatement(
        task,
        f"OPTIMIZE TABLE {listed}",
        "rebuilt the tables (InnoDB: ALTER TABLE ... FORCE, online) to give back free "
        "space and refreshed index statistics",
    )


# -- partial unique indexes ---------------------------------------------------------


DEDUPE_KEY_COLUMN = "dedupe_key"
"""The column of sqlq's partial unique dedupe index (``JobMixin.dedupe_key``)."""

KEY_TYPE_INFO = "sqlq_key_type"
"""``Index.info`` key: the indexed column's type, for an index built without its table
(Alembic's ``op.create_index``), so the generated column can be declared."""


def partial_index_column(index: Index) -> str:
    """The generated column behind a partial unique index on MySQL: ``<index>_key``."""
    name = f"{index.name}_key"
    if len(name) > IDENTIFIER_MAX:
        raise CompileError(f"generated column name {name!r} is over {IDENTIFIER_MAX} characters")
    return name


def generated_key_column(index: Index) -> str | None:
    """The generated column behind ``index`` here (a partial unique index), or None."""
    if not index.unique or partial_index_predicate(index) is None:
        return None
    return partial_index_column(index)


def partial_index_predicate(index: Index) -> Any:
    """The ``WHERE`` of a partial index, as written for PostgreSQL/SQLite (or None)."""
    kwargs = index.dialect_kwargs
    for key in ("postgresql_where", "sqlite_where"):
        if kwargs.get(key) is not None:
            return kwargs[key]
    return None


def _create_index(create: CreateIndex, compiler: Any, **kw: Any) -> str:
    index: Index = create.element
    where = partial_index_predicate(index)
    if where is None or not index.unique:
        # A partial index that is not unique only saves space: the whole index serves
        # the same queries.
        return str(compiler.visit_create_index(create, **kw))
    if len(index.expressions) != 1:
        raise CompileError(
            f"index {index.name!r}: MySQL emulates only single-column unique partial indexes"
        )
    column = index.table.c[index.expressions[0].name]  # type: ignore[union-attr]
    key_type = index.info.get(KEY_TYPE_INFO, column.type)
    if isinstance(key_type, NullType) and column.name == DEDUPE_KEY_COLUMN:
        # Alembic's autogenerate renders sqlq's dedupe index without info=: its column
        # is the one JobMixin declares, whatever the host named the table.
        key_type = String(DEDUPE_KEY_MAX)
    if isinstance(key_type, NullType):
        # Alembic's op.create_index knows column names only, not their types.
        raise CompileError(
            f"index {index.name!r}: MySQL needs the type of {column.name!r} for the generated "
            f"column; pass info={{{KEY_TYPE_INFO!r}: <type>}} to create_index"
        )
    preparer = compiler.preparer
    sql = compiler.sql_compiler
    predicate = sql.process(where, literal_binds=True)
    type_sql = compiler.dialect.type_compiler_instance.process(key_type)
    generated = preparer.quote(partial_index_column(index))
    # NULL once the predicate stops holding: InnoDB's unique indexes allow any number
    # of NULLs, so only rows the partial index would hold compete for a key.
    return (
        f"ALTER TABLE {preparer.format_table(index.table)} "
        f"ADD COLUMN {generated} {type_sql} AS "
        f"(CASE WHEN {predicate} THEN {preparer.quote(column.name)} END) VIRTUAL, "
        f"ADD UNIQUE INDEX {preparer.quote(str(index.name))} ({generated})"
    )


for _dialect in DIALECTS:
    compiles(epoch_now, _dialect)(_epoch_now)
    compiles(CreateIndex, _dialect)(_create_index)


def _table_bytes(connection: Connection, tables: Sequence[Table]) -> dict[str, int]:
    """``information_schema.TABLES``: data and index length (InnoDB's estimate)."""
    found: dict[str, int] = {}
    for table in tables:
        statement: Select[Any] = (
            sa_select(literal_column("DATA_LENGTH + INDEX_LENGTH"))
            .select_from(text("information_schema.TABLES"))
            .where(
                literal_column("TABLE_SCHEMA") == func.coalesce(table.schema, func.database()),
                literal_column("TABLE_NAME") == table.name,
            )
        )
        size = connection.execute(statement).scalar()
        if size is not None:
            found[table.name] = int(size)
    return found


def _link_timeouts(driver: str, worker_lease_seconds: float | None) -> dict[str, Any]:
    # PyMySQL waits on a silent server for ever (no read or write timeout by default).
    # Only a worker's engine gets them, fitted in the lease: the engine of an app may
    # run a query longer than any bound chosen here, and keeps PyMySQL's defaults.
    if driver != "pymysql" or worker_lease_seconds is None:
        return {}
    lease = float(worker_lease_seconds)
    return {
        "connect_timeout": max(2, round(lease / 6)),
        "read_timeout": max(1.0, lease / 2),
        "write_timeout": max(1.0, lease / 2),
    }


def _backend(name: str) -> Backend:
    return Backend(
        link_timeouts=_link_timeouts,
        # MariaDB's JSON is LONGTEXT with a JSON_VALID check, and reflects as LONGTEXT;
        # MySQL's is its own type. Before sqlq_0010 the column was TEXT.
        json_column_types=frozenset({"JSON", "LONGTEXT"}),
        name=name,
        table_bytes=_table_bytes,
        title="MariaDB" if name == "mariadb" else "MySQL",
        insert=_insert,
        read_options={},  # InnoDB MVCC: plain reads never block writers
        # READ COMMITTED (see WRITE_ISOLATION), set by the begin hook where needed.
        write_options={WRITE_ISOLATION_OPTION: WRITE_ISOLATION},
        pick=_pick,
        token_for_row=_token_for_row,
        bind_tokens=lambda tokens: json.dumps(list(tokens)),
        lock_rows=_lock_rows,
        rows_changed=lambda connection, result: int(result.rowcount),
        maintenance=_maintenance,
        autocommit=("autocommit_mode", True),
        # A consistent snapshot from the first read on, as PostgreSQL's REPEATABLE READ.
        snapshot_options={"isolation_level": "REPEATABLE READ"},
        lock_for_migration=_lock_for_migration,
        hold_migration_lock=_hold_migration_lock,
        migrate_in_schema=_migrate_in_schema,
        ddl_commits=True,
        descending_index_columns=_descending_index_columns,
        update_returning=False,
        is_duplicate_key=is_duplicate_key,
        is_retryable=is_retryable,
        rolls_back_transaction=is_deadlock,
        time_limited=_time_limited,
        is_out_of_time=is_out_of_time,
        concurrency_recheck=True,
        lock_concurrency_keys=_lock_concurrency_keys,
        install_hooks=install_hooks,
        materialize=_plain_cte,
        by_primary_key=_by_primary_key,
        in_claim_order=_in_claim_order,
        generated_key_column=generated_key_column,
        limited_in_subquery=_derived,
    )


MYSQL = _backend("mysql")
MARIADB = _backend("mariadb")
