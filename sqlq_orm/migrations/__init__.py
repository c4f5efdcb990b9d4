"""sqlq_orm's Alembic migrations, shipped inside the package.

Three ways to run them:

- ``sqlq migrate`` or :func:`sqlq_orm.migrate.upgrade` (standalone, from an installed
  wheel; this directory is the ``script_location``);
- ``alembic upgrade head`` from a checkout of the repository (``alembic.ini`` at the
  root; ``alembic/env.py`` there runs :data:`ENV_SCRIPT`);
- from a host app's own Alembic setup, one of two ways: call :func:`upgrade` /
  :func:`downgrade` inside the host's own revisions (one head, the host's usual
  commands), or add :data:`VERSIONS_DIR` (the resource ``sqlq_orm.migrations:versions``)
  to its ``version_locations`` and run ``alembic upgrade heads`` (a second branch,
  labelled :data:`BRANCH_LABEL`). Either way the host's ``env.py`` runs the migrations
  inside :func:`safe_migration`.

Standalone runs record their revision in :data:`VERSION_TABLE`, not in
``alembic_version``, so they never collide with a host app's own history.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData

# Imported for its side effect too: registers compare_index_order with autogenerate.
# Imported for its side effect: the guard of a job table's history through Alembic's
# SQLite rebuilds, for an env.py that imports only this package.
from sqlq_orm.db.backends import sqlite_rebuilds  # noqa: F401
from sqlq_orm.migrations.compare import compare_index_order
from sqlq_orm.migrations.host import downgrade, place_app_revisions, safe_migration, upgrade

__all__ = [
    "BRANCH_LABEL",
    "NEWEST_REVISION",
    "VERSIONS_DIR",
    "VERSION_TABLE",
    "compare_index_order",
    "downgrade",
    "place_app_revisions",
    "safe_migration",
    "upgrade",
]

MIGRATIONS_DIR = Path(str(resources.files(__name__)))
"""The Alembic ``script_location`` of the standalone setup."""

VERSIONS_DIR = MIGRATIONS_DIR / "versions"
"""Where the revisions live; a host app adds this to its ``version_locations``."""

ENV_SCRIPT = MIGRATIONS_DIR / "env.py"
"""The one Alembic ``env.py`` of the standalone setup."""

VERSION_TABLE = "sqlq_alembic_version"
"""Version table of standalone runs (a host app's own Alembic keeps its own)."""

BRANCH_LABEL = "sqlq"
"""Branch label of the revisions: ``alembic upgrade sqlq@head`` in a host app."""

DEFAULT_DATABASE_URL = "sqlite:///sqlq.db"
"""Used when no URL is given anywhere: a SQLite file in the working directory."""

DATABASE_URL_ENV = "SQLQ_DATABASE_URL"
"""Environment variable naming the database when no URL is passed."""


NEWEST_REVISION: str
"""The newest sqlq revision this release ships (``"sqlq_0005"``...), read from the
revisions themselves on first use: ``sqlq_orm.migrations.upgrade(op,
to=sqlq_orm.migrations.NEWEST_REVISION)`` in a host revision written for this release."""


def __getattr__(name: str) -> str:
    # Computed on first use: reading the revisions imports every one of them.
    if name == "NEWEST_REVISION":
        return newest_revision()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def newest_revision() -> str:
    """The head of sqlq's revisions (see :data:`NEWEST_REVISION`)."""
    return ordered_revisions()[-1]


@functools.cache
def ordered_revisions() -> list[str]:
    """sqlq's revision ids, oldest first (one line: sqlq's revisions never branch)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    return [str(script.revision) for script in ScriptDirectory.from_config(cfg).walk_revisions()][
        ::-1
    ]


def target_metadata() -> MetaData:
    """The metadata the revisions must match: the library's default models."""
    from sqlq_orm.schema.models import Base

    return Base.metadata


def context_options(metadata: MetaData) -> dict[str, Any]:
    """Options for ``context.configure`` / ``MigrationContext.configure``.

    Shared by ``env.py`` and :func:`sqlq_orm.migrate.check`, so ``alembic check`` and
    ``sqlq_orm.migrate.check`` compare the same way.
    """
    tables = set(metadata.tables)

    def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
        # Only sqlq's own tables: in a database shared with a host app, the host's
        # tables are not ours to create or drop.
        if type_ == "table":
            return name in tables
        return True

    return {
        "target_metadata": metadata,
        "version_table": VERSION_TABLE,
        "include_name": include_name,
        "compare_type": True,
        # Batch mode is how SQLite alters tables; elsewhere it emits plain ALTERs.
        "render_as_batch": True,
        # No transactional_ddl: safe_migration makes one upgrade one transaction where
        # DDL is transactional (SQLite, PostgreSQL) and lets Alembic commit after each
        # revision where it is not (MySQL), so a failed revision keeps the ones before
        # it recorded.
    }
