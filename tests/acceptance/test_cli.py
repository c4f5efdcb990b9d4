"""The ``sqlq`` command line, run for real as ``python -m sqlq_orm`` against temporary databases.

Every error path must print exactly one line to stderr and exit non-zero.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

import sqlq_orm
from sqlq_orm.core.docs import ERROR_CODES_PAGE
from tests.support.worker_helpers import ROOT, TEST_HANDLERS, subprocess_env, wait_until

pytestmark = pytest.mark.slow


def sqlq(
    *args: str, cwd=ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq_orm", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**subprocess_env(), **(env or {})},
        timeout=60,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (asserts there is exactly one)."""
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sqlq: error: "), result.stderr
    return lines[0]


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert sqlq("--db", url, "migrate").returncode == 0
    return url


@pytest.fixture
def migrated_url(db_url) -> str:
    """An empty database of either kind, migrated by the CLI itself."""
    result = sqlq("--db", db_url, "migrate")
    assert result.returncode == 0, result.stderr
    return db_url


def queue_on(url: str) -> sqlq_orm.Queue:
    return sqlq_orm.Queue(sqlq_orm.create_engine(url))


# ------------------------------------------------------------------------- happy paths


def test_without_db_option_the_database_is_sqlq_db_in_the_working_directory(tmp_path):
    migrated = sqlq("migrate", cwd=tmp_path)
    enqueued = sqlq("enqueue", "send_email", cwd=tmp_path)

    assert migrated.returncode == 0 and enqueued.returncode == 0
    assert enqueued.stdout.strip() == "1"
    assert (tmp_path / "sqlq.db").exists()


def test_database_url_can_come_from_the_environment(tmp_path):
    env = {"SQLQ_DATABASE_URL": f"sqlite:///{tmp_path / 'from-env.db'}"}

    sqlq("migrate", env=env)
    result = sqlq("enqueue", "send_email", env=env)

    assert result.returncode == 0
    assert (tmp_path / "from-env.db").exists()


def test_enqueue_then_show_prints_the_job_and_its_timeline(migrated_url):
    enqueued = sqlq("enqueue", "send_email", "--payload", '{"to": "a@example.com"}',
                    "--queue", "mail", "--priority", "5", "--max-retries", "1",
                    "--max-runtime", "60", "--db", migrated_url)  # fmt: skip

    shown = sqlq("--db", migrated_url, "show", enqueued.stdout.strip())

    assert shown.returncode == 0, shown.stderr
    assert "type=send_email  queue=mail  status=QUEUED  priority=5" in shown.stdout
    assert "retries 0/1" in shown.stdout and "max_runtime 60s" in shown.stdout
    assert '{"to":"a@example.com"}' in shown.stdout
    assert "ENQUEUED" in shown.stdout


def test_show_with_handlers_prints_a_tasks_arguments_by_name_and_its_result(migrated_url):
    handlers = "tests.support.tasks_for_tests:registry"
    job_id = sqlq("--db", migrated_url, "enqueue", "report.render", "--handlers", handlers,
                  "--payload", '{"draft": true, "month": "2026-11"}').stdout.strip()  # fmt: skip
    sqlq("--db", migrated_url, "worker", "--handlers", handlers, "--burst", "--poll", "0.1")

    shown = sqlq("--db", migrated_url, "show", job_id, "--handlers", handlers)
    as_json = sqlq("--db", migrated_url, "show", job_id, "--handlers", handlers, "--json")
    without = sqlq("--db", migrated_url, "show", job_id)

    assert shown.returncode == 0, shown.stderr
    assert '  arguments month="2026-11" pages=10 (default) draft=true\n' in shown.stdout
    assert '  result {"pages":10}' in shown.stdout
    assert json.loads(as_json.stdout)["arguments"] == {
        "month": "2026-11", "pages": 10, "draft": True,
    }  # fmt: skip
    assert "arguments" not in without.stdout  # without the registry: the payload only


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # every backend: conformance
def test_show_redacts_a_tasks_secret_arguments_which_still_reach_the_handler(migrated_url):
    handlers = "tests.support.tasks_for_tests:registry"
    job_id = sqlq("--db", migrated_url, "enqueue", "account.welcome", "--handlers", handlers,
                  "--payload", '{"email": "a@example.com", "password": "hunter2-s3cret"}',
                  ).stdout.strip()  # fmt: skip

    shown = [
        sqlq("--db", migrated_url, "show", job_id),
        sqlq("--db", migrated_url, "show", job_id, "--handlers", handlers),
        sqlq("--db", migrated_url, "show", job_id, "--handlers", handlers, "--json"),
    ]
    ran = sqlq("--db", migrated_url, "worker", "--handlers", handlers, "--burst", "--poll", "0.1")
    after = sqlq("--db", migrated_url, "show", job_id, "--json")

    assert ran.returncode == 0, ran.stderr
    assert json.loads(after.stdout)["job"]["status"] == "SUCCEEDED"  # the handler got it
    for result in [*shown, after]:
        assert result.returncode == 0, result.stderr
        assert "hunter2" not in result.stdout and "[redacted]" in result.stdout
    assert 'password="[redacted]"' in shown[1].stdout


