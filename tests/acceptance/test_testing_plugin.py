"""The contract of docs/howto/testing.md: a user's project whose tests are written only
from that page, run by pytest in a subprocess that loads the plugin through its
``pytest11`` entry point (nothing names it): on a SQLite file per test, and on one
database shared by every test, each test rolled back (SQLite, PostgreSQL, MariaDB)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

JOBS = """
import dataclasses

import sqlq_orm

registry = sqlq_orm.TaskRegistry()
attempts = []


@dataclasses.dataclass
class Address:
    street: str
    city: str


@registry.task(queue="mail", max_retries=3, backoff=60)
def send_welcome(email: str, address: Address, vip: bool = False) -> str:
    attempts.append(email)
    if email.startswith("bounce"):
        raise ConnectionRefusedError("mail server down")
    return f"sent to {email}"


@registry.task()
def charge(ctx: sqlq_orm.JobContext, order_id: int) -> str:
    if ctx.attempt < 2:
        raise sqlq_orm.Snooze(30)
    return f"order {order_id} tenant {ctx.columns.get('tenant_id')}"


def sign_up(email: str, address: Address, session=None) -> None:
    send_welcome.options(session=session).enqueue(email, address)
"""

CONFTEST_PER_TEST = """
import pytest

from myapp.jobs import registry


@pytest.fixture(autouse=True)
def jobs_queue(sqlq_queue):
    registry.bind(sqlq_queue)
    return sqlq_queue
"""

CONFTEST_SHARED = """
import os

import pytest
import sqlq_orm

from myapp.jobs import registry


@pytest.fixture(scope="session")
def app_engine():
    engine = sqlq_orm.create_engine(os.environ["APP_DATABASE_URL"])
    sqlq_orm.migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def sqlq_engine(app_engine):
    return app_engine


@pytest.fixture(autouse=True)
def jobs_queue(sqlq_queue_in_transaction):
    registry.bind(sqlq_queue_in_transaction)
    return sqlq_queue_in_transaction
"""

TESTS = """
import pytest
import sqlq_orm
from sqlq_orm.testing import (
    assert_enqueued,
    assert_not_enqueued,
    drain,
    enqueued_jobs,
    perform,
)

from myapp import jobs
from myapp.jobs import Address, charge, registry, send_welcome, sign_up

HOME = Address("1 Main St", "Springfield")


@pytest.fixture(autouse=True)
def _fresh():
    jobs.attempts.clear()


def test_sign_up_sends_a_welcome():
    sign_up("a@example.com", HOME)

    assert_enqueued(send_welcome, args={"email": "a@example.com"}, queue="mail")
    assert_enqueued(send_welcome, args={"address": HOME}, count=1)
    assert_enqueued(send_welcome, args={"vip": False})
    assert_not_enqueued(send_welcome, args={"email": "b@example.com"})
    [job] = enqueued_jobs(send_welcome)
    assert job.args["address"].city == "Springfield"


def test_a_failed_assertion_lists_what_was_enqueued():
    sign_up("a@example.com", HOME)
    with pytest.raises(AssertionError) as failed:
        assert_enqueued(send_welcome, args={"email": "b@example.com"})
    assert "Enqueued of type 'myapp.jobs.send_welcome'" in str(failed.value)
    assert "email='a@example.com'" in str(failed.value) and "on queue 'mail'" in str(failed.value)


def test_the_welcome_is_sent(jobs_queue):
    sign_up("a@example.com", HOME)

    result = drain(jobs_queue, registry)

    assert result.succeeded == 1
    assert send_welcome.result(result.jobs[0].id) == "sent to a@example.com"
    assert_not_enqueued(send_welcome)


def test_a_failing_welcome_is_retried_then_fails(jobs_queue, sqlq_clock):
    sign_up("bounce@example.com", HOME)
    started = sqlq_clock.now()

    assert drain(jobs_queue, registry).retried == 1
    result = drain(jobs_queue, registry, with_scheduled=True)

    assert (result.retried, result.failed) == (2, 1)
    assert len(jobs.attempts) == 4 and sqlq_clock.now() >= started + 180


