"""Schema-change guards and maintenance statements, whatever the database.

Each function asks the engine's backend (:mod:`sqlq_orm.db.backends`) what the task
means there: the migrations, retention and ``sqlq maintenance`` call these and never
look at the dialect themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Connection, Engine

from sqlq_orm.db.backends import MaintenanceStatement, backend_for, find_backend
from sqlq_orm.errors import InvalidInput, SqlqError

MAINTENANCE_TASKS = ("checkpoint", "vacuum")


@contextmanager
def foreign_keys_suspended(connection: Connection) -> Iterator[None]:
    """Run a schema change on ``connection`` with foreign key enforcement off (SQLite).

    Alembic's batch mode alters a SQLite table by copying it, dropping the original
    and renaming the copy. With enforcement on, dropping ``sqlq_jobs`` would cascade
    and silently delete every attempt and event. SQLite ignores the pragma inside a
    transaction, so enter this before the migration's transaction begins, and call
    :func:`check_foreign_keys` before it commits. Other databases need nothing.
    """
    backend = find_backend(connection.dialect)
    if backend is None:
        yield
        return
    with backend.suspend_foreign_keys(connection):
        yield


@contextmanager
def index_order_kept(connection: Connection) -> Iterator[None]:
    """Around a migration on ``connection``: tables rebuilt by copy-and-drop (Alembic's
    batch mode on SQLite) get their indexes back with the same DESC columns.

    Without it the claim index returns ascending (SQLite's reflection drops DESC) and
    the claim sorts in a temporary B-tree. Other databases alter in place: nothing to do.
    """
    backend = find_backend(connection.dialect)
    if backend is None:
        yield
        return
    with backend.keep_index_order(connection):
        yield


def lock_for_migration(connection: Connection) -> None:
    """Serialise schema changes: call first thing inside the migration transaction.

    PostgreSQL takes a transaction-scoped advisory lock; SQLite's migration
    transaction begins IMMEDIATE and so already holds the single write lock.
    """
    backend = find_backend(connection.dialect)
    if backend is not None:
        backend.lock_for_migration(connection)


@contextmanager
def migration_session_locked(connection: Connection) -> Iterator[None]:
    """Around a whole upgrade or downgrade, where DDL is not transactional (MySQL).

    There each CREATE commits at once, so a second migrator could see half the tables
    and take them for someone else's; it waits here until the first has finished.
    Elsewhere the migration transaction's own lock (:func:`lock_for_migration`) does.
    """
    backend = find_backend(connection.dialect)
    if backend is None:
        yield
        return
    with backend.hold_migration_lock(connection):
        yield


def check_foreign_keys(connection: Connection) -> None:
    """Raise :class:`SqlqError` if a row breaks a foreign key.

    Only SQLite can hold such rows (after a change made with enforcement off); other
    databases check foreign keys on every statement.
    """
    backend = find_backend(connection.dialect)
    broken = backend.foreign_key_problems(connection) if backend is not None else []
    if broken:
        raise SqlqError(
            f"the schema change left {len(broken)} row(s) breaking a foreign key in "
            f"{', '.join(sorted(set(broken)))}; it was rolled back"
        )


def foreign_keys_enforced(connection: Connection) -> bool:
    """Tell whether ``ON DELETE CASCADE`` fires on this connection."""
    return backend_for(connection.dialect).foreign_keys_enforced(connection)


def maintenance_statement(engine: Engine, task: str, tables: Sequence[Any]) -> MaintenanceStatement:
    """Return what ``task`` ("checkpoint" or "vacuum") means on ``engine``'s database."""
    if task not in MAINTENANCE_TASKS:
        raise InvalidInput(f"unknown maintenance task {task!r}; use 'checkpoint' or 'vacuum'")
    return backend_for(engine).maintenance(engine, task, tables)


def run_outside_transaction(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    """Run one statement that must not be inside a transaction (VACUUM, checkpoints).

    Uses a raw pooled connection in the driver's autocommit mode, so SQLAlchemy's
    ``begin`` hook (``BEGIN IMMEDIATE`` on SQLite) never wraps it; for the same reason
    the driver's errors reach here unwrapped, and leave as a :class:`SqlqError` naming
    the statement.
    """
    attribute, autocommit = backend_for(engine).autocommit
    driver_error: type[Exception] = engine.dialect.loaded_dbapi.Error
    raw = engine.raw_connection()
    try:
        driver: Any = raw.driver_connection
        previous = getattr(driver, attribute)
        setattr(driver, attribute, autocommit)
        try:
            cursor = raw.cursor()
            try:
                cursor.execute(sql)
                return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
            except driver_error as exc:
                detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise SqlqError(f"the database refused {sql}: {detail}") from exc
            finally:
                cursor.close()
        finally:
            setattr(driver, attribute, previous)
    finally:
        raw.close()
