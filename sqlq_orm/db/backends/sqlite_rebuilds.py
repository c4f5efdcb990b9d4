"""SQLite: a job table rebuilt by Alembic's batch mode keeps its history, on any engine.

Alembic's batch mode alters a SQLite table by creating ``_alembic_tmp_<table>``,
copying the rows, dropping the original and renaming the copy. With foreign keys ON
(sqlq's engines, and the ``connect`` listener SQLAlchemy's documentation recommends),
``DROP TABLE`` first deletes every row, and ``ON DELETE CASCADE`` takes every attempt,
event and dependency edge of every job with it: silently, and the migration exits 0.
A host app's own ``env.py`` builds its engine itself (``alembic init``'s template), so
sqlq's engine hooks and :func:`~sqlq_orm.migrations.safe_migration` are not there.

What is there is this package: every host ``env.py`` imports its models, and so
sqlq_orm. Their first name taken from it (``from sqlq_orm import JobMixin``: see
``sqlq_orm.__getattr__``), :mod:`sqlq_orm.migrations`, and every SQLite backend import
this module, which installs :func:`_guard` on SQLAlchemy's SQLite dialect (every
SQLite engine in the process, whoever made it), where it acts only on the DDL of
sqlq's job tables (:func:`~sqlq_orm.schema.registry.job_table_names`):

- ``CREATE TABLE _alembic_tmp_<job table>`` (a rebuild begins): when foreign keys are
  enforced and no transaction is open, it turns them off, begins the transaction
  itself (``BEGIN IMMEDIATE``: the rebuild is all or nothing, even where pysqlite
  would run DDL outside a transaction), and when that transaction commits it first
  runs ``PRAGMA foreign_key_check`` on the rebuilt table and those referencing it
  (rolling back with an error naming them if a row lost its parent), then turns
  foreign keys back on. The history is kept. While the rebuild runs, an index the
  drop took is re-created with its ``DESC`` columns (SQLite's reflection, which batch
  mode copies, loses them: the claim would sort its backlog).
- Inside an open transaction SQLite ignores ``PRAGMA foreign_keys``: if rows would
  cascade, the rebuild is refused before it starts (:class:`SqlqError` naming
  ``safe_migration``), and the transaction rolls back.
- ``DROP TABLE <job table>`` with foreign keys on and rows that would cascade is refused
  the same way, whatever issued it.
- Whatever the foreign keys: the job table's ``AUTOINCREMENT`` and its
  ``sqlite_sequence`` survive the rebuild. SQLAlchemy's reflection, which batch mode
  copies, does not see ``AUTOINCREMENT`` (a ``column_reflect`` listener adds it back),
  and dropping the old table drops its sequence, which may be above every id left (the
  newest jobs pruned): the guard runs the ``RENAME`` itself and restores it, so no id
  is handed out twice.

Everything else passes through after one anchored regular expression match.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Table, event
from sqlalchemy.dialects.sqlite.base import SQLiteDialect
from sqlalchemy.engine import Connection

from sqlq_orm.errors import SqlqError
from sqlq_orm.schema.registry import job_table_names

BATCH_PREFIX = "_alembic_tmp_"
"""The name Alembic's batch mode gives the copy of a table it rebuilds."""

_DDL = re.compile(r"\s*(?:CREATE|DROP|ALTER)\s", re.IGNORECASE)
_NAME = r"""(?:[`"\[]?\w+[`"\]]?\.)?[`"\[]?(\w+)[`"\]]?"""
_CREATE_TABLE = re.compile(rf"\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_NAME}", re.IGNORECASE)
_DROP_TABLE = re.compile(rf"\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?{_NAME}", re.IGNORECASE)
_CREATE_INDEX = re.compile(
    r"""\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?[`"\[]?(\w+)""",
    re.IGNORECASE,
)
_RENAME = re.compile(rf"\s*ALTER\s+TABLE\s+{_NAME}\s+RENAME\s+TO\s+{_NAME}\s*$", re.IGNORECASE)
_AUTOINCREMENT = re.compile(r"\bAUTOINCREMENT\b", re.IGNORECASE)
_SORT_WORDS = re.compile(r"\b(?:ASC|DESC)\b|[`\"\[\]\s]", re.IGNORECASE)
_SILENT_ACTIONS = frozenset({"CASCADE", "SET NULL", "SET DEFAULT"})

_STATE = "sqlq_sqlite_rebuild"
"""Key, in a pooled connection's ``info``, of the rebuild this guard opened on it."""
_SEQUENCES = "sqlq_sqlite_sequences"
"""Key, in a pooled connection's ``info``: job table -> its sequence before a rebuild."""


