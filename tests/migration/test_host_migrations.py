"""A host app's own Alembic running sqlq's schema: what its ``env.py`` and revisions meet.

Each test writes a small host Alembic project into ``tmp_path`` (``alembic.ini``,
``migrations/env.py``, revisions) and runs the real ``alembic`` command line on it, on a
SQLite file and (where the behaviour is not SQLite's own) on PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, func, select
from sqlalchemy.orm import DeclarativeBase

import sqlq_orm
from sqlq_orm import (
    JobAttemptMixin,
    JobDependencyMixin,
    JobEventMixin,
    JobMixin,
    QueueControlMixin,
    ScheduleMixin,
    WorkerMixin,
)
from sqlq_orm.db.tables import Models
from sqlq_orm.schema.models import Job, JobAttempt, JobEvent, WorkerRecord
from tests.support.faultkit import drop_index_sql, is_mysql
from tests.support.old_rows import seed_0001_history

REPO_ROOT = Path(__file__).resolve().parents[2]

UNSAFE_ENV = """
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
"""

SAFE_ENV = """
    from sqlq_orm.migrations import safe_migration

    with safe_migration(connection):
        context.configure(connection=connection, target_metadata=None)
        with context.begin_transaction():
            context.run_migrations()
"""

ENV_PY = """
from alembic import context

import sqlq_orm

engine = sqlq_orm.create_engine(context.config.get_main_option("sqlalchemy.url"))
with engine.connect() as connection:
{body}
engine.dispose()
"""

ORDERS_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "a1_orders"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table("orders", sa.Column("id", sa.Integer, primary_key=True))


def downgrade():
    op.drop_table("orders")
"""

# Rebuilds sqlq_jobs on SQLite: batch mode copies the table, drops it, renames the copy.
ORDER_ID_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "a2_order_id"
down_revision = "a1_orders"
branch_labels = None
depends_on = "sqlq_0001"


def upgrade():
    with op.batch_alter_table("sqlq_jobs") as batch_op:
        batch_op.add_column(sa.Column("order_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_sqlq_jobs_order_id", "orders", ["order_id"], ["id"], ondelete="SET NULL"
        )


def downgrade():
    with op.batch_alter_table("sqlq_jobs") as batch_op:
        batch_op.drop_constraint("fk_sqlq_jobs_order_id", type_="foreignkey")
        batch_op.drop_column("order_id")
"""


def run_alembic(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``alembic`` in ``root``; fail with its output when ``check`` and it fails."""
    env = {k: v for k, v in os.environ.items() if k != "SQLQ_DATABASE_URL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def make_host_project(
    root: Path, url: str, *, env_body: str, revisions: dict[str, str], sqlq_versions: bool = True
) -> None:
    """Write a host Alembic project; ``sqlq_versions`` adds sqlq's revisions to it."""
    versions = root / "migrations" / "versions"
    versions.mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(ENV_PY.format(body=env_body))
    for name, text in revisions.items():
        (versions / f"{name}.py").write_text(text)
    locations = "%(here)s/migrations/versions"
    if sqlq_versions:
        locations += " sqlq_orm.migrations:versions"
    (root / "alembic.ini").write_text(
        textwrap.dedent(
            f"""\
            [alembic]
            script_location = %(here)s/migrations
            prepend_sys_path = %(here)s
            path_separator = space
            version_locations = {locations}
            sqlalchemy.url = {url.replace("%", "%%")}
            """
        )
    )


def seed_history(url: str) -> None:
    """Three jobs, two of them run to success: 3 jobs, 2 attempts, 9 events.

    Through sqlq_0001's tables only, so it also seeds a database at that revision."""
    engine = sqlq_orm.create_engine(url)
    tables_0001 = Models(job=Job, attempt=JobAttempt, event=JobEvent, worker=WorkerRecord)
    queue = sqlq_orm.Queue(engine, clock=sqlq_orm.PinnedClock(1_700_000_000), models=tables_0001)
    for n in range(3):
        queue.enqueue("send_invoice", {"invoice": n})
    for lease in queue.claim("worker-1", limit=2):
        queue.succeed(queue.start(lease))
    engine.dispose()


def row_counts(url: str) -> tuple[int, int, int]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return tuple(  # type: ignore[return-value]
                int(connection.scalar(select(func.count()).select_from(model)))
                for model in (Job, JobAttempt, JobEvent)
            )
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'app.db'}"