def test_show_lists_a_jobs_parents_and_children(migrated_url):
    parent = sqlq("--db", migrated_url, "enqueue", "fetch").stdout.strip()
    child = sqlq("--db", migrated_url, "enqueue", "report", "--depends-on", parent,
                 "--on-parent-failure", "run").stdout.strip()  # fmt: skip

    of_child = sqlq("--db", migrated_url, "show", child)
    of_parent = sqlq("--db", migrated_url, "show", parent, "--json")

    assert of_child.returncode == 0, of_child.stderr
    assert "status=WAITING" in of_child.stdout
    parents = of_child.stdout.split("parents\n", 1)[1].split("\n\n", 1)[0]
    assert parents.splitlines()[1].split() == [parent, "fetch", "QUEUED", "run"]
    assert json.loads(of_parent.stdout)["children"] == [
        {"id": int(child), "type": "report", "status": "WAITING", "on_parent_failure": "run"}
    ]


def test_enqueue_with_a_dedupe_key_returns_the_unfinished_job_again(sqlite_url):
    first = sqlq("--db", sqlite_url, "enqueue", "report", "--dedupe-key", "report:2024-06")

    second = sqlq("--db", sqlite_url, "enqueue", "report", "--dedupe-key", "report:2024-06")

    assert first.stdout.strip() == "1"
    assert second.stdout.strip() == "1 (already queued with dedupe key 'report:2024-06')"


def test_enqueue_with_delay_holds_the_job_back(sqlite_url):
    sqlq("--db", sqlite_url, "enqueue", "later", "--delay", "3600")

    job = queue_on(sqlite_url).get_job(1)

    assert job.run_at - job.created_at == 3600 + 1  # a truncated "now": never early


def test_worker_in_burst_mode_runs_what_is_ready_then_exits(migrated_url):
    for job_type in ("echo", "echo", "declined"):
        sqlq("--db", migrated_url, "enqueue", job_type)

    result = sqlq("--db", migrated_url, "worker", "--handlers", TEST_HANDLERS, "--burst",
                  "--concurrency", "2", "--poll", "0.1")  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert "stopped: 3 claimed, 2 succeeded, 1 failed" in result.stderr
    counts = queue_on(migrated_url).counts_by_status()
    assert (counts["SUCCEEDED"], counts["FAILED"], counts["QUEUED"]) == (2, 1, 0)


def test_show_of_a_failed_job_lists_its_attempts_and_error(sqlite_url):
    sqlq("--db", sqlite_url, "enqueue", "declined")
    sqlq("--db", sqlite_url, "worker", "--handlers", TEST_HANDLERS, "--burst", "--poll", "0.1")

    shown = sqlq("--db", sqlite_url, "show", "1")

    assert "status=FAILED" in shown.stdout
    assert "error PAYMENT:CARD_DECLINED: card ending 4242 was declined" in shown.stdout
    assert "attempts\n" in shown.stdout and "FAILED" in shown.stdout.split("attempts\n")[1]


def test_cancel_then_retry_requeues_the_job(sqlite_url):
    sqlq("--db", sqlite_url, "enqueue", "send_email")

    cancelled = sqlq("--db", sqlite_url, "cancel", "1", "--reason", "duplicate")
    retried = sqlq("--db", sqlite_url, "retry", "1")

    assert (cancelled.stdout.strip(), retried.stdout.strip()) == (
        "cancelled job 1",
        "requeued job 1",
    )
    assert [e.event for e in queue_on(sqlite_url).get_job(1).events] == [
        "ENQUEUED", "CANCELLED", "RETRIED",
    ]  # fmt: skip


