"""What the database holds of the queue's tables, read cheaply: for the check a
:class:`~sqlq_orm.Queue` makes once per process before its first use.

One catalog query lists the tables; then one ``SELECT * ... WHERE 1 = 0`` per table
lists its columns (no row is read, on any database); on SQLite one more read of
``sqlite_master`` tells whether the job table has ``AUTOINCREMENT``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy
from sqlalchemy import Select, Table, false, select
from sqlalchemy.engine import Connection

from sqlq_orm.db.backends import Backend
from sqlq_orm.db.tables import Tables


@dataclass(frozen=True)
class SchemaReport:
    """Differences between the models' tables and the database's (empty: none)."""

    missing_tables: list[str] = field(default_factory=list)
    missing_columns: dict[str, list[str]] = field(default_factory=dict)
    """Table -> columns the models declare that the database lacks."""
    unmapped_columns: dict[str, list[str]] = field(default_factory=dict)
    """Table -> columns the database has that the models do not map."""
    without_autoincrement: list[str] = field(default_factory=list)
    """Tables whose model asks for SQLite's AUTOINCREMENT, stored without it."""

    @property
    def behind(self) -> bool:
        """Whether the queue cannot work as its models say on this schema."""
        return bool(self.missing_tables or self.missing_columns or self.without_autoincrement)


def model_tables(tables: Tables) -> list[Table]:
    listed = [tables.jobs, tables.attempts, tables.events, tables.workers]
    listed += [t for t in (tables.schedules, tables.dependencies) if t is not None]
    return listed


def read_schema(connection: Connection, tables: Tables, backend: Backend) -> SchemaReport:
    """Compare the models' tables with what ``connection``'s database holds."""
    inspector = sqlalchemy.inspect(connection)
    existing: dict[str | None, set[str]] = {}
    report = SchemaReport()
    for table in model_tables(tables):
        if table.schema not in existing:
            existing[table.schema] = set(inspector.get_table_names(schema=table.schema))
        if table.name not in existing[table.schema]:
            report.missing_tables.append(table.name)
            continue
        columns_only: Select[Any] = (
            select(sqlalchemy.literal_column("*")).select_from(table).where(false())
        )
        stored = set(connection.execute(columns_only).keys())
        declared = {column.name for column in table.columns}
        generated = {backend.generated_key_column(index) for index in table.indexes}
        missing = sorted(declared - stored)
        unmapped = sorted(stored - declared - generated)
        if missing:
            report.missing_columns[table.name] = missing
        if unmapped:
            report.unmapped_columns[table.name] = unmapped
        if table.dialect_options["sqlite"]["autoincrement"] and backend.autoincrement_missing(
            connection, table.name
        ):
            report.without_autoincrement.append(table.name)
    return report
