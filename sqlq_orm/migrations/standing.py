"""Where a database's sqlq schema stands, read from the schema itself.

A host app that runs sqlq's steps inside its own revisions
(:func:`sqlq_orm.migrations.upgrade`) keeps one head: its ``alembic_version`` records
the app's revisions, not sqlq's. So the schema is asked: each sqlq revision has a
probe here that tells whether what it made is there, and the newest revision whose
probe (and every older one's) holds is where the database stands. A new revision adds
its probe to :data:`PROBES` (a test checks that every shipped revision has one).

:func:`behind_error` turns a :class:`~sqlq_orm.db.schema_check.SchemaReport` into the
error a queue raises, naming the revision and the command that bring the schema up to
date, as the database is managed: ``sqlq migrate``, or the app's own Alembic.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy
from sqlalchemy.engine import Connection

from sqlq_orm.db.backends import backend_for
from sqlq_orm.db.schema_check import SchemaReport
from sqlq_orm.errors import SchemaBehindCode, SqlqError
from sqlq_orm.schema.mixins import JOB_MIXIN_COLUMNS

HOST_VERSION_TABLE = "alembic_version"


def _table(name: str) -> Callable[[Connection], bool]:
    def probe(connection: Connection) -> bool:
        return bool(sqlalchemy.inspect(connection).has_table(name))

    return probe


def _column(table: str, column: str) -> Callable[[Connection], bool]:
    def probe(connection: Connection) -> bool:
        columns = sqlalchemy.inspect(connection).get_columns(table)
        return any(found["name"] == column for found in columns)

    return probe


def _index(table: str, index: str) -> Callable[[Connection], bool]:
    def probe(connection: Connection) -> bool:
        indexes = sqlalchemy.inspect(connection).get_indexes(table)
        return any(found["name"] == index for found in indexes)

    return probe


def _partial_index(table: str, index: str) -> Callable[[Connection], bool]:
    # sqlq_0014 makes indexes partial where the database has partial indexes (SQLite,
    # PostgreSQL); elsewhere it has nothing to do.
    def probe(connection: Connection) -> bool:
        dialect = connection.dialect.name
        if dialect == "sqlite":
            found = connection.execute(
                sqlalchemy.text(
                    "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"
                ),
                {"name": index},
            ).scalar()
        elif dialect == "postgresql":
            found = connection.execute(
                sqlalchemy.text(
                    "SELECT indexdef FROM pg_indexes WHERE indexname = :name"
                    " AND tablename = :table AND schemaname = current_schema()"
                ),
                {"name": index, "table": table},
            ).scalar()
        else:
            return True
        return found is not None and " WHERE " in str(found).upper()

    return probe


def _job_ids_kept(connection: Connection) -> bool:
    # sqlq_0005 changes SQLite only (AUTOINCREMENT); elsewhere it has nothing to do.
    return not backend_for(connection.dialect).autoincrement_missing(connection, "sqlq_jobs")


def _payloads_in_json(connection: Connection) -> bool:
    # sqlq_0010: JSONB on PostgreSQL, JSON on MariaDB/MySQL; SQLite keeps TEXT.
    names = backend_for(connection.dialect).json_column_types
    if not names:
        return True
    columns = sqlalchemy.inspect(connection).get_columns("sqlq_jobs")
    payload = next((found for found in columns if found["name"] == "payload"), None)
    return payload is not None and payload["type"].compile(connection.dialect) in names


PROBES: dict[str, Callable[[Connection], bool]] = {
    "sqlq_0001": _table("sqlq_jobs"),
    "sqlq_0002": _table("sqlq_schedules"),
    "sqlq_0003": _table("sqlq_job_dependencies"),
    "sqlq_0004": _column("sqlq_jobs", "concurrency_key"),
    "sqlq_0005": _job_ids_kept,
    "sqlq_0007": _column("sqlq_jobs", "result"),
    "sqlq_0009": _column("sqlq_schedules", "paused_at"),
    "sqlq_0010": _payloads_in_json,
    "sqlq_0011": _column("sqlq_jobs", "rate_started_at"),
    "sqlq_0012": _index("sqlq_jobs", "ix_sqlq_jobs_status_type"),
    "sqlq_0013": _column("sqlq_job_attempts", "after_event_id"),
    "sqlq_0014": _partial_index("sqlq_jobs", "ix_sqlq_jobs_finished"),
    "sqlq_0015": _column("sqlq_workers", "pool"),
}
"""sqlq revision -> whether the schema has what it made (sqlq's default table names)."""


def revision_standing(connection: Connection, revisions: list[str]) -> str | None:
    """The newest of ``revisions`` (oldest first) applied to the database, asking each
    revision's probe in order; None when not even the first one is."""
    standing = None
    for revision in revisions:
        probe = PROBES.get(revision)
        if probe is None:
            raise SqlqError(
                f"sqlq revision {revision!r} has no probe in sqlq_orm.migrations.standing."
                "PROBES, so where a database stands cannot be told; pass from_= explicitly"
            )
        if not probe(connection):
            break
        standing = revision
    return standing


def _recorded(connection: Connection, version_table: str) -> set[str]:
    if not sqlalchemy.inspect(connection).has_table(version_table):
        return set()
    rows = connection.execute(sqlalchemy.text(f"SELECT version_num FROM {version_table}"))
    return {str(row[0]) for row in rows}


def behind_error(
    connection: Connection,
    report: SchemaReport,
    *,
    job_table: str,
    revisions: list[str],
    version_table: str,
) -> SchemaBehindCode:
    """The error for a schema ``report`` found behind the models, saying what to run.

    Columns of ``job_table`` that :class:`~sqlq_orm.JobMixin` does not define are the
    app's own: its migrations must add them. ``revisions`` are sqlq's, oldest first.
    """
    newest = revisions[-1]
    missing = list(report.missing_tables)
    missing += [f"{t}.{c}" for t, columns in report.missing_columns.items() for c in columns]
    missing += [f"{t} (AUTOINCREMENT)" for t in report.without_autoincrement]
    standalone = _recorded(connection, version_table)
    host = _recorded(connection, HOST_VERSION_TABLE)
    where = f"the database lacks {', '.join(missing)}"
    if report.missing_tables and not (report.missing_columns or report.without_autoincrement):
        where = f"the database has no table {', '.join(report.missing_tables)}"
    apps_own = [
        f"{job_table}.{column}"
        for column in report.missing_columns.get(job_table, [])
        if column not in JOB_MIXIN_COLUMNS
    ]
    if standalone:
        todo = (
            f"it is at sqlq revision {', '.join(sorted(standalone))} and this sqlq_orm needs "
            f"{newest}: run `sqlq migrate` (or sqlq_orm.migrate.upgrade(url))"
        )
    elif host:
        standing = revision_standing(connection, revisions)
        branch = any(revision.startswith("sqlq_") for revision in host)
        if branch:
            todo = f"run `alembic upgrade heads` in your app (sqlq's newest revision is {newest})"
        else:
            todo = (
                f"its sqlq schema stands at {standing or 'nothing'} and this sqlq_orm needs "
                f"{newest}: add a revision to your app's Alembic whose upgrade() runs "
                f'sqlq_orm.migrations.upgrade(op, to="{newest}") (it starts from where the '
                "database stands), then `alembic upgrade head`"
            )
    else:
        todo = (
            "no sqlq revision is recorded: run `sqlq migrate` (or sqlq_orm.migrate.upgrade"
            "(url)), or create the tables from your app's Alembic with "
            f'sqlq_orm.migrations.upgrade(op, to="{newest}")'
        )
    if apps_own:
        todo += (
            f"; {', '.join(apps_own)} belong to your app's models: your app's own "
            "migrations must add them"
        )
    if report.unmapped_columns.get(job_table):
        todo += (
            f" (its {job_table} has columns these models do not map: "
            f"{', '.join(report.unmapped_columns[job_table])}; if the tables are your app's, "
            "give the queue your models: Queue(engine, models=MODELS), sqlq --models "
            "module:MODELS)"
        )
    return SchemaBehindCode(f"{where}; {todo}. Nothing was done", missing)