def _rows(cursor: Any, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
    cursor.execute(sql, parameters)
    return list(cursor.fetchall())


def _foreign_keys_on(cursor: Any) -> bool:
    return bool(_rows(cursor, "PRAGMA foreign_keys")[0][0])


def referencing(cursor: Any, table: str) -> list[tuple[str, str, str]]:
    """(child table, column, ON DELETE action) of every foreign key into ``table`` whose
    action would silently change the child's rows when ``table``'s rows go."""
    found = []
    tables = _rows(
        cursor, "SELECT name FROM sqlite_master WHERE type = 'table' AND name <> ?", (table,)
    )
    for (child,) in tables:
        for fk in _rows(cursor, f'PRAGMA foreign_key_list("{child}")'):
            # id, seq, table, from, to, on_update, on_delete, match
            referred, column, on_delete = fk[2], fk[3], str(fk[6]).upper()
            if referred.lower() == table.lower() and on_delete in _SILENT_ACTIONS:
                found.append((str(child), str(column), on_delete))
    return found


def rows_that_would_cascade(cursor: Any, table: str) -> list[str]:
    """``child.column (ON DELETE action)`` for each reference into ``table`` that
    dropping it with foreign keys on would change rows of (empty: nothing to lose)."""
    hit = []
    for child, column, on_delete in referencing(cursor, table):
        if _rows(cursor, f'SELECT 1 FROM "{child}" WHERE "{column}" IS NOT NULL LIMIT 1'):
            hit.append(f"{child}.{column} (ON DELETE {on_delete})")
    return sorted(hit)


def refuse_cascading_drop(table: str, hit: list[str]) -> SqlqError:
    """The error for a ``DROP TABLE`` that would silently change ``hit``'s rows."""
    return SqlqError(
        f"refusing to DROP TABLE {table} with foreign keys ON: SQLite would silently "
        f"change the rows of {', '.join(hit)} that reference it. Alembic's batch mode "
        "rebuilds a table by dropping it; run the migration inside "
        "sqlq_orm.migrations.safe_migration(connection) in your env.py, which turns "
        "foreign keys off around it and checks them before commit"
    )


def _guard(cursor: Any, statement: str, parameters: Any, context: Any) -> bool | None:
    """``do_execute`` listener: see the module docstring. True: the guard ran it."""
    if _DDL.match(statement) is None or context is None:
        return None
    connection: Connection = context.root_connection
    pooled = connection.connection
    created = _CREATE_TABLE.match(statement)
    if created is not None:
        name = created.group(1)
        if name.startswith(BATCH_PREFIX) and name[len(BATCH_PREFIX) :] in job_table_names():
            table = name[len(BATCH_PREFIX) :]
            pooled.info.setdefault(_SEQUENCES, {})[table] = _sequence(pooled, table)
            _begin_rebuild(connection, pooled, table)
        return None
    renamed = _RENAME.match(statement)
    if renamed is not None:
        sequences = pooled.info.get(_SEQUENCES, {})
        table = renamed.group(2)
        if renamed.group(1) == BATCH_PREFIX + table and table in sequences:
            cursor.execute(statement)
            _restore_sequence(cursor, table, sequences.pop(table))
            return True
        return None
    dropped = _DROP_TABLE.match(statement)
    if dropped is not None:
        _before_drop(pooled, dropped.group(1))
        return None
    index = _CREATE_INDEX.match(statement)
    state = pooled.info.get(_STATE)
    if index is not None and state is not None:
        original = state["indexes"].pop(index.group(1), None)
        if original is not None and _without_sort_order(original) == _without_sort_order(statement):
            cursor.execute(original)
            return True
    return None


def _guard_no_params(cursor: Any, statement: str, context: Any) -> bool | None:
    return _guard(cursor, statement, (), context)


def _begin_rebuild(connection: Connection, pooled: Any, table: str) -> None:
    cursor = pooled.cursor()
    try:
        if not _foreign_keys_on(cursor):
            return  # off already (safe_migration, or no listener): nothing cascades
        cursor.execute("PRAGMA foreign_keys = OFF")
        if _foreign_keys_on(cursor):
            # A transaction is open, where SQLite ignores the pragma.
            hit = rows_that_would_cascade(cursor, table)
            if hit:
                raise SqlqError(
                    f"refusing to rebuild {table} (Alembic's batch mode) inside a "
                    f"transaction with foreign keys ON: dropping the old table would "
                    f"silently change the rows of {', '.join(hit)}, and SQLite cannot turn "
                    "foreign keys off inside a transaction. Run the migration inside "
                    "sqlq_orm.migrations.safe_migration(connection) in your env.py (or "
                    "without statements before the batch in this revision); nothing was "
                    "changed"
                )
            return
        cursor.execute("BEGIN IMMEDIATE")
        state = pooled.info.setdefault(_STATE, {"tables": set(), "indexes": {}})
        state["tables"].add(table)
        for name, sql in _rows(
            cursor,
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
            "AND sql IS NOT NULL",
            (table,),
        ):
            state["indexes"][name] = sql
    finally:
        cursor.close()
    if not event.contains(connection, "commit", _end_rebuild_on_commit):
        event.listen(connection, "commit", _end_rebuild_on_commit)
        event.listen(connection, "rollback", _end_rebuild_on_rollback)


def _sequence(pooled: Any, table: str) -> int | None:
    """``table``'s ``sqlite_sequence`` entry (None: no AUTOINCREMENT table has one)."""
    cursor = pooled.cursor()
    try:
        if not _rows(cursor, "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"):
            return None
        found = _rows(cursor, "SELECT seq FROM sqlite_sequence WHERE name = ?", (table,))
        return int(found[0][0]) if found else None
    finally:
        cursor.close()


def _restore_sequence(cursor: Any, table: str, before: int | None) -> None:
    """After the rename: the rebuilt ``table`` hands out ids above ``before`` too."""
    if before is None:
        return
    created = _rows(
        cursor, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    )
    if not created or not _AUTOINCREMENT.search(created[0][0] or ""):
        return  # rebuilt without AUTOINCREMENT (a downgrade): no sequence to keep
    cursor.execute(
        "UPDATE sqlite_sequence SET seq = ? WHERE name = ? AND seq < ?", (before, table, before)
    )
    if not _rows(cursor, "SELECT 1 FROM sqlite_sequence WHERE name = ?", (table,)):
        cursor.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, before))


