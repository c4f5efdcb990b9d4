"""Run sqlq_orm's Alembic migrations from Python (and so from ``sqlq migrate``).

Works from an installed wheel: the revisions and the Alembic environment ship inside
the package (:mod:`sqlq_orm.migrations`), so no ``alembic.ini`` is needed::

    from sqlq_orm import migrate

    migrate.upgrade("sqlite:///sqlq.db")   # or an Engine
    migrate.current(engine)                # {"0001"}
    migrate.check(engine)                  # [] when the schema matches the models

``bind`` is a URL (an engine is made with :func:`sqlq_orm.create_engine` and
disposed of afterwards) or an :class:`~sqlalchemy.engine.Engine` (a host app's; give
it sqlq_orm's hooks with :func:`sqlq_orm.configure_engine`). The revision is recorded
in ``sqlq_alembic_version``. A host app that runs the revisions from its own Alembic
setup should use that instead (see :mod:`sqlq_orm.migrations`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from alembic import command
from sqlq_orm.dialects import create_engine
from sqlq_orm.migrations import MIGRATIONS_DIR, context_options, target_metadata

__all__ = ["check", "config", "current", "downgrade", "upgrade"]


@contextmanager
def _connection(bind: str | sqlalchemy.URL | Engine) -> Iterator[Connection]:
    """A connection outside any transaction (Alembic begins its own)."""
    if isinstance(bind, Engine):
        with bind.connect() as connection:
            yield connection
        return
    engine = create_engine(bind, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def config(connection: Connection | None = None) -> Config:
    """An Alembic config for the packaged migrations, optionally bound to ``connection``.

    Useful for Alembic commands this module does not wrap (``history``, ``stamp``).
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(bind: str | sqlalchemy.URL | Engine, revision: str = "heads") -> None:
    """Upgrade the database to ``revision`` (default: the latest) in one transaction.

    Running it again when the database is up to date does nothing.
    """
    with _connection(bind) as connection:
        command.upgrade(config(connection), revision)


def downgrade(bind: str | sqlalchemy.URL | Engine, revision: str) -> None:
    """Downgrade the database to ``revision`` (``"base"`` drops sqlq_orm's tables)."""
    with _connection(bind) as connection:
        command.downgrade(config(connection), revision)


def current(bind: str | sqlalchemy.URL | Engine) -> set[str]:
    """The revisions the database is at (empty before the first upgrade)."""
    options = context_options(target_metadata())
    with _connection(bind) as connection:
        context = MigrationContext.configure(
            connection, opts={"version_table": options["version_table"]}
        )
        return set(context.get_current_heads())


def check(bind: str | sqlalchemy.URL | Engine) -> list[Any]:
    """Differences between the models and the database, as Alembic's autogenerate sees
    them (``alembic check``); an empty list when they agree.

    Only sqlq_orm's own tables are compared; a host app's tables are ignored.
    """
    with _connection(bind) as connection:
        context = MigrationContext.configure(connection, opts=context_options(target_metadata()))
        return list(compare_metadata(context, target_metadata()))
