"""Host Alembic projects made the way a user makes them: ``alembic init``, then edits.

The tests in ``tests/migration/test_host_*`` write a project into ``tmp_path`` and run
the real ``alembic`` command line on it, in a subprocess (a host's ``env.py`` may
install process-wide listeners, e.g. ``PRAGMA foreign_keys=ON`` on every ``Engine``,
which must not leak into the test process).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy

REPO_ROOT = Path(__file__).resolve().parents[2]

# A host's models, as docs/howto/own-models.md shows them, plus SQLAlchemy's documented foreign-key
# listener for SQLite (on every Engine: the listener the docs recommend).
HOST_MODELS = """
import os

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqlq_orm import (
    JobAttemptMixin,
    JobDependencyMixin,
    JobEventMixin,
    JobMixin,
    Models,
    ScheduleMixin,
    WorkerMixin,
)

NOTE_LENGTH = int(os.environ.get("NOTE_LENGTH", "100"))


@event.listens_for(Engine, "connect")
def set_sqlite_pragma(dbapi_connection, connection_record):
    if "sqlite" in type(dbapi_connection).__module__:  # the docs' recipe is for SQLite
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)


class Job(JobMixin, Base):
    note: Mapped[str | None] = mapped_column(sa.String(NOTE_LENGTH))
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


MODELS = Models(
    job=Job, attempt=JobAttempt, event=JobEvent, worker=Worker, schedule=Schedule,
    dependency=JobDependency,
)
"""

# Run in a subprocess: two jobs, the second depending on the first, both run to success.
SEED_HISTORY = """
import sys

import sqlq_orm
from sqlalchemy.orm import Session

from host_models import MODELS, Order

engine = sqlq_orm.create_engine(sys.argv[1])
queue = sqlq_orm.Queue(engine, models=MODELS, clock=sqlq_orm.PinnedClock(1_700_000_000))
with Session(engine) as session:
    session.add(Order(id=1))
    session.commit()
first = queue.enqueue("a", note="x", order_id=1).id
queue.enqueue("b", depends_on=[first])
for _ in range(2):
    for lease in queue.claim("worker-1", limit=5):
        queue.succeed(queue.start(lease))
engine.dispose()
"""

HISTORY_TABLES = ("sqlq_jobs", "sqlq_job_attempts", "sqlq_job_events", "sqlq_job_dependencies")
SEEDED_HISTORY = (2, 2, 9, 1)
"""Rows per table of :data:`HISTORY_TABLES` after :data:`SEED_HISTORY`."""


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SQLQ_DATABASE_URL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def run_python(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` in ``root``, failing with its output if it fails."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def run_alembic(
    root: Path, *args: str, check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``alembic ARGS`` in ``root``; fail with its output when ``check`` and it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=root,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def alembic_init(root: Path, url: str, *, template: str = "generic") -> Path:
    """``alembic init -t TEMPLATE migrations`` in ``root``, pointed at ``url`` and at the
    host's models (``host_models.py``); returns the ``env.py`` to edit."""
    run_alembic(root, "init", "-t", template, "migrations")
    ini = root / "alembic.ini"
    lines = [
        f"sqlalchemy.url = {url.replace('%', '%%')}" if line.startswith("sqlalchemy.url") else line
        for line in ini.read_text().splitlines()
    ]
    ini.write_text("\n".join(lines) + "\n")
    (root / "host_models.py").write_text(HOST_MODELS)
    # The one line a host adds to the template when it autogenerates sqlq's tables
    # (docs/howto/alembic.md): Alembic writes a column type by its import path, and payload
    # and result are sqlq's JSON type (sqlq_0010).
    script = root / "migrations" / "script.py.mako"
    template = script.read_text()
    assert "import sqlalchemy as sa\n" in template
    script.write_text(
        template.replace(
            "import sqlalchemy as sa\n",
            "import sqlalchemy as sa\nimport sqlq_orm.schema.json_text\n",
            1,
        )
    )
    env_py = root / "migrations" / "env.py"
    text = env_py.read_text()
    assert "target_metadata = None" in text
    env_py.write_text(
        text.replace(
            "target_metadata = None",
            "from host_models import Base\ntarget_metadata = Base.metadata",
        )
    )
    return env_py


def row_counts(url: str, tables: tuple[str, ...] = HISTORY_TABLES) -> tuple[int, ...]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return tuple(
                int(connection.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())
                for table in tables
            )
    finally:
        engine.dispose()
