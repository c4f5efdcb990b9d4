"""examples/hostapp, run the way its README tells a user to: its own ``alembic`` command.

The app has its own declarative base, an ``orders`` table, sqlq's tables bound to
its base with two columns of its own, and one Alembic head: its first revision
creates sqlq's tables with ``sqlq_orm.migrations.upgrade(op, ...)``. Every step runs
on a SQLite file and on PostgreSQL, with the URL in ``HOSTAPP_DATABASE_URL``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import sqlq_orm

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "hostapp"


def alembic(url: str, *args: str, config: Path = EXAMPLE / "alembic.ini") -> str:
    """``alembic -c <config> ARGS`` with the app's URL in the environment; its output."""
    env = {k: v for k, v in os.environ.items() if k != "SQLQ_DATABASE_URL"}
    env.update(HOSTAPP_DATABASE_URL=url, PYTHONPATH=str(REPO_ROOT), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(config), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def hostapp() -> Iterator[SimpleNamespace]:
    """The example's own modules (``models``, ``app``, ``worker``), imported as it does."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        modules = {name: importlib.import_module(name) for name in ("models", "app", "worker")}
    finally:
        sys.path.remove(str(EXAMPLE))
    yield SimpleNamespace(**modules)
    for name in modules:
        sys.modules.pop(name, None)


@pytest.fixture
def migrated(db_url, hostapp) -> Iterator[SimpleNamespace]:
    """The example's database at head; its engine and queue."""
    alembic(db_url, "upgrade", "head")
    engine = hostapp.app.make_engine(db_url)
    yield SimpleNamespace(url=db_url, engine=engine, queue=hostapp.app.make_queue(engine))
    engine.dispose()


def counts(engine: sqlalchemy.Engine, *models: type) -> tuple[int, ...]:
    with engine.connect() as connection:
        return tuple(
            int(connection.scalar(select(func.count()).select_from(model))) for model in models
        )


def test_example_upgrade_head_matches_its_models(migrated):
    assert "No new upgrade operations detected" in alembic(migrated.url, "check")


def test_example_job_commits_and_rolls_back_with_the_app_transaction(migrated, hostapp):
    models, app = hostapp.models, hostapp.app

    with Session(migrated.engine) as session:
        app.place_order(session, migrated.queue, number="A-1", tenant_id=7)
        session.rollback()
    assert counts(migrated.engine, models.Order, models.Job) == (0, 0)

    with Session(migrated.engine) as session:
        order = app.place_order(session, migrated.queue, number="A-2", tenant_id=7)
        session.commit()
        order_id = order.id
    assert counts(migrated.engine, models.Order, models.Job) == (1, 1)

    worker = sqlq_orm.Worker(
        migrated.queue,
        hostapp.worker.make_registry(migrated.engine),
        burst=True,
        install_signal_handlers=False,
    )
    worker.run()
    with Session(migrated.engine) as session:
        job = session.scalars(select(models.Job)).one()
        assert (job.status, job.result_ref) == ("SUCCEEDED", "invoice:A-2")
        assert (job.tenant_id, job.order_id) == (7, order_id)


def seed_history(hostapp: SimpleNamespace, engine: sqlalchemy.Engine, queue: sqlq_orm.Queue):
    """Three orders with their jobs, two of them run: 3 jobs, 2 attempts, 9 events."""
    with Session(engine) as session:
        for n in range(3):
            hostapp.app.place_order(session, queue, number=f"B-{n}", tenant_id=n)
        session.commit()
    for lease in queue.claim("worker-1", limit=2):
        queue.succeed(queue.start(lease))


# The example's newest revision: the app's next one revises it.
EXAMPLE_HEAD = max(path.name[:4] for path in (EXAMPLE / "migrations" / "versions").glob("0*.py"))

REBUILD_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "0100"
down_revision = "EXAMPLE_HEAD"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A second foreign key: on SQLite, batch mode rebuilds sqlq_jobs (copy, drop, rename).
    with op.batch_alter_table("sqlq_jobs") as batch_op:
        batch_op.add_column(sa.Column("refund_order_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_sqlq_jobs_refund_order_id_orders", "orders", ["refund_order_id"], ["id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("sqlq_jobs") as batch_op:
        batch_op.drop_constraint("fk_sqlq_jobs_refund_order_id_orders", type_="foreignkey")
        batch_op.drop_column("refund_order_id")
"""


def test_example_second_revision_rebuilding_sqlq_jobs_keeps_the_history(
    migrated, hostapp, tmp_path
):
    project = tmp_path / "hostapp"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    (project / "migrations" / "versions" / "0100_refund_order.py").write_text(
        REBUILD_REVISION.replace("EXAMPLE_HEAD", EXAMPLE_HEAD)
    )
    seed_history(hostapp, migrated.engine, migrated.queue)
    models = hostapp.models
    before = counts(migrated.engine, models.Order, models.Job, models.JobAttempt, models.JobEvent)

    alembic(migrated.url, "upgrade", "head", config=project / "alembic.ini")

    after = counts(migrated.engine, models.Order, models.Job, models.JobAttempt, models.JobEvent)
    assert before == after == (3, 3, 2, 9)
    alembic(migrated.url, "downgrade", EXAMPLE_HEAD, config=project / "alembic.ini")
    assert counts(migrated.engine, models.Job, models.JobAttempt, models.JobEvent) == (3, 2, 9)
    assert "No new upgrade operations detected" in alembic(migrated.url, "check")


def test_example_downgrade_to_base_and_upgrade_again(migrated):
    alembic(migrated.url, "downgrade", "base")

    assert set(sqlalchemy.inspect(migrated.engine).get_table_names()) == {"alembic_version"}
    alembic(migrated.url, "upgrade", "head")
    assert "No new upgrade operations detected" in alembic(migrated.url, "check")


def sqlq(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``sqlq --db URL ARGS`` from the example's directory (its modules importable)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SQLQ_DATABASE_URL", "SQLQ_MODELS")}
    env.update(PYTHONPATH=str(REPO_ROOT), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", url, *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_example_cli_given_the_apps_models_shows_its_columns(migrated, hostapp):
    with Session(migrated.engine) as session:
        hostapp.app.place_order(session, migrated.queue, number="C-1", tenant_id=42)
        session.commit()
    (job_id,) = [lease.job_id for lease in migrated.queue.claim("peek", limit=1)]

    shown = sqlq(migrated.url, "--models", "models:MODELS", "show", str(job_id))
    as_json = sqlq(migrated.url, "--models", "models:MODELS", "show", str(job_id), "--json")

    assert shown.returncode == 0, shown.stderr
    assert "tenant_id 42" in shown.stdout and "order_id " in shown.stdout
    assert '"tenant_id": 42' in as_json.stdout


def test_example_cli_refuses_a_models_name_that_is_not_models(migrated):
    done = sqlq(migrated.url, "--models", "models:Order", "stats")

    (line,) = done.stderr.strip().splitlines()
    assert done.returncode != 0
    assert line.startswith("sqlq: error: --models 'models:Order' names a ")
    assert "not a sqlq_orm.Models" in line
