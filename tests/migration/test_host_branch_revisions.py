"""The "second branch" recipe: the app's revisions land in the app's folder.

With sqlq's revisions in ``version_locations``, a plain ``alembic revision
--autogenerate`` based the app's first revision on sqlq's head and wrote it into
sqlq's own folder (site-packages in an install). With
``process_revision_directives=sqlq_orm.migrations.place_app_revisions`` in ``env.py``
(and ``revision_environment = true``), the first and every later revision are the
app's, written to its own folder, with the real ``alembic`` commands as a user types
them.
"""

from __future__ import annotations

import re
import textwrap

import sqlalchemy

from sqlq_orm.migrations import NEWEST_REVISION, VERSIONS_DIR
from tests.migration.test_host_migrations import BRANCH_MODELS, REPO_ROOT, host_heads
from tests.support.alembic_projects import run_alembic

ENV = """
from alembic import context

import sqlq_orm
from host_models import Base
from sqlq_orm.migrations import place_app_revisions, safe_migration

engine = sqlq_orm.create_engine(context.config.get_main_option("sqlalchemy.url"))
with engine.connect() as connection, safe_migration(connection):
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,
        process_revision_directives=place_app_revisions,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
"""


def branch_project(root, url: str) -> None:
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(ENV)
    template = REPO_ROOT / "examples" / "hostapp" / "migrations" / "script.py.mako"
    (root / "migrations" / "script.py.mako").write_text(template.read_text())
    (root / "host_models.py").write_text(BRANCH_MODELS)
    (root / "alembic.ini").write_text(
        textwrap.dedent(
            f"""\
            [alembic]
            script_location = %(here)s/migrations
            prepend_sys_path = %(here)s
            path_separator = space
            version_locations = %(here)s/migrations/versions sqlq_orm.migrations:versions
            revision_environment = true
            sqlalchemy.url = {url.replace("%", "%%")}
            """
        )
    )


def revision_file(root, rev_id: str) -> str:
    (found,) = (root / "migrations" / "versions").glob(f"{rev_id}_*.py")
    return found.read_text()


def test_first_and_later_app_revisions_land_in_the_apps_folder(db_url, tmp_path):
    sqlq_files = set(VERSIONS_DIR.iterdir())
    branch_project(tmp_path, db_url)
    run_alembic(tmp_path, "upgrade", "heads")
    try:
        run_alembic(tmp_path, "revision", "--autogenerate", "--rev-id", "app1", "-m", "orders")
        run_alembic(tmp_path, "upgrade", "heads")
        run_alembic(tmp_path, "revision", "--rev-id", "app2", "-m", "by hand")
    finally:
        strays = set(VERSIONS_DIR.iterdir()) - sqlq_files
        for stray in strays:  # the defect wrote into sqlq's folder: leave it clean
            stray.unlink()

    assert strays == set()
    first = revision_file(tmp_path, "app1")
    assert re.search(r"^down_revision = None", first, re.M), first
    assert f"depends_on = '{NEWEST_REVISION}'" in first or NEWEST_REVISION in first
    assert "create_table('orders'" in first
    assert re.search(r"^down_revision = 'app1'", revision_file(tmp_path, "app2"), re.M)
    run_alembic(tmp_path, "upgrade", "heads")
    assert host_heads(db_url) == {"app2"}  # depends on sqlq's newest, so one head is left
    assert "No new upgrade operations" in run_alembic(tmp_path, "check").stdout
    run_alembic(tmp_path, "downgrade", "app1")
    engine = sqlalchemy.create_engine(db_url)
    assert "orders" in sqlalchemy.inspect(engine).get_table_names()
    engine.dispose()
