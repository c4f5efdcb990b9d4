"""Run sqlq_orm's Alembic migrations from Python (and so from ``sqlq migrate``).

Works from an installed wheel: the revisions and the Alembic environment ship inside
the package (:mod:`sqlq_orm.migrations`), so no ``alembic.ini`` is needed::

    from sqlq_orm import migrate

    migrate.upgrade("sqlite:///sqlq.db")   # or an Engine
    migrate.current(engine)                # {"sqlq_0001"}
    migrate.check(engine)                  # [] when the schema matches the models
    migrate.check_schema_revision(engine)  # raises if a newer sqlq_orm migrated it

``bind`` is a URL (an engine is made with :func:`sqlq_orm.create_engine` and
disposed of afterwards) or an :class:`~sqlalchemy.engine.Engine` (a host app's; give
it sqlq_orm's hooks with :func:`sqlq_orm.configure_engine`). The revision is recorded
in ``sqlq_alembic_version``. A host app that runs the revisions from its own Alembic
setup should use that instead (see :mod:`sqlq_orm.migrations`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy
import sqlalchemy.exc
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateSchema

from alembic import command
from sqlq_orm.db.backends import backend_for
from sqlq_orm.db.context import schema_for
from sqlq_orm.db.engine import create_engine
from sqlq_orm.db.maintenance import migration_session_locked
from sqlq_orm.errors import SchemaNewerThanCode, SqlqError
from sqlq_orm.migrations import (
    MIGRATIONS_DIR,
    VERSION_TABLE,
    context_options,
    target_metadata,
)
from sqlq_orm.migrations.host import SQLQ_REVISION_PREFIX

__all__ = [
    "check",
    "check_schema_revision",
    "config",
    "current",
    "downgrade",
    "newest_revisions",
    "upgrade",
]

log = logging.getLogger("sqlq_orm")

HOST_VERSION_TABLE = "alembic_version"
"""Where a host app's own Alembic records revisions (ours too, when it runs them)."""


@contextmanager
def _connection(
    bind: str | sqlalchemy.URL | Engine,
    *,
    read_only: bool = False,
    schema: str | None = None,
) -> Iterator[Connection]:
    """A connection outside any transaction (Alembic begins its own).

    ``read_only`` connections begin like :meth:`Queue.read` (no SQLite write lock).
    With ``schema``, every table the revisions name (the version table too) is sent to
    that schema, created first unless ``read_only``.
    """
    engine = bind if isinstance(bind, Engine) else create_engine(bind, poolclass=NullPool)
    try:
        schema = schema_for(engine, schema)
        with engine.connect() as connection:
            backend = backend_for(engine)
            if schema is not None and not read_only:
                with connection.begin():
                    connection.execute(CreateSchema(schema, if_not_exists=True))
            # Alembic begins the transaction; the options decide how (SQLite: a
            # migration takes the write lock at BEGIN, which also serialises two).
            connection.execution_options(
                **(backend.read_options if read_only else backend.write_options),
                **({} if schema is None else {"schema_translate_map": {None: schema}}),
            )
            connection.info[_SCHEMA_KEY] = schema
            try:
                yield connection
            finally:
                # info outlives this connection in the pool: leave nothing behind.
                connection.info.pop(_SCHEMA_KEY, None)
    finally:
        if engine is not bind:
            engine.dispose()


_SCHEMA_KEY = "sqlq_schema"
"""Where :func:`_connection` notes the schema on the connection, for Alembic's env."""