def test_retry_with_dependents_brings_back_the_cancelled_children(sqlite_url):
    sqlq("--db", sqlite_url, "enqueue", "fetch")
    sqlq("--db", sqlite_url, "enqueue", "parse", "--depends-on", "1")
    sqlq("--db", sqlite_url, "cancel", "1")

    refused = sqlq("--db", sqlite_url, "retry", "2")
    retried = sqlq("--db", sqlite_url, "retry", "1", "--with-dependents")

    assert "parent job 1 is CANCELLED" in one_error_line(refused)
    assert retried.stdout.splitlines() == ["requeued job 1", "requeued job 2 (WAITING)"]


def test_sweep_once_reports_what_it_did(sqlite_url):
    result = sqlq("--db", sqlite_url, "sweep")

    assert result.returncode == 0
    assert result.stdout.startswith("swept: 0 expired lease(s), 0 past max runtime")


def test_sweep_loop_stops_cleanly_on_sigterm(sqlite_url):
    process = subprocess.Popen(
        [sys.executable, "-m", "sqlq_orm", "--db", sqlite_url, "sweep", "--loop",
         "--interval", "0.2"],
        env=subprocess_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        queue = queue_on(sqlite_url)
        queue.enqueue("x")
        queue.claim("gone", lease_seconds=2)
        wait_until(lambda: "RECOVERED" in [e.event for e in queue.get_job(1).events], "a sweep")
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(timeout=20)
    finally:
        process.kill()
        process.wait()

    assert exit_code == 0


@pytest.mark.parametrize(
    "command",
    [[], ["migrate"], ["enqueue"], ["worker"], ["sweep"], ["stats"], ["show"], ["cancel"],
     ["retry"], ["prune"], ["demo"]],
)  # fmt: skip
def test_every_command_has_help(command):
    result = sqlq(*command, "--help")

    assert result.returncode == 0
    assert result.stdout.startswith("usage: sqlq")


# ------------------------------------------------------------------------- error paths


def test_bad_json_payload_is_refused_and_nothing_is_written(sqlite_url):
    result = sqlq("--db", sqlite_url, "enqueue", "send_email", "--payload", "{to: a}")

    assert "--payload is not valid JSON" in one_error_line(result)
    assert queue_on(sqlite_url).counts_by_status()["QUEUED"] == 0


def test_invalid_option_value_is_refused_naming_it(sqlite_url):
    result = sqlq("--db", sqlite_url, "enqueue", "send_email", "--max-retries", "-1")

    assert result.returncode == 2  # a usage error: the parser names the option
    assert result.stderr.startswith("sqlq: error: argument --max-retries: expected a whole")
    assert "got '-1'" in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", ["show", "cancel", "retry"])
def test_unknown_job_id_is_one_clear_line(sqlite_url, command):
    result = sqlq("--db", sqlite_url, command, "4242")

    assert one_error_line(result) == "sqlq: error: no job with id 4242"


def test_cancelling_a_finished_job_says_why_not(sqlite_url):
    sqlq("--db", sqlite_url, "enqueue", "x")
    sqlq("--db", sqlite_url, "cancel", "1")

    result = sqlq("--db", sqlite_url, "cancel", "1")

    assert "cannot cancel job 1: it is CANCELLED" in one_error_line(result)
    # a refusal names the page that explains it (sqlq_orm.core.docs, one constant)
    assert one_error_line(result).endswith(f"(see {ERROR_CODES_PAGE})")


def test_show_of_a_failed_job_names_the_error_codes_page(sqlite_url):
    queue = sqlq_orm.Queue(sqlq_orm.create_engine(sqlite_url))
    sqlq("--db", sqlite_url, "migrate")
    queue.enqueue("x", max_retries=0)
    (lease,) = queue.claim("w", limit=1, start=True)
    queue.fail(lease, "UPSTREAM:REFUSED", "no")

    shown = sqlq("--db", sqlite_url, "show", "1")
    stats = sqlq("--db", sqlite_url, "stats")

    assert f"(error codes: {ERROR_CODES_PAGE})" in shown.stdout
    assert f"what each code means: {ERROR_CODES_PAGE}" in stats.stdout


def test_non_numeric_job_id_is_a_usage_error(sqlite_url):
    result = sqlq("--db", sqlite_url, "show", "abc")

    assert result.returncode == 2
    assert "invalid int value: 'abc'" in result.stderr


def test_worker_without_handlers_is_a_usage_error(sqlite_url):
    result = sqlq("--db", sqlite_url, "worker")

    assert result.returncode == 2
    assert "the following arguments are required: --handlers" in result.stderr


def test_worker_with_handlers_that_cannot_be_imported_is_one_clear_line(sqlite_url):
    result = sqlq("--db", sqlite_url, "worker", "--handlers", "no_such_pkg.jobs:registry")

    assert "cannot import handlers module 'no_such_pkg.jobs'" in one_error_line(result)


def test_database_without_tables_hints_at_migrate(tmp_path):
    (tmp_path / "empty.db").touch()
    result = sqlq("--db", f"sqlite:///{tmp_path / 'empty.db'}", "stats")

    assert one_error_line(result).endswith("has no sqlq_jobs table; run `sqlq migrate` first")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "invalid database URL 'not a url'"),
        ("mysqlx://db/x", "unsupported database URL mysqlx://db/x"),
        ("postgresql://postgres@127.0.0.1:9/x", "cannot use the database postgresql://"),
        ("sqlite:////no/such/dir/q.db", "no database at /no/such/dir/q.db"),
    ],
)
def test_bad_or_unreachable_database_is_one_clear_line(url, message):
    result = sqlq("--db", url, "stats")

    assert message in one_error_line(result)


