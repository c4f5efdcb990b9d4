"""Alembic environment of sqlq_orm's standalone migrations.

Alembic runs this file for ``sqlq migrate`` / :mod:`sqlq_orm.migrate` (this directory
is their ``script_location``) and for ``alembic`` at the repository root (whose
``alembic/env.py`` runs this file). A host app running the revisions from its own
Alembic setup uses its own ``env.py``, not this one.

The database is, first found wins: a connection handed over in
``config.attributes["connection"]`` (:mod:`sqlq_orm.migrate`), ``-x db=URL``, the
``sqlalchemy.url`` option, the ``SQLQ_DATABASE_URL`` environment variable, and
finally ``sqlite:///sqlq.db`` in the working directory. Engines come from
:func:`sqlq_orm.create_engine`, so SQLite gets its PRAGMAs. The revision is recorded
in ``sqlq_alembic_version``, never in a host app's ``alembic_version``.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from alembic import context
from sqlq_orm.db.backends import backend_for
from sqlq_orm.db.engine import create_engine
from sqlq_orm.migrations import (
    DATABASE_URL_ENV,
    DEFAULT_DATABASE_URL,
    context_options,
    safe_migration,
    target_metadata,
)

config = context.config
options = context_options(target_metadata())

if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    """The URL to migrate (see the module docstring for the order of sources)."""
    return (
        context.get_x_argument(as_dictionary=True).get("db")
        or config.get_main_option("sqlalchemy.url")
        or os.environ.get(DATABASE_URL_ENV)
        or DEFAULT_DATABASE_URL
    )


def run_migrations_offline() -> None:
    """``--sql`` mode: print the SQL instead of running it."""
    context.configure(url=database_url(), literal_binds=True, **options)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_on(connection: Connection) -> None:
    """Run the migrations on ``connection`` in one transaction (see safe_migration)."""
    # sqlq_orm.migrate(schema=...): the tables and the version table go to that schema.
    schema = config.attributes.get("version_table_schema")
    with safe_migration(connection):
        context.configure(connection=connection, **options, version_table_schema=schema)
        with context.begin_transaction():
            if schema is None:
                context.run_migrations()
                return
            with backend_for(connection.engine).migrate_in_schema(connection, schema):
                context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations_on(connection)
        return
    engine = create_engine(database_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            run_migrations_on(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
