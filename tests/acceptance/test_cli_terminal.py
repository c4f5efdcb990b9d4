"""Terminal injection (issue 23, item 11): text from the database reaches the terminal
escaped, through every text command (``show``, ``stats``, ``schedules``, ``check``).

Job types, queues, worker ids and host names, dedupe and concurrency keys, refs, error
details, actors and reasons, app columns and schedule names are anyone's input. Each
one here carries an escape sequence that would clear the screen, a newline followed by
a forged attempt row, a carriage return, a C1 control (CSI), a bidi override and a line
separator. Every command runs for real as ``python -m sqlq_orm`` on every database.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import text

import sqlq_orm
from sqlq_orm.core.schedule import Schedule
from tests.support.worker_helpers import ROOT, subprocess_env

pytestmark = pytest.mark.slow

FORGED = "  1  SUCCEEDED  forged-worker"
EVIL = f"evil\x1b[2J\x1b[31m\n{FORGED}\r\x9b31m\u202eoops\u2028end\t!"
"""A value that, printed raw, clears the screen, turns the text red and adds a line."""

RAW_CONTROLS = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
"""Anything but a newline that must never reach the terminal raw."""

MODELS_MODULE = """
from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import sqlq_orm


class Base(DeclarativeBase):
    pass


class Job(sqlq_orm.JobMixin, Base):
    label: Mapped[str | None] = mapped_column(String(200))


class JobAttempt(sqlq_orm.JobAttemptMixin, Base):
    pass


class JobEvent(sqlq_orm.JobEventMixin, Base):
    pass


class Worker(sqlq_orm.WorkerMixin, Base):
    pass


class Schedule(sqlq_orm.ScheduleMixin, Base):
    pass


class JobDependency(sqlq_orm.JobDependencyMixin, Base):
    pass


MODELS = sqlq_orm.Models(
    job=Job, attempt=JobAttempt, event=JobEvent, worker=Worker,
    schedule=Schedule, dependency=JobDependency,
)
"""


@pytest.fixture
def hostile(db_url: str, tmp_path: Path) -> SimpleNamespace:
    """A database whose every user-controlled text is :data:`EVIL`: a failed job, a
    job held by a registered worker, a cancelled one, a schedule, a broken invariant."""
    (tmp_path / "hostile_models.py").write_text(textwrap.dedent(MODELS_MODULE))
    sys.path.insert(0, str(tmp_path))
    try:
        import hostile_models
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("hostile_models", None)
    engine = sqlq_orm.create_engine(db_url)
    hostile_models.Base.metadata.create_all(engine)
    queue = sqlq_orm.Queue(engine, models=hostile_models.MODELS)
    common = {"queue": EVIL, "payload_ref": EVIL, "label": EVIL}
    failed = queue.enqueue(EVIL, {EVIL: [EVIL]}, max_retries=0, dedupe_key=EVIL, **common).id
    held = queue.enqueue(EVIL, {"n": 1}, concurrency_key=EVIL, **common).id
    cancelled = queue.enqueue(EVIL, **common).id
    queue.register_worker(EVIL, hostname=EVIL, pid=1, queues=[EVIL], concurrency=2)
    first, second = queue.claim(EVIL, queues=[EVIL], limit=2, start=True)
    assert {first.job_id, second.job_id} == {failed, held}
    queue.fail(first if first.job_id == failed else second, "HOSTILE:INPUT", EVIL)
    queue.cancel(cancelled, actor=EVIL, reason=EVIL)
    queue.register_schedules([Schedule.declare("0 3 * * *", EVIL, name=EVIL, queue=EVIL)])
    with engine.begin() as connection:  # an open attempt on a job that is not running
        connection.execute(
            text(
                "INSERT INTO sqlq_job_attempts (job_id, attempt, worker_id, started_at, status)"
                " VALUES (:id, 1, :worker, 1, 'RUNNING')"
            ),
            {"id": cancelled, "worker": EVIL},
        )  # and a schedule whose last slot is not before its next one (names it)
        connection.execute(text("UPDATE sqlq_schedules SET last_slot_at = next_slot_at"))
    engine.dispose()
    return SimpleNamespace(
        url=db_url, directory=tmp_path, failed=failed, held=held, cancelled=cancelled
    )


def sqlq(hostile: SimpleNamespace, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", hostile.url, "--models",
         "hostile_models:MODELS", *args],
        capture_output=True,
        text=True,
        cwd=hostile.directory,
        env={**subprocess_env(), "PYTHONPATH": f"{ROOT}:{hostile.directory}"},
        timeout=120,
    )  # fmt: skip


def assert_terminal_safe(result: subprocess.CompletedProcess[str]) -> None:
    for stream in (result.stdout, result.stderr):
        found = RAW_CONTROLS.search(stream)
        assert found is None, (found, stream)
        forged = [line for line in stream.splitlines() if line.startswith(FORGED)]
        assert not forged, stream


@pytest.mark.parametrize("which", ["failed", "held", "cancelled"])
def test_show_escapes_every_text_from_the_database(hostile, which):
    result = sqlq(hostile, "show", str(getattr(hostile, which)))

    assert result.returncode == 0, result.stderr
    assert_terminal_safe(result)
    assert "evil\\x1b[2J\\x1b[31m\\n  1  SUCCEEDED" in result.stdout
    assert "\\x9b31m\\u202eoops\\u2028end\\t!" in result.stdout


def test_show_as_json_stays_json_with_the_values_intact(hostile):
    result = sqlq(hostile, "show", str(hostile.failed), "--json")

    shown = json.loads(result.stdout)
    assert shown["job"]["type"] == EVIL and shown["job"]["columns"]["label"] == EVIL


@pytest.mark.parametrize("command", [["stats"], ["schedules"], ["check"]])
def test_listings_escape_every_text_from_the_database(hostile, command):
    result = sqlq(hostile, *command)

    assert result.returncode == (1 if command == ["check"] else 0), result.stderr
    assert_terminal_safe(result)
    assert "evil\\x1b[2J" in result.stdout


def test_the_error_line_escapes_what_it_quotes(hostile):
    result = sqlq(hostile, "schedules", "--remove", EVIL + "-missing")

    assert result.returncode == 1
    assert_terminal_safe(result)