def host_with_history(root: Path, url: str, env_body: str) -> None:
    """A host project at its first revision plus sqlq's, with history in the queue."""
    make_host_project(
        root,
        url,
        env_body=env_body,
        revisions={"a1_orders": ORDERS_REVISION, "a2_order_id": ORDER_ID_REVISION},
    )
    run_alembic(root, "upgrade", "a1_orders")
    run_alembic(root, "upgrade", "sqlq@head")
    seed_history(url)
    assert row_counts(url) == (3, 2, 9)


def test_host_rebuild_of_sqlq_jobs_inside_safe_migration_keeps_every_row(sqlite_url, tmp_path):
    host_with_history(tmp_path, sqlite_url, SAFE_ENV)

    run_alembic(tmp_path, "upgrade", "heads")

    assert row_counts(sqlite_url) == (3, 2, 9)


def test_host_rebuild_of_sqlq_jobs_inside_safe_migration_keeps_the_claim_order(
    sqlite_url, tmp_path
):
    host_with_history(tmp_path, sqlite_url, SAFE_ENV)

    run_alembic(tmp_path, "upgrade", "heads")

    engine = sqlalchemy.create_engine(sqlite_url)
    with engine.connect() as connection:
        key_columns = connection.exec_driver_sql("PRAGMA index_xinfo(ix_sqlq_jobs_claim)").all()
    engine.dispose()
    assert [(row[2], row[3]) for row in key_columns if row[5]] == [
        ("queue", 0), ("status", 0), ("priority", 1), ("run_at", 0), ("id", 0),
    ]  # fmt: skip


def test_host_rebuild_of_sqlq_jobs_with_foreign_keys_on_is_refused(sqlite_url, tmp_path):
    host_with_history(tmp_path, sqlite_url, UNSAFE_ENV)

    done = run_alembic(tmp_path, "upgrade", "heads", check=False)

    assert done.returncode != 0
    assert "safe_migration" in done.stderr
    assert "sqlq_job_attempts" in done.stderr
    assert row_counts(sqlite_url) == (3, 2, 9)


def test_dropping_a_table_whose_rows_others_cascade_from_is_refused(sqlite_url):
    engine = sqlq_orm.create_engine(sqlite_url)
    sqlq_orm.Base.metadata.create_all(engine)
    seed_history(sqlite_url)

    with (
        pytest.raises(sqlq_orm.SqlqError, match="sqlq_job_events.job_id"),
        engine.begin() as connection,
    ):
        connection.exec_driver_sql("DROP TABLE sqlq_jobs")

    assert row_counts(sqlite_url) == (3, 2, 9)
    sqlq_orm.Base.metadata.drop_all(engine)  # children first: nothing to refuse
    assert sqlalchemy.inspect(engine).get_table_names() == []
    engine.dispose()


def test_safe_migration_refuses_a_connection_already_in_a_transaction(db_url):
    from sqlq_orm.migrations import safe_migration

    engine = sqlq_orm.create_engine(db_url)
    with engine.connect() as connection:
        connection.exec_driver_sql("SELECT 1")  # autobegins

        with (
            pytest.raises(sqlq_orm.SqlqError, match="outside any transaction"),
            safe_migration(connection),
        ):
            pass
    engine.dispose()


# ------------------------------------------------- one head: sqlq's steps in a host revision

ONE_HEAD_REVISION = """
import sqlalchemy as sa
from alembic import op

import sqlq_orm.migrations

revision = "b1_first"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table("orders", sa.Column("id", sa.Integer, primary_key=True))
    sqlq_orm.migrations.upgrade(op, to="sqlq_0001")


def downgrade():
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0001")
    op.drop_table("orders")
"""

