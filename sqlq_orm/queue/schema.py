"""The queue's look at its schema, once per process, before its first use: behind the
code is an error, columns the models do not map are a warning (a worker refuses them).

A schema behind the models (a host that copied a pinned revision and never took the
next ones, a standalone database never migrated) would otherwise surface as a raw
``OperationalError: no such column`` at the first enqueue. The look costs one catalog
query and one empty ``SELECT`` per table (see :mod:`sqlq_orm.db.schema_check`), made
once per engine and set of models in the process, never while Alembic runs migrations
(a host's ``env.py`` that imports the app's module-level queue must upgrade a fresh
database).
"""

from __future__ import annotations

import sys
import threading
import warnings
import weakref

from sqlalchemy.engine import Engine

from sqlq_orm.db.context import QueueContext
from sqlq_orm.db.schema_check import model_tables, read_schema
from sqlq_orm.errors import ModelsMissColumns, SqlqWarning

_checked: weakref.WeakKeyDictionary[Engine, dict[tuple[object, ...], dict[str, list[str]]]] = (
    weakref.WeakKeyDictionary()
)
"""Per engine: the sets of models whose tables were found up to date, with the columns
their tables hold that the models do not map."""
_lock = threading.Lock()


def inside_migration() -> bool:
    """Whether Alembic is running an ``env.py`` in this process now (its ``context``
    proxy is installed): the schema is being changed, so it is not checked."""
    alembic_context = sys.modules.get("alembic.context")
    return getattr(alembic_context, "_proxy", None) is not None


def check_before_first_use(context: QueueContext) -> None:
    """Have ``context`` check its schema before its first transaction (see
    :func:`require_current_schema`), except while a migration runs."""

    def check() -> bool:
        if inside_migration():
            return False  # look again at the first use after the migration
        require_current_schema(context, stacklevel=6)
        return True

    context.check_before_first_use(check)


def require_current_schema(
    context: QueueContext, *, stacklevel: int = 2, refuse_unmapped: bool = False
) -> None:
    """Raise :class:`~sqlq_orm.errors.SchemaBehindCode` if the database lacks tables or
    columns ``context``'s models declare; warn (:class:`~sqlq_orm.errors.SqlqWarning`)
    once if its tables hold columns the models do not map (an app's own columns read
    through the library's models: ``--models`` forgotten). With ``refuse_unmapped`` (a
    worker, whose handlers read the app's columns), unmapped columns of the job table
    raise :class:`~sqlq_orm.errors.ModelsMissColumns` instead."""
    tables = model_tables(context.tables)
    key = tuple(
        (table.fullname, tuple(column.name for column in table.columns)) for table in tables
    )
    unmapped = _checked.get(context.engine, {}).get(key)
    if unmapped is None:
        unmapped = _read_unmapped(context, stacklevel=stacklevel + 1)
        with _lock:
            _checked.setdefault(context.engine, {})[key] = unmapped
    job_table = context.tables.jobs.name
    if refuse_unmapped and unmapped.get(job_table):
        columns = unmapped[job_table]
        raise ModelsMissColumns(
            f"the job table {job_table} has columns the queue's models do not map "
            f"({', '.join(columns)}): a worker would run its jobs with ctx.columns "
            "missing them. Give the worker your app's models: `sqlq worker --models "
            "module:MODELS` (or $SQLQ_MODELS, or a --handlers registry bound to your "
            "queue), or Queue(engine, models=MODELS)",
            columns,
        )


def _read_unmapped(context: QueueContext, *, stacklevel: int) -> dict[str, list[str]]:
    """Read the schema; raise if it is behind, warn (once: the caller caches the answer)
    about columns the models do not map, and return those."""
    with context.read(first_use_check=False) as connection:
        report = read_schema(connection, context.tables, context.dialect)
        if report.behind:
            # Only a schema behind the code needs the revisions (and so Alembic): the
            # look itself, made by every queue, does not.
            from sqlq_orm.migrations import VERSION_TABLE, ordered_revisions
            from sqlq_orm.migrations.standing import behind_error

            raise behind_error(
                connection,
                report,
                job_table=context.tables.jobs.name,
                revisions=ordered_revisions(),
                version_table=VERSION_TABLE,
            )
    if report.unmapped_columns:
        listed = "; ".join(
            f"{table}: {', '.join(columns)}" for table, columns in report.unmapped_columns.items()
        )
        warnings.warn(
            f"the database's queue tables have columns the queue's models do not map "
            f"({listed}): jobs are written without them, handlers' ctx.columns and "
            "`sqlq show` leave them out. If they are your app's, give the queue your models "
            "(Queue(engine, models=MODELS), sqlq --models module:MODELS); if a newer "
            "sqlq_orm added them, upgrade sqlq_orm",
            SqlqWarning,
            stacklevel=stacklevel + 1,
        )
    return dict(report.unmapped_columns)
