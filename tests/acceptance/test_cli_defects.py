"""Issue #11 in the CLI layer: whatever goes wrong, ``sqlq`` prints one line, never a
traceback; and it refuses a schema newer than the code instead of using it silently.

Each command runs for real as ``python -m sqlq_orm``, as in ``test_cli.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

import sqlq_orm
import sqlq_orm.migrations
from sqlq_orm.migrations import VERSION_TABLE
from tests.support.worker_helpers import ROOT, TEST_HANDLERS, subprocess_env

pytestmark = pytest.mark.slow

FUTURE_REVISION = "sqlq_9999"
"""A revision no version of this code knows: the database was migrated by a newer sqlq."""
NEWEST_KNOWN = sqlq_orm.migrations.NEWEST_REVISION
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


def _integer_options() -> list[tuple[str, str]]:
    """Every (command, option) of ``sqlq`` whose value is a whole number."""
    from sqlq_orm.cli.parser import build_parser

    found = []
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if action.type is None or not action.option_strings:
                continue
            try:
                parsed = action.type("1")
            except argparse.ArgumentTypeError:
                parsed = None
            if isinstance(parsed, int):
                found.append((name, action.option_strings[-1]))
    return found


@pytest.mark.parametrize(("command", "option"), _integer_options())
def test_an_integer_option_beyond_64_bits_is_refused_naming_the_option(command, option, capsys):
    from sqlq_orm.cli import main

    with pytest.raises(SystemExit) as exited:
        main([command, option, TOO_BIG_ID])

    assert exited.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"sqlq: error: argument {option}: ") and TOO_BIG_ID in error, error


def test_enqueue_depending_on_a_job_id_beyond_64_bits_names_the_option(sqlite_url):
    result = sqlq("--db", sqlite_url, "enqueue", "child", "--depends-on", TOO_BIG_ID)

    line = one_line_error(result, "--depends-on", TOO_BIG_ID, "out of range")
    assert "OverflowError" not in line


# ------------------------------------------------- issue 22, item 10: pipes and help


def _command_names() -> list[str]:
    from sqlq_orm.cli.parser import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(commands.choices)


@pytest.mark.parametrize("command", [None, *_command_names()])
def test_every_help_is_whole_sentences_without_markup(command, capsys):
    from sqlq_orm.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--help"] if command is None else [command, "--help"])

    assert exited.value.code == 0
    shown = capsys.readouterr().out
    description = shown.split("\n\n")[1]
    assert "``" not in shown and re.search(r":[a-z]+:`", shown) is None, shown
    assert description.rstrip().endswith("."), description
    if command is not None:  # the summary in the list of commands is whole too
        listing = build_listing()
        assert re.search(rf"\n    {command} +[A-Z]", listing), listing


def build_listing() -> str:
    from sqlq_orm.cli.parser import build_parser

    return build_parser().format_help()


def test_demo_help_is_its_whole_description():
    result = sqlq("demo", "--help")

    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert (
        "Run the self-contained demo (a fresh SQLite file, or --db with an empty queue); "
        "print its report." in text
    )


@pytest.fixture
def closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose reader has already gone (``| head`` after its lines)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    yield write_end
    os.close(write_end)


@pytest.mark.parametrize(
    "command",
    [
        ["migrate"], ["enqueue", "t"], ["show", "1"], ["show", "1", "--json"], ["stats"],
        ["stats", "--json"], ["stats", "--format", "prometheus"], ["check"], ["check", "--json"],
        ["schedules"], ["prune", "--dry-run"], ["sweep"], ["cancel", "2"], ["retry", "3"],
        ["maintenance", "--checkpoint"], ["--help"], ["show", "--help"], ["demo", "--help"],
    ],
    ids=" ".join,
)  # fmt: skip
def test_a_reader_that_goes_away_ends_the_command_quietly(sqlite_url, closed_pipe, command):
    queue = sqlq_orm.Queue(sqlq_orm.create_engine(sqlite_url))
    queue.enqueue("t")
    queue.enqueue("t")
    queue.cancel(queue.enqueue("t").id)
    queue.engine.dispose()

    result = subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", sqlite_url, *command],
        stdout=closed_pipe, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=subprocess_env(), timeout=60,
    )  # fmt: skip

    assert result.stderr == ""
    assert result.returncode == 141


# ------------------------------------------- issue 23, item 12: which database, really


@pytest.mark.parametrize(
    "command",
    [["stats"], ["show", "1"], ["check"], ["schedules"], ["cancel", "1"], ["retry", "1"],
     ["sweep"], ["prune", "--dry-run"], ["enqueue", "t"], ["maintenance", "--checkpoint"]],
    ids=" ".join,
)  # fmt: skip
def test_a_command_on_a_mistyped_sqlite_path_creates_nothing(tmp_path, command):
    mistyped = tmp_path / "sqlq.db.typo"

    result = sqlq("--db", f"sqlite:///{mistyped}", *command)

    one_line_error(result, f"no database at {mistyped}", "sqlq migrate")
    assert not mistyped.exists()


def test_migrate_still_creates_the_sqlite_file(tmp_path):
    fresh = tmp_path / "fresh.db"

    assert sqlq("--db", f"sqlite:///{fresh}", "migrate").returncode == 0
    assert fresh.exists()


def test_an_empty_db_option_is_refused_not_taken_for_the_default(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", "", "stats"],
        capture_output=True, text=True, cwd=tmp_path, env=subprocess_env(), timeout=60,
    )  # fmt: skip

    one_line_error(result, "--db is empty")
    assert not (tmp_path / "sqlq.db").exists()


@pytest.mark.postgres
def test_a_mysql_url_at_a_postgresql_port_fails_fast_saying_why(postgres_url):
    port = sqlalchemy.make_url(postgres_url).port or 5432
    url = f"mysql+pymysql://root@127.0.0.1:{port}/x?connect_timeout=2"

    result = sqlq("--db", url, "stats")

    one_line_error(result, "no MySQL/MariaDB server greeting from 127.0.0.1", "within 2s")
