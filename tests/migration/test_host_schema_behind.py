"""A schema behind the code is refused at the queue's first use, naming what to run.

A host that copied the docs' one-head revision (docs/howto/alembic.md) pinned at
``sqlq_0001`` and never took sqlq's later revisions got a raw
``OperationalError: no column concurrency_key`` at its first enqueue. Now the queue
looks at the schema once, before its first use, and raises
:class:`~sqlq_orm.errors.SchemaBehindCode` naming where the database stands, the
revision this code needs and the command; and ``sqlq_orm.migrations.upgrade(op, to=...)``
without ``from_`` starts from where the database stands.
"""

from __future__ import annotations

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm import migrate
from sqlq_orm.errors import SchemaBehindCode
from sqlq_orm.migrations import NEWEST_REVISION
from sqlq_orm.migrations.standing import PROBES, revision_standing
from tests.migration.test_host_migrations import (
    ONE_HEAD_REVISION,
    SAFE_ENV,
    make_host_project,
    run_alembic,
)

# sqlq_orm shipped newer revisions: the host's next revision names only where to go.
CATCH_UP_REVISION = f"""
from alembic import op

import sqlq_orm.migrations

revision = "b2_catch_up"
down_revision = "b1_first"
branch_labels = None
depends_on = None


def upgrade():
    sqlq_orm.migrations.upgrade(op, to="{NEWEST_REVISION}")


def downgrade():
    sqlq_orm.migrations.downgrade(op, from_="{NEWEST_REVISION}", to="sqlq_0001")
"""


def test_a_host_schema_pinned_at_0001_is_refused_naming_the_revision_and_command(db_url, tmp_path):
    make_host_project(
        tmp_path, db_url, env_body=SAFE_ENV, revisions={"b1_first": ONE_HEAD_REVISION},
        sqlq_versions=False,
    )  # fmt: skip
    run_alembic(tmp_path, "upgrade", "head")
    engine = sqlq_orm.create_engine(db_url)

    queue = sqlq_orm.Queue(engine)
    with pytest.raises(SchemaBehindCode) as refused:
        queue.enqueue("a")

    message = str(refused.value)
    assert "sqlq_jobs.concurrency_key" in message
    assert "stands at sqlq_0001" in message
    assert f'sqlq_orm.migrations.upgrade(op, to="{NEWEST_REVISION}")' in message
    assert "alembic upgrade head" in message
    engine.dispose()


def test_a_host_revision_without_from_takes_sqlq_from_where_the_database_stands(db_url, tmp_path):
    make_host_project(
        tmp_path, db_url, env_body=SAFE_ENV, revisions={"b1_first": ONE_HEAD_REVISION},
        sqlq_versions=False,
    )  # fmt: skip
    run_alembic(tmp_path, "upgrade", "head")
    (tmp_path / "migrations" / "versions" / "b2_catch_up.py").write_text(CATCH_UP_REVISION)

    run_alembic(tmp_path, "upgrade", "head")

    assert migrate.check(db_url) == []
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine)
    queue.enqueue("a", concurrency_key="k")
    with engine.connect() as connection:
        assert revision_standing(connection, sqlq_orm.migrations.ordered_revisions()) == (
            NEWEST_REVISION
        )
    engine.dispose()
    run_alembic(tmp_path, "downgrade", "b1_first")


def test_a_standalone_schema_behind_the_code_is_refused_naming_sqlq_migrate(db_url):
    migrate.upgrade(db_url, "sqlq_0003")
    engine = sqlq_orm.create_engine(db_url)

    with pytest.raises(SchemaBehindCode, match=r"run `sqlq migrate`"):
        sqlq_orm.Queue(engine).enqueue("a")

    migrate.upgrade(db_url)
    sqlq_orm.Queue(engine).enqueue("a")  # up to date: no error
    engine.dispose()


def test_an_empty_database_is_refused_naming_the_tables():
    engine = sqlalchemy.create_engine("sqlite://")
    with pytest.raises(SchemaBehindCode, match="has no table sqlq_jobs"):
        sqlq_orm.Queue(sqlq_orm.configure_engine(engine)).stats()
    engine.dispose()


def test_every_shipped_revision_can_tell_whether_it_is_applied():
    assert set(sqlq_orm.migrations.ordered_revisions()) <= set(PROBES)
