"""Issue #11 in the CLI layer: whatever goes wrong, ``sqlq`` prints one line, never a
traceback; and it refuses a schema newer than the code instead of using it silently.

Each command runs for real as ``python -m sqlq_orm``, as in ``test_cli.py``.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from sqlq_orm.migrations import VERSION_TABLE
from tests.support.worker_helpers import ROOT, TEST_HANDLERS, subprocess_env

pytestmark = pytest.mark.slow

FUTURE_REVISION = "sqlq_9999"
"""A revision no version of this code knows: the database was migrated by a newer sqlq."""
NEWEST_KNOWN = "sqlq_0004"
TOO_BIG_ID = "99999999999999999999"
"""Larger than any 64-bit integer a database can store."""


def sqlq(*args: str | bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq_orm", *args],
        capture_output=True,
        text=True,
        errors="replace",
        cwd=ROOT,
        env={**subprocess_env(), **(env or {})},
        timeout=60,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *naming: str) -> str:
    """The single stderr line of a failed command, which names each of ``naming``."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sqlq: error: "), lines[0]
    for value in naming:
        assert value in lines[0], (value, lines[0])
    return lines[0]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert sqlq("--db", url, "migrate").returncode == 0
    return url


@pytest.fixture
def future_url(db_url: str) -> str:
    """A database (SQLite or PostgreSQL) stamped with a revision newer than this code."""
    assert sqlq("--db", db_url, "migrate").returncode == 0
    engine = sqlalchemy.create_engine(db_url)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text(f"UPDATE {VERSION_TABLE} SET version_num = :revision"),
            {"revision": FUTURE_REVISION},
        )
    engine.dispose()
    return db_url


def job_count(url: str) -> int:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            count = connection.execute(sqlalchemy.text("SELECT count(*) FROM sqlq_jobs"))
            return int(count.scalar_one())
    finally:
        engine.dispose()


# -------------------------------------------------------------- 7. one line, always


@pytest.mark.parametrize(
    ("url", "dialect"),
    [
        ("oracle://scott@db.example/orcl", "oracle"),
        ("mysql+mysqldb://app@db.example/jobs", "mysql+mysqldb"),  # mysqlclient: not installed
        ("postgresql+asyncpg://app@db.example/jobs", "postgresql+asyncpg"),
    ],
)
def test_database_without_support_or_driver_is_one_line_naming_the_dialect(url, dialect):
    result = sqlq("--db", url, "stats")

    line = one_line_error(result, dialect)
    assert "driver" in line


@pytest.mark.parametrize("command", ["show", "cancel", "retry"])
def test_job_id_beyond_64_bits_is_one_line_naming_it(sqlite_url, command):
    result = sqlq("--db", sqlite_url, command, TOO_BIG_ID)

    assert "out of range" in one_line_error(result, TOO_BIG_ID)


@pytest.mark.parametrize(("option", "value"), [("--jobs", "-1"), ("--workers", "0")])
def test_demo_with_too_few_jobs_or_workers_is_one_line_naming_the_value(tmp_path, option, value):
    result = sqlq("demo", "--path", str(tmp_path), option, value)

    one_line_error(result, option, value)
    assert not (tmp_path / "demo.db").exists()


@pytest.fixture
def read_only_url(sqlite_url: str) -> Iterator[str]:
    """The same SQLite file opened read-only, while another connection has pages in its WAL."""
    path = sqlalchemy.make_url(sqlite_url).database
    writer = sqlite3.connect(path)
    writer.execute("CREATE TABLE app_notes (note TEXT)")
    writer.execute("INSERT INTO app_notes VALUES ('unchecked')")
    writer.commit()
    try:
        yield f"sqlite:///file:{path}?mode=ro&uri=true"
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("option", "statement"),
    [("--checkpoint", "PRAGMA wal_checkpoint(TRUNCATE)"), ("--vacuum", "VACUUM")],
)
def test_maintenance_refused_by_the_database_is_one_line_naming_the_statement(
    read_only_url, option, statement
):
    result = sqlq("--db", read_only_url, "maintenance", option)

    one_line_error(result, statement)


def test_migrate_on_a_database_from_a_newer_version_is_one_line_naming_the_revision(future_url):
    result = sqlq("--db", future_url, "migrate")

    one_line_error(result, FUTURE_REVISION, NEWEST_KNOWN)


def test_database_url_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    url = b"sqlite:///" + bytes(tmp_path) + b"/queue-\xff.db"

    result = sqlq("--db", url, "stats")

    assert "not valid UTF-8" in one_line_error(result, "queue-\\xff.db")


def test_payload_nested_50000_deep_is_one_line(sqlite_url):
    deep = "[" * 50_000 + "]" * 50_000

    result = sqlq("--db", sqlite_url, "enqueue", "send_email", "--payload", deep)

    assert "--payload" in one_line_error(result)
    assert job_count(sqlite_url) == 0


# ------------------------------------------------- 8. a schema newer than the code


def test_enqueue_refuses_a_schema_newer_than_the_code(future_url):
    result = sqlq("--db", future_url, "enqueue", "send_email")

    one_line_error(result, FUTURE_REVISION, NEWEST_KNOWN)
    assert job_count(future_url) == 0


def test_worker_refuses_a_schema_newer_than_the_code(future_url):
    result = sqlq("--db", future_url, "worker", "--handlers", TEST_HANDLERS, "--burst")

    one_line_error(result, FUTURE_REVISION, NEWEST_KNOWN)


def test_read_only_commands_still_run_on_a_schema_newer_than_the_code(future_url):
    result = sqlq("--db", future_url, "stats", "--json")

    assert result.returncode == 0, result.stderr