# ------------------------------------------------------------------------- schedules

SCHEDULED = "tests.support.handlers_for_tests:scheduled"


def test_schedules_lists_what_the_code_declares_then_what_a_worker_registered(migrated_url):
    assert "no schedules" in sqlq("--db", migrated_url, "schedules").stdout

    declared = sqlq("--db", migrated_url, "schedules", "--handlers", SCHEDULED)
    assert declared.returncode == 0, declared.stderr
    assert "nightly_echo  0 3 * * *  Europe/Paris" in declared.stdout
    assert "not registered yet" in declared.stdout
    worker = sqlq("--db", migrated_url, "worker", "--burst", "--handlers", SCHEDULED)
    assert worker.returncode == 0, worker.stderr

    listed = sqlq("--db", migrated_url, "schedules")
    as_json = sqlq("--db", migrated_url, "schedules", "--json")

    assert listed.returncode == 0, listed.stderr
    (header, line) = listed.stdout.strip().splitlines()
    assert header.split() == [
        "NAME",
        "CRON",
        "TIMEZONE",
        "TYPE",
        "QUEUE",
        "LAST",
        "RUN",
        "NEXT",
        "RUN",
    ]
    assert line.startswith("nightly_echo  0 3 * * *  Europe/Paris  echo  default  never")
    assert line.endswith(" 03:00 CET") or line.endswith(" 03:00 CEST")
    (row,) = json.loads(as_json.stdout)["schedules"]
    assert (row["name"], row["last_run"]) == ("nightly_echo", None)
    assert row["next_run"] == queue_on(migrated_url).list_schedules()[0].next_slot_at


def test_schedules_remove_deletes_a_row_and_says_so_when_there_is_none(sqlite_url):
    assert sqlq("--db", sqlite_url, "worker", "--burst", "--handlers", SCHEDULED).returncode == 0

    removed = sqlq("--db", sqlite_url, "schedules", "--remove", "nightly_echo")
    again = sqlq("--db", sqlite_url, "schedules", "--remove", "nightly_echo")

    assert removed.stdout.strip() == "removed schedule 'nightly_echo'"
    assert one_error_line(again) == (
        "sqlq: error: no schedule named 'nightly_echo' in the schedules table"
    )


def test_schedules_on_a_database_still_at_0001_says_to_migrate(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    sqlq_orm.migrate.upgrade(url, "sqlq_0001")

    assert "sqlq migrate" in one_error_line(sqlq("--db", url, "schedules"))