def _reflect_autoincrement(inspector: Any, table: Any, column_info: Any) -> None:
    """``column_reflect`` listener: a job table's ``AUTOINCREMENT`` comes back with it.

    SQLAlchemy's SQLite reflection does not report the keyword; Alembic's batch mode
    recreates a table from its reflection (with its ``kwargs``), so without this every
    rebuild of ``sqlq_jobs`` would quietly drop it.
    """
    if (
        inspector.dialect.name != "sqlite"
        or not column_info.get("primary_key")
        or table.name not in job_table_names()
    ):
        return
    query = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?"
    bind = inspector.bind
    if isinstance(bind, Connection):
        found = bind.exec_driver_sql(query, (table.name,)).scalar()
    else:
        with bind.connect() as connection:
            found = connection.exec_driver_sql(query, (table.name,)).scalar()
    if found and _AUTOINCREMENT.search(found):
        table.dialect_kwargs["sqlite_autoincrement"] = True


def _before_drop(pooled: Any, table: str) -> None:
    if table not in job_table_names():
        return
    cursor = pooled.cursor()
    try:
        if not _foreign_keys_on(cursor):
            return
        hit = rows_that_would_cascade(cursor, table)
    finally:
        cursor.close()
    if hit:
        raise refuse_cascading_drop(table, hit)


def _end_rebuild_on_commit(connection: Connection) -> None:
    """Before the commit: check the references, commit ourselves, foreign keys back on."""
    pooled = connection.connection
    state = pooled.info.pop(_STATE, None)
    if state is None:
        return
    cursor = pooled.cursor()
    try:
        checked = set(state["tables"])
        for table in state["tables"]:
            checked.update(child for child, _, _ in referencing(cursor, table))
        broken = sorted(
            {
                row[0]
                for table in checked
                for row in _rows(cursor, f'PRAGMA foreign_key_check("{table}")')
            }
        )
        # Ours to end: the BEGIN was ours (the driver's own commit then finds none).
        cursor.execute("ROLLBACK" if broken else "COMMIT")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()
    if broken:
        raise SqlqError(
            f"the rebuild of {', '.join(sorted(state['tables']))} left rows breaking a "
            f"foreign key in {', '.join(broken)}; it was rolled back"
        )


def _end_rebuild_on_rollback(connection: Connection) -> None:
    pooled = connection.connection
    if pooled.info.pop(_STATE, None) is None:
        return
    cursor = pooled.cursor()
    try:
        if getattr(pooled.driver_connection, "in_transaction", True):
            cursor.execute("ROLLBACK")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _without_sort_order(create_index: str) -> str:
    return _SORT_WORDS.sub("", create_index).lower()


def install() -> None:
    """Listen on every SQLite dialect (pysqlite, aiosqlite, ...); idempotent."""
    if not event.contains(SQLiteDialect, "do_execute", _guard):
        event.listen(SQLiteDialect, "do_execute", _guard)
        event.listen(SQLiteDialect, "do_execute_no_params", _guard_no_params)
        event.listen(Table, "column_reflect", _reflect_autoincrement)
