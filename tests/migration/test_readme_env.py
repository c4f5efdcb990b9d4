"""The documented complete host ``env.py``, run as written: online, and ``--sql`` mode.

The text is ``docs/howto/alembic-env.py`` (the page that shows it includes that file),
so what users copy is what runs here. In ``--sql`` mode every sqlq revision renders on
PostgreSQL and MariaDB, from the base to the newest: ``sqlq_0009`` used to need a live
connection there (its batch ``recreate="always"`` reflected ``sqlq_schedules``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy

from sqlq_orm import migrate
from sqlq_orm.migrations import NEWEST_REVISION
from tests.migration.test_host_migrations import ONE_HEAD_REVISION
from tests.support.alembic_projects import HOST_MODELS, REPO_ROOT, run_alembic

ALEMBIC_INI = """\
[alembic]
script_location = %(here)s/migrations
prepend_sys_path = %(here)s

[loggers]
keys = root,alembic

[handlers]
keys = console

[formatters]
keys = generic

[logger_root]
level = WARNING
handlers = console
qualname =

[logger_alembic]
level = INFO
handlers =
qualname = alembic

[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic

[formatter_generic]
format = %(levelname)-5.5s [%(name)s] %(message)s
"""


ENV_PY = REPO_ROOT / "docs" / "howto" / "alembic-env.py"

TO_NEWEST_REVISION = f"""
from alembic import op

import sqlq_orm.migrations

revision = "b1_first"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    sqlq_orm.migrations.upgrade(op, to="{NEWEST_REVISION}")


def downgrade():
    sqlq_orm.migrations.downgrade(op, from_="{NEWEST_REVISION}")
"""


def documented_env_py() -> str:
    text = ENV_PY.read_text()
    assert "from myapp.models import Base" in text
    return text.replace("from myapp.models import Base", "from host_models import Base")


def project(root: Path, first_revision: str = ONE_HEAD_REVISION) -> None:
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(documented_env_py())
    template = REPO_ROOT / "examples" / "hostapp" / "migrations" / "script.py.mako"
    (root / "migrations" / "script.py.mako").write_text(template.read_text())
    (root / "migrations" / "versions" / "b1_first.py").write_text(first_revision)
    (root / "host_models.py").write_text(HOST_MODELS)
    (root / "alembic.ini").write_text(ALEMBIC_INI)


def test_the_documented_env_py_runs_online_and_prints_sql_offline(db_url, tmp_path):
    project(tmp_path)

    offline = run_alembic(tmp_path, "upgrade", "head", "--sql", DATABASE_URL=db_url)
    online = run_alembic(tmp_path, "upgrade", "head", DATABASE_URL=db_url)

    assert re.search(r"CREATE TABLE [`\"]?sqlq_jobs", offline.stdout)
    assert "Running upgrade  -> b1_first" in online.stderr  # alembic.ini's logging
    engine = sqlalchemy.create_engine(db_url)
    assert "sqlq_jobs" in sqlalchemy.inspect(engine).get_table_names()
    engine.dispose()


@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
def test_every_sqlq_revision_renders_offline_from_base_to_head(db_url, tmp_path):
    project(tmp_path, TO_NEWEST_REVISION)

    # Offline, nothing tells MySQL from MariaDB but the URL (they differ, e.g. in how a
    # CHECK constraint is dropped): a MariaDB script is rendered with mariadb://.
    rendering_url = db_url.replace("mysql+", "mariadb+", 1)
    offline = run_alembic(tmp_path, "upgrade", "head", "--sql", DATABASE_URL=rendering_url)

    assert re.search(r"CREATE TABLE [`\"]?sqlq_jobs", offline.stdout)
    assert "paused_at" in offline.stdout  # sqlq_0009's
    assert "rate_limit" in offline.stdout.lower()  # sqlq_0011's
    assert tables(db_url) == []  # offline: nothing ran

    run_script(db_url, offline.stdout)  # what a DBA would do with it

    assert migrate.check(db_url) == []  # the script built the models' schema
    assert "sqlq_jobs" in tables(db_url)


def tables(url: str) -> list[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        return sqlalchemy.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def run_script(url: str, script: str) -> None:
    """Run an offline script as one multi-statement batch, outside any transaction of
    SQLAlchemy's (the script has its own BEGIN/COMMIT)."""
    options = {}
    if url.startswith("mysql"):
        from pymysql.constants import CLIENT

        options = {"connect_args": {"client_flag": CLIENT.MULTI_STATEMENTS}}
    engine = sqlalchemy.create_engine(url, **options)
    try:
        connection = engine.raw_connection()
        try:
            if hasattr(connection, "autocommit"):
                connection.autocommit = True
            cursor = connection.cursor()
            cursor.execute(script)
            while url.startswith("mysql") and cursor.nextset():
                pass
            cursor.close()
        finally:
            connection.close()
    finally:
        engine.dispose()