# sqlq_orm ships newer revisions: the host writes a new revision for them, as
# docs/howto/alembic.md says.
SECOND_HEAD_REVISION = """
from alembic import op

import sqlq_orm.migrations

revision = "b2_second"
down_revision = "b1_first"
branch_labels = None
depends_on = None


def upgrade():
    sqlq_orm.migrations.upgrade(op, from_="sqlq_0001", to="{newest}")


def downgrade():
    sqlq_orm.migrations.downgrade(op, from_="{newest}", to="sqlq_0001")
""".replace("{newest}", max(sqlq_orm.migrate.newest_revisions()))

SQLQ_TABLES = set(sqlq_orm.Base.metadata.tables)
# sqlq_0002 adds the schedules, sqlq_0003 the dependencies, sqlq_0009 the queue controls
SQLQ_0001_TABLES = SQLQ_TABLES - {"sqlq_schedules", "sqlq_job_dependencies", "sqlq_queues"}


def host_tables(url: str) -> set[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        return set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def host_heads(url: str) -> set[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            query = sqlalchemy.text("SELECT version_num FROM alembic_version")
            return set(connection.scalars(query))
    finally:
        engine.dispose()


def test_host_revision_applies_sqlq_steps_and_keeps_one_head(db_url, tmp_path):
    make_host_project(
        tmp_path,
        db_url,
        env_body=SAFE_ENV,
        revisions={"b1_first": ONE_HEAD_REVISION},
        sqlq_versions=False,
    )

    run_alembic(tmp_path, "upgrade", "head")

    assert host_heads(db_url) == {"b1_first"}
    assert host_tables(db_url) == SQLQ_0001_TABLES | {"orders", "alembic_version"}
    run_alembic(tmp_path, "downgrade", "base")
    assert host_tables(db_url) == {"alembic_version"}
    run_alembic(tmp_path, "upgrade", "head")


def test_host_revision_takes_sqlq_from_0001_to_the_newest_with_jobs_in_place(db_url, tmp_path):
    make_host_project(
        tmp_path,
        db_url,
        env_body=SAFE_ENV,
        revisions={"b1_first": ONE_HEAD_REVISION, "b2_second": SECOND_HEAD_REVISION},
        sqlq_versions=False,
    )
    run_alembic(tmp_path, "upgrade", "b1_first")
    seed_0001_history(db_url)

    run_alembic(tmp_path, "upgrade", "head")

    assert host_heads(db_url) == {"b2_second"}
    assert host_tables(db_url) == SQLQ_TABLES | {"orders", "alembic_version"}
    assert sqlq_orm.migrate.check(db_url) == []
    assert row_counts(db_url) == (3, 2, 9)
    engine = sqlq_orm.create_engine(db_url)
    assert sqlq_orm.invariants.check(engine) == []
    engine.dispose()
    run_alembic(tmp_path, "downgrade", "b1_first")
    assert host_tables(db_url) == SQLQ_0001_TABLES | {"orders", "alembic_version"}


def test_sqlq_steps_outside_a_revision_say_where_they_belong():
    from alembic import op

    with pytest.raises(sqlq_orm.SqlqError, match="inside an Alembic revision"):
        sqlq_orm.migrations.upgrade(op, to="sqlq_0001")


def test_sqlq_steps_to_an_unknown_revision_name_the_known_ones():
    from alembic import op

    with pytest.raises(sqlq_orm.SqlqError, match="unknown sqlq revision 'sqlq_9999'"):
        sqlq_orm.migrations.upgrade(op, to="sqlq_9999")


# ----------------------------- names: sqlq's revisions create what a host base declares


class PlainHostBase(DeclarativeBase):
    """No naming convention: every name comes from the mixins."""


class ConventionHostBase(DeclarativeBase):
    """A naming convention unlike sqlq's own."""

    metadata = MetaData(
        naming_convention={
            "ix": "%(column_0_label)s_idx",
            "uq": "%(table_name)s_%(column_0_name)s_key",
            "ck": "%(table_name)s_%(constraint_name)s_check",
            "fk": "%(table_name)s_%(column_0_name)s_fkey",
            "pk": "%(table_name)s_pkey",
        }
    )


def bind_mixins(base: type) -> MetaData:
    """The sqlq tables under their default names on ``base``; its metadata."""
    mixins = {
        "Job": JobMixin,
        "JobAttempt": JobAttemptMixin,
        "JobEvent": JobEventMixin,
        "Worker": WorkerMixin,
        "Schedule": ScheduleMixin,
        "JobDependency": JobDependencyMixin,
        "QueueControl": QueueControlMixin,
    }
    for name, mixin in mixins.items():
        type(name, (mixin, base), {"__module__": __name__})
    return base.metadata


HOST_METADATA = {
    "no-convention": bind_mixins(PlainHostBase),
    "own-convention": bind_mixins(ConventionHostBase),
}


def constraint_names(table: sqlalchemy.Table) -> dict[str, Any]:
    return {
        "pk": table.primary_key.name,
        "fks": sorted(fk.name for fk in table.foreign_key_constraints),
        "checks": sorted(
            c.name for c in table.constraints if isinstance(c, sqlalchemy.CheckConstraint)
        ),
        "uniques": sorted(
            c.name for c in table.constraints if isinstance(c, sqlalchemy.UniqueConstraint)
        ),
        "indexes": sorted(ix.name for ix in table.indexes),
    }


@pytest.mark.parametrize("metadata", HOST_METADATA.values(), ids=HOST_METADATA.keys())
def test_sqlq_revisions_create_every_name_a_host_base_declares(db_url, metadata):
    sqlq_orm.migrate.upgrade(db_url)
    engine = sqlalchemy.create_engine(db_url)

    reflected = MetaData()
    reflected.reflect(engine, only=sorted(SQLQ_TABLES))
    with engine.connect() as connection:
        options = {"target_metadata": metadata, "compare_type": True}
        options["include_name"] = lambda name, kind, parents: kind != "table" or name in SQLQ_TABLES
        differences = compare_metadata(
            MigrationContext.configure(connection, opts=options), metadata
        )
    engine.dispose()

    for name in SQLQ_TABLES:
        declared = constraint_names(metadata.tables[name])
        stored = constraint_names(reflected.tables[name])
        if is_mysql(engine):
            stored["pk"] = declared["pk"]  # MySQL names every primary key PRIMARY
            # ... and reflects a unique constraint as the unique index it is made of.
            uniques = set(stored["indexes"]) & set(declared["uniques"])
            stored["uniques"] = sorted(set(stored["uniques"]) | uniques)
            stored["indexes"] = sorted(set(stored["indexes"]) - uniques)
        assert stored == declared, name
    assert differences == []


# ------------------------------------------------------- wrong setups: say what to do


def test_host_revision_depending_on_sqlq_without_its_versions_says_what_to_add(
    sqlite_url, tmp_path
):
    make_host_project(
        tmp_path,
        sqlite_url,
        env_body=SAFE_ENV,
        revisions={"a1_orders": ORDERS_REVISION, "a2_order_id": ORDER_ID_REVISION},
        sqlq_versions=False,
    )

    done = run_alembic(tmp_path, "upgrade", "heads", check=False)

    assert done.returncode != 0
    assert "sqlq_orm.migrations:versions to version_locations" in done.stderr


def test_sqlq_migrate_on_a_database_the_host_alembic_manages_says_use_alembic(db_url, tmp_path):
    make_host_project(
        tmp_path,
        db_url,
        env_body=SAFE_ENV,
        revisions={"b1_first": ONE_HEAD_REVISION},
        sqlq_versions=False,
    )
    run_alembic(tmp_path, "upgrade", "head")

    with pytest.raises(sqlq_orm.SqlqError, match="managed by your app's own Alembic") as refused:
        sqlq_orm.migrate.upgrade(db_url)

    # One head: `alembic upgrade head`, and how to take sqlq's newer revisions.
    assert "run `alembic upgrade head` in the app" in str(refused.value)
    assert "upgrade heads" not in str(refused.value)
    assert "sqlq_orm.migrations.upgrade(op, to=" in str(refused.value)

    assert sqlq_orm.migrations.VERSION_TABLE not in host_tables(db_url)


# ------------------------------------------ the claim index's DESC, lost in a rebuild

REBUILD_REVISION = """
from alembic import op

revision = "a3_rebuild"
down_revision = "a1_orders"
branch_labels = None
depends_on = "sqlq_0001"


def upgrade():
    with op.batch_alter_table("sqlq_jobs", recreate="always"):
        pass


def downgrade():
    pass
"""

# Without safe_migration (which would keep the DESC), but with sqlq_orm.migrations
# imported, as any env.py using sqlq's helpers has it.
CHECKING_ENV = """
    import sqlalchemy as sa
    import sqlq_orm.migrations

    metadata = sqlq_orm.Base.metadata  # sqlq's tables, plus the host's orders:
    sa.Table("orders", metadata, sa.Column("id", sa.Integer, primary_key=True))
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()
"""


def test_claim_index_without_desc_is_a_schema_difference(db_url):
    sqlq_orm.migrate.upgrade(db_url)
    engine = sqlalchemy.create_engine(db_url)
    with engine.begin() as connection:
        connection.exec_driver_sql(drop_index_sql(engine, "ix_sqlq_jobs_claim", "sqlq_jobs"))
        connection.exec_driver_sql(
            "CREATE INDEX ix_sqlq_jobs_claim ON sqlq_jobs (queue, status, priority, run_at, id)"
        )
    engine.dispose()

    differences = sqlq_orm.migrate.check(db_url)

    assert [(d[0], d[1].name) for d in differences] == [
        ("remove_index", "ix_sqlq_jobs_claim"),
        ("add_index", "ix_sqlq_jobs_claim"),
    ]


def test_host_alembic_check_reports_the_desc_a_sqlite_rebuild_lost(sqlite_url, tmp_path):
    make_host_project(
        tmp_path,
        sqlite_url,
        env_body=CHECKING_ENV,
        revisions={"a1_orders": ORDERS_REVISION, "a3_rebuild": REBUILD_REVISION},
    )

    run_alembic(tmp_path, "upgrade", "heads")

    done = run_alembic(tmp_path, "check", check=False)
    assert done.returncode != 0
    assert "ix_sqlq_jobs_claim" in done.stdout + done.stderr


# ------------------------------------ the branch way: --head <app head> --depends-on sqlq

BRANCH_MODELS = """
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqlq_orm import (
    JobAttemptMixin,
    JobDependencyMixin,
    JobEventMixin,
    JobMixin,
    ScheduleMixin,
    WorkerMixin,
)


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)


class Job(JobMixin, Base):
    order_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("orders.id", ondelete="SET NULL", name="fk_sqlq_jobs_order_id")
    )


class JobAttempt(JobAttemptMixin, Base):
    pass


class JobEvent(JobEventMixin, Base):
    pass


class Worker(WorkerMixin, Base):
    pass


class Schedule(ScheduleMixin, Base):
    pass


class JobDependency(JobDependencyMixin, Base):
    pass
"""

BRANCH_ENV = """
    from host_models import Base
    from sqlq_orm.migrations import safe_migration

    with safe_migration(connection):
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            compare_type=True,
            render_as_batch=True,
        )
        with context.begin_transaction():
            context.run_migrations()
"""


def test_branch_way_autogenerates_a_host_revision_on_sqlq_tables(db_url, tmp_path):
    make_host_project(
        tmp_path, db_url, env_body=BRANCH_ENV, revisions={"a1_orders": ORDERS_REVISION}
    )
    (tmp_path / "host_models.py").write_text(BRANCH_MODELS)
    template = REPO_ROOT / "examples" / "hostapp" / "migrations" / "script.py.mako"
    (tmp_path / "migrations" / "script.py.mako").write_text(template.read_text())
    run_alembic(tmp_path, "upgrade", "heads")

    run_alembic(
        tmp_path, "revision", "--autogenerate", "--head", "a1_orders",
        "--depends-on", max(sqlq_orm.migrate.newest_revisions()),
        "--rev-id", "a2_auto", "-m", "order_id",
    )  # fmt: skip

    assert run_alembic(tmp_path, "upgrade", "head", check=False).returncode != 0  # two heads
    run_alembic(tmp_path, "upgrade", "heads")
    assert host_heads(db_url) == {"a2_auto"}  # it depends on sqlq's newest
    assert "No new upgrade operations" in run_alembic(tmp_path, "check").stdout