def test_snoozes_and_columns_through_drain_and_perform(jobs_queue):
    job = charge.enqueue(7)
    assert drain(jobs_queue, registry, queues=["default"], with_scheduled=True).snoozed == 1
    assert charge.result(job) == "order 7 tenant None"
    with pytest.raises(sqlq_orm.Snooze):
        perform(charge, 7)
    assert perform(charge, order_id=7, attempt=3, columns={"tenant_id": 2}) == "order 7 tenant 2"


def test_perform_checks_arguments_as_enqueue_does():
    assert perform(send_welcome, "a@example.com", HOME) == "sent to a@example.com"
    with pytest.raises(sqlq_orm.InvalidInput):
        perform(send_welcome, "a@example.com", address=object())
    with pytest.raises(ConnectionRefusedError):
        perform(send_welcome, "bounce@example.com", HOME)


def test_inline_mode():
    with registry.inline_mode():
        sign_up("a@example.com", HOME)
    assert jobs.attempts == ["a@example.com"]
    assert_not_enqueued(send_welcome)
    with pytest.raises(sqlq_orm.InvalidInput):
        with registry.inline_mode():
            send_welcome.enqueue("a@example.com", address=object())


@pytest.mark.parametrize("round", [1, 2])
def test_each_test_in_a_rolled_back_transaction(round, sqlq_session, sqlq_queue_in_transaction):
    # On a database shared by every test: the jobs of the other round are never seen.
    registry.bind(sqlq_queue_in_transaction)
    sign_up(f"r{round}@example.com", HOME, session=sqlq_session)
    sqlq_session.commit()

    [mine] = assert_enqueued(send_welcome, session=sqlq_session)
    assert mine.args["email"] == f"r{round}@example.com"
    assert drain(sqlq_queue_in_transaction, registry).succeeded == 1
"""


@pytest.mark.parametrize(
    ("db_url", "shared"),
    [
        pytest.param("sqlite", False, id="sqlite-file-per-test"),
        pytest.param("sqlite", True, id="sqlite-shared-rolled-back"),
        pytest.param("postgresql", True, id="postgresql-shared-rolled-back"),
        pytest.param("mariadb", True, id="mariadb-shared-rolled-back"),
    ],
    indirect=["db_url"],
)
def test_a_users_tests_written_from_the_testing_page_pass(tmp_path: Path, db_url: str, shared):
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(textwrap.dedent(JOBS))
    (tmp_path / "conftest.py").write_text(CONFTEST_SHARED if shared else CONFTEST_PER_TEST)
    (tmp_path / "test_myapp.py").write_text(textwrap.dedent(TESTS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(tmp_path)
    if shared:
        env["APP_DATABASE_URL"] = db_url
    # On PostgreSQL, two sessions at once on the one database: each test sees only its
    # own jobs, inside its own transaction. SQLite has one writer; on MariaDB two such
    # sessions' long transactions can wait on each other's locks (error 1467 on the
    # auto-increment lock was seen): one session there.
    copies = 2 if shared and db_url.startswith("postgresql") else 1
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
               "no:randomly", "--rootdir", str(tmp_path), str(tmp_path)]  # fmt: skip
    running = [
        subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for _ in range(copies)
    ]
    for session in running:
        output, _ = session.communicate(timeout=300)
        assert session.returncode == 0, output
        assert "9 passed" in output, output


def test_the_plugin_is_the_entry_point_named_sqlq_orm_and_can_be_left_out(tmp_path: Path):
    (tmp_path / "test_uses_it.py").write_text(
        "def test_it(sqlq_queue, sqlq_clock):\n"
        "    assert sqlq_queue.clock is sqlq_clock and sqlq_clock.now() == 1_700_000_000\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--rootdir", str(tmp_path), str(tmp_path)]  # fmt: skip
    loaded = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    left_out = subprocess.run(
        [*command, "-p", "no:sqlq_orm"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert left_out.returncode != 0 and "fixture 'sqlq_queue' not found" in left_out.stdout
