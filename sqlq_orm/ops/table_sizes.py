"""How much disk the queue's tables take, for the retention part of the overview.

Each table with its indexes as the database measures it (PostgreSQL
``pg_total_relation_size``; SQLite ``dbstat`` where the build has it; MariaDB/MySQL
``information_schema.TABLES``, InnoDB's estimate), and on SQLite the whole file
(``page_count * page_size``). Measuring reads catalog statistics or walks the pages
(SQLite's ``dbstat``: about a second at a million jobs), so the dashboard measures it in
the background and seldom (:mod:`sqlq_orm.dashboard.cache`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Table

from sqlq_orm.db.context import HasContext, QueueContext, context_of


@dataclass(frozen=True)
class TableSizes:
    """Bytes per table (indexes included), by the host's table names."""

    tables: dict[str, int | None]
    """None for a table the database could not measure (SQLite without ``dbstat``)."""
    database_bytes: int | None
    """The whole database file (SQLite); None where the database is not one file."""

    @property
    def total(self) -> int | None:
        """The sum over the tables (None when one of them could not be measured)."""
        values = list(self.tables.values())
        return None if any(v is None for v in values) else sum(v or 0 for v in values)


def table_sizes(queue: QueueContext | HasContext) -> TableSizes:
    """The size of each of the queue's tables (the optional ones when the models have them)."""
    context = context_of(queue)
    tables = context.tables
    chosen = [
        table
        for table in (
            tables.jobs, tables.attempts, tables.events, tables.workers,
            tables.dependencies, tables.schedules, tables.queues,
        )
        if isinstance(table, Table)
    ]  # fmt: skip
    backend = context.dialect
    with context.read() as connection:
        measured = backend.table_bytes(connection, chosen) if backend.table_bytes else {}
        whole = backend.database_bytes(connection) if backend.database_bytes else None
    return TableSizes(tables={t.name: measured.get(t.name) for t in chosen}, database_bytes=whole)