def config(connection: Connection | None = None) -> Config:
    """An Alembic config for the packaged migrations, optionally bound to ``connection``.

    Useful for Alembic commands this module does not wrap (``history``, ``stamp``).
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
        cfg.attributes["version_table_schema"] = connection.info.get(_SCHEMA_KEY)
    return cfg


def upgrade(
    bind: str | sqlalchemy.URL | Engine, revision: str = "heads", *, schema: str | None = None
) -> None:
    """Upgrade the database to ``revision`` (default: the latest) in one transaction.

    Running it again when the database is up to date does nothing. Tables made by
    ``Base.metadata.create_all`` (no revision recorded) are adopted when they match
    the models exactly: the latest revision is recorded and nothing else is done.
    Anything else already in the way raises :class:`~sqlq_orm.errors.SqlqError`
    and changes nothing. ``schema`` migrates the tables of ``Queue(engine,
    schema=...)``: the schema (a database, on MariaDB) is created if missing, and the
    tables and ``sqlq_alembic_version`` go there.
    """
    for attempt in range(_LOCKED_ATTEMPTS):
        try:
            with (
                _connection(bind, schema=schema) as connection,
                migration_session_locked(connection),
            ):
                _refuse_unknown_revision(connection)
                if _adopt_unversioned_tables(connection):
                    return
                command.upgrade(config(connection), revision)
                return
        except sqlalchemy.exc.OperationalError as exc:
            if not _sqlite_locked_at_once(exc) or attempt == _LOCKED_ATTEMPTS - 1:
                raise
            log.info("SQLite refused the migration's lock at once; starting it again")
            time.sleep(_LOCKED_PAUSE_SECONDS * (attempt + 1))


# SQLite answers "database is locked" without waiting out busy_timeout where waiting
# could deadlock (a connection with a read lock asking for the write lock while
# another holds it; switching a fresh file to WAL while others open it). Its advice
# is to start the transaction again. A migration is one transaction and running it
# again is harmless (a database already at the revision is left alone), so a few
# processes upgrading at once at start-up all succeed.
_LOCKED_ATTEMPTS = 5
_LOCKED_PAUSE_SECONDS = 0.2


def _sqlite_locked_at_once(exc: sqlalchemy.exc.OperationalError) -> bool:
    return "database is locked" in str(exc.orig) and type(exc.orig).__module__.startswith("sqlite3")


def downgrade(
    bind: str | sqlalchemy.URL | Engine, revision: str, *, schema: str | None = None
) -> None:
    """Downgrade the database to ``revision`` (``"base"`` drops sqlq_orm's tables; the
    schema itself stays)."""
    with _connection(bind, schema=schema) as connection, migration_session_locked(connection):
        _refuse_unknown_revision(connection)
        command.downgrade(config(connection), revision)


def current(bind: str | sqlalchemy.URL | Engine, *, schema: str | None = None) -> set[str]:
    """The revisions the database (or its ``schema``) is at (empty before the first upgrade)."""
    with _connection(bind, read_only=True, schema=schema) as connection:
        return _recorded(connection, VERSION_TABLE)


def newest_revisions() -> list[str]:
    """The head revisions this version of sqlq_orm ships (one, unless branches diverge)."""
    return sorted(ScriptDirectory.from_config(config()).get_heads())


def check_schema_revision(
    bind: str | sqlalchemy.URL | Engine, *, schema: str | None = None
) -> None:
    """Raise :class:`~sqlq_orm.errors.SchemaNewerThanCode` if the database records a
    sqlq revision this code does not know (a newer sqlq_orm migrated it).

    Read-only. A database at a known revision, or with none recorded yet, passes.
    Reads the standalone version table (``sqlq_alembic_version``); when a host app
    runs the revisions from its own Alembic, that Alembic keeps the history.
    """
    with _connection(bind, read_only=True, schema=schema) as connection:
        _refuse_unknown_revision(connection)


def _refuse_unknown_revision(connection: Connection) -> None:
    try:
        unknown = _recorded(connection, VERSION_TABLE) - _revision_ids()
    finally:
        connection.rollback()  # Alembic must start outside a transaction
    if unknown:
        raise SchemaNewerThanCode(sorted(unknown), newest_revisions())


def check(bind: str | sqlalchemy.URL | Engine) -> list[Any]:
    """Differences between the models and the database, as Alembic's autogenerate sees
    them (``alembic check``); an empty list when they agree.

    Only sqlq_orm's own tables are compared; a host app's tables are ignored.
    """
    with _connection(bind, read_only=True) as connection:
        return _differences(connection)


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts=context_options(target_metadata()))
    return list(compare_metadata(context, target_metadata()))


def _adopt_unversioned_tables(connection: Connection) -> bool:
    """Record the latest revision on sqlq tables that exist without one; tell if done.

    Returns False when there is nothing to adopt (a revision is recorded, or no sqlq
    table exists) and the upgrade should run as usual.
    """
    try:
        inspector = sqlalchemy.inspect(connection)
        schema = connection.info.get(_SCHEMA_KEY)
        tables = set(inspector.get_table_names(schema=schema))
        ours = tables & set(target_metadata().tables)
        if not ours or (VERSION_TABLE in tables and _recorded(connection, VERSION_TABLE)):
            return False
        if schema is not None:
            raise SqlqError(
                f"tables {sorted(ours)} exist in schema {schema!r} but no sqlq revision is "
                "recorded there; nothing was changed. Move them out of the way, then run "
                "the migration again"
            )
        _refuse_host_managed(connection, tables, ours)
    finally:
        connection.rollback()  # Alembic must start outside a transaction
    differences = _differences(connection)
    if differences:
        raise SqlqError(
            f"tables {sorted(ours)} exist but no sqlq revision is recorded, and they "
            f"differ from the models ({len(differences)} difference(s), first: "
            f"{differences[0]!r}); nothing was changed. Move them out of the way or "
            "bring them in line with the models, then run the migration again"
        )
    connection.rollback()
    command.stamp(config(connection), "heads")
    log.warning("adopted existing sqlq tables %s: they match the models", sorted(ours))
    return True


def _refuse_host_managed(connection: Connection, tables: set[str], ours: set[str]) -> None:
    """Raise if the app's own Alembic manages this database and made sqlq's tables.

    Either its ``alembic_version`` records sqlq revisions (sqlq's versions are in its
    ``version_locations``) or it records only the app's own revisions, one of which
    created sqlq's tables with :func:`sqlq_orm.migrations.upgrade`. Both mean
    ``sqlq migrate`` must keep out: two version tables for one schema would diverge.
    """
    if HOST_VERSION_TABLE not in tables:
        return
    recorded = _recorded(connection, HOST_VERSION_TABLE)
    if not recorded:
        return
    if any(revision.startswith(SQLQ_REVISION_PREFIX) for revision in recorded):
        # sqlq's revisions are a branch of the app's history: two heads.
        todo = "run `alembic upgrade heads` in the app"
    else:
        # One head: sqlq's steps run inside the app's own revisions.
        todo = (
            "run `alembic upgrade head` in the app; to take sqlq's newer revisions, add "
            "a revision of the app's whose upgrade() runs sqlq_orm.migrations.upgrade(op, "
            f'to="{newest_revisions()[-1]}")'
        )
    raise SqlqError(
        f"this database's schema is managed by your app's own Alembic "
        f"({HOST_VERSION_TABLE} records {sorted(recorded)}) and it already has sqlq's "
        f"tables {sorted(ours)}: {todo}, instead of `sqlq migrate`"
    )


def _recorded(connection: Connection, version_table: str) -> set[str]:
    context = MigrationContext.configure(
        connection,
        opts={
            "version_table": version_table,
            "version_table_schema": connection.info.get(_SCHEMA_KEY),
        },
    )
    return set(context.get_current_heads())


def _revision_ids() -> set[str]:
    return {script.revision for script in ScriptDirectory.from_config(config()).walk_revisions()}
