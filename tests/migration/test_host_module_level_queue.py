"""A host app's module-level queue: importing it reads nothing; its first use checks.

The README builds the queue at module level (``queue = sqlq_orm.Queue(engine)`` in the
app's ``db`` module), and a host's ``migrations/env.py`` commonly imports that module for
its engine. ``Queue(...)`` used to read the schema when constructed, so the first
``alembic upgrade head`` on a fresh database (every CI run, every first deploy) failed
with ``SchemaBehindCode``, and importing the app needed a reachable database.
"""

from __future__ import annotations

import textwrap

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm.errors import SchemaBehindCode
from sqlq_orm.migrations import NEWEST_REVISION
from tests.support.alembic_projects import run_alembic, run_python

HOST_DB = """
import os

import sqlq_orm

engine = sqlq_orm.create_engine(os.environ["APP_DATABASE_URL"])
queue = sqlq_orm.Queue(engine)
"""

# The host's env.py takes its engine from the app's db module, as apps do.
ENV_IMPORTING_THE_APP = """
from alembic import context

from sqlq_orm.migrations import safe_migration

import host_db

with host_db.engine.connect() as connection:
    with safe_migration(connection):
        context.configure(connection=connection, target_metadata=None)
        with context.begin_transaction():
            context.run_migrations()
"""

FIRST_REVISION = f"""
from alembic import op

import sqlq_orm.migrations

revision = "c1_first"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    sqlq_orm.migrations.upgrade(op, to="{NEWEST_REVISION}")


def downgrade():
    sqlq_orm.migrations.downgrade(op, from_="{NEWEST_REVISION}")
"""

ENQUEUE = """
from host_db import queue

print(queue.enqueue("send_invoice", {"n": 1}).id)
"""


def host_project(root, url: str) -> None:
    versions = root / "migrations" / "versions"
    versions.mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(ENV_IMPORTING_THE_APP)
    (versions / "c1_first.py").write_text(FIRST_REVISION)
    (root / "host_db.py").write_text(HOST_DB)
    (root / "alembic.ini").write_text(
        textwrap.dedent(
            """\
            [alembic]
            script_location = %(here)s/migrations
            prepend_sys_path = %(here)s
            path_separator = space
            version_locations = %(here)s/migrations/versions
            """
        )
    )


def test_an_env_py_importing_a_module_level_queue_upgrades_a_fresh_database(db_url, tmp_path):
    host_project(tmp_path, db_url)

    done = run_alembic(tmp_path, "upgrade", "head", check=False, APP_DATABASE_URL=db_url)

    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "enqueue.py").write_text(ENQUEUE)
    enqueued = run_python(tmp_path, "enqueue.py", APP_DATABASE_URL=db_url)
    assert enqueued.stdout.strip() == "1"


def test_a_queue_on_an_unreachable_database_constructs_without_touching_it():
    for url in (
        "postgresql+psycopg://nobody@127.0.0.1:1/none",
        "mysql+pymysql://nobody@127.0.0.1:1/none",
    ):
        engine = sqlq_orm.create_engine(url)
        queue = sqlq_orm.Queue(engine)  # no connection attempted

        assert engine.pool.checkedout() == 0 and engine.pool.checkedin() == 0
        with pytest.raises(sqlalchemy.exc.OperationalError):
            queue.enqueue("a")  # the first use connects, and says it cannot
        engine.dispose()


def test_the_schema_is_checked_at_the_first_use_and_again_until_it_passes(db_url):
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine)  # an empty database: constructing reads nothing

    for _ in range(2):
        with pytest.raises(SchemaBehindCode, match="has no table sqlq_jobs"):
            queue.enqueue("a")

    sqlq_orm.migrate.upgrade(engine)
    assert queue.enqueue("a").id == 1
    engine.dispose()


def test_no_schema_check_runs_while_alembic_runs_migrations(tmp_path):
    from alembic.config import Config
    from alembic.runtime.environment import EnvironmentContext
    from alembic.script import ScriptDirectory

    from sqlq_orm.queue.schema import inside_migration

    engine = sqlq_orm.create_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    queue = sqlq_orm.Queue(engine)
    config = Config()
    config.set_main_option("script_location", "sqlq_orm:migrations")

    with EnvironmentContext(config, ScriptDirectory.from_config(config)):
        assert inside_migration()
        # A migration that uses the app's queue gets the database as it stands, unchecked.
        with pytest.raises(sqlalchemy.exc.OperationalError, match="no such table"):
            queue.counts_by_status()

    assert not inside_migration()
    with pytest.raises(SchemaBehindCode):  # after the migration: checked at the next use
        queue.counts_by_status()
    engine.dispose()
