"""A host's own Alembic from ``alembic init -t async``, running sqlq's revisions.

The template's ``do_run_migrations`` runs inside ``connection.run_sync``: the
connection is synchronous there, but its driver (aiosqlite, asyncpg, aiomysql) is
not. ``safe_migration`` wraps it exactly as in the synchronous template (docs/howto/alembic.md,
"asyncio env.py"); the host revision creates sqlq's tables, and a later host revision
fails once, then the run is repeated.
"""

from __future__ import annotations

import sqlalchemy

import sqlq_orm
from tests.support.aio_bridge import async_url
from tests.support.alembic_projects import alembic_init, run_alembic

TEMPLATE_BODY = """    context.configure(connection=connection, target_metadata=target_metadata)

    with context.begin_transaction():
        context.run_migrations()
"""

SAFE_BODY = """    from sqlq_orm.migrations import safe_migration

    with safe_migration(connection):
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()
"""

FIRST = """
import sqlalchemy as sa
from alembic import op

import sqlq_orm.migrations

revision = "a1_first"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table("orders", sa.Column("id", sa.Integer, primary_key=True))
    sqlq_orm.migrations.upgrade(op, to=sqlq_orm.migrations.NEWEST_REVISION)


def downgrade():
    sqlq_orm.migrations.downgrade(op, from_=sqlq_orm.migrations.NEWEST_REVISION)
    op.drop_table("orders")
"""

SECOND = """
import os

import sqlalchemy as sa
from alembic import op

revision = "a2_second"
down_revision = "a1_first"
branch_labels = None
depends_on = None


def upgrade():
    if os.environ.get("FAIL_ONCE"):
        raise RuntimeError("injected failure before the revision's first statement")
    op.create_table("invoices", sa.Column("id", sa.Integer, primary_key=True))


def downgrade():
    op.drop_table("invoices")
"""


def tables(url: str) -> set[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        return set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def recorded(url: str) -> set[str]:
    if "alembic_version" not in tables(url):
        return set()
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return set(
                connection.scalars(sqlalchemy.text("SELECT version_num FROM alembic_version"))
            )
    finally:
        engine.dispose()


def test_async_template_runs_sqlq_revisions_in_safe_migration_and_reruns_after_a_failure(
    db_url, tmp_path
):
    env_py = alembic_init(tmp_path, async_url(db_url, "async"), template="async")
    text = env_py.read_text()
    assert TEMPLATE_BODY in text
    env_py.write_text(text.replace(TEMPLATE_BODY, SAFE_BODY))
    versions = tmp_path / "migrations" / "versions"
    (versions / "a1_first.py").write_text(FIRST)
    (versions / "a2_second.py").write_text(SECOND)

    failed = run_alembic(tmp_path, "upgrade", "head", check=False, FAIL_ONCE="1")

    assert failed.returncode != 0
    assert "injected failure" in failed.stderr
    if sqlalchemy.make_url(db_url).get_backend_name() == "mysql":
        # DDL commits as it goes: each revision is recorded as it ends.
        assert recorded(db_url) == {"a1_first"}
    else:
        assert tables(db_url) == set()  # one transaction: nothing is left half-made
    run_alembic(tmp_path, "upgrade", "head")
    assert recorded(db_url) == {"a2_second"}
    assert sqlq_orm.migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine, clock=sqlq_orm.PinnedClock(1_700_000_000))
    parent = queue.enqueue("a").id
    queue.enqueue("b", depends_on=[parent])
    for lease in queue.claim("worker-1", limit=5):
        queue.succeed(queue.start(lease))
    assert sqlq_orm.invariants.check(queue) == []
    engine.dispose()
    run_alembic(tmp_path, "downgrade", "base")
    assert tables(db_url) == {"alembic_version"}
