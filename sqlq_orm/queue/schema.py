"""The queue's look at its schema, once per process: behind the code is an error,
columns the models do not map are a warning.

A schema behind the models (a host that copied a pinned revision and never took the
next ones, a standalone database never migrated) would otherwise surface as a raw
``OperationalError: no such column`` at the first enqueue. The look costs one catalog
query and one empty ``SELECT`` per table (see :mod:`sqlq_orm.db.schema_check`), made
once per engine and set of models in the process.
"""

from __future__ import annotations

import threading
import warnings
import weakref

from sqlalchemy.engine import Engine

from sqlq_orm.db.context import QueueContext
from sqlq_orm.db.schema_check import model_tables, read_schema
from sqlq_orm.errors import SqlqWarning

_checked: weakref.WeakKeyDictionary[Engine, set[tuple[object, ...]]] = weakref.WeakKeyDictionary()
"""Per engine: the sets of models whose tables were found up to date."""
_lock = threading.Lock()


def require_current_schema(context: QueueContext, *, stacklevel: int = 2) -> None:
    """Raise :class:`~sqlq_orm.errors.SchemaBehindCode` if the database lacks tables or
    columns ``context``'s models declare; warn (:class:`~sqlq_orm.errors.SqlqWarning`)
    once if its tables hold columns the models do not map (an app's own columns read
    through the library's models: ``--models`` forgotten)."""
    tables = model_tables(context.tables)
    key = tuple(
        (table.fullname, tuple(column.name for column in table.columns)) for table in tables
    )
    if key in _checked.get(context.engine, ()):
        return
    with context.read() as connection:
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
    with _lock:
        done = _checked.setdefault(context.engine, set())
        if key in done:
            return
        done.add(key)
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
