"""``sqlq stats``, ``show``, ``prune`` and ``maintenance`` run as real subprocesses.

The CLI uses the database's own clock, so the fixture is built around the current
time and the assertions stick to numbers that do not move within a minute.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conformance.test_observability import build_known_queue

ROOT = Path(__file__).resolve().parents[2]


def sqlq(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": ""}
    done = subprocess.run(
        [sys.executable, "-m", "sqlq_orm", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"sqlq {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


@pytest.fixture
def known(session, engine):
    return build_known_queue(session, now=int(time.time()))


def test_stats_json_reports_counts_failure_reasons_and_retention(db_url, known):
    data = json.loads(sqlq("stats", "--json", "--db", db_url).stdout)

    assert data["counts"]["by_status"] == {
        "WAITING": 0,
        "QUEUED": 4, "CLAIMED": 1, "RUNNING": 2, "SUCCEEDED": 4, "FAILED": 4, "CANCELLED": 2,
    }  # fmt: skip
    assert data["counts"]["by_queue"]["emails"] == {
        "QUEUED": 1, "CLAIMED": 1, "FAILED": 1, "CANCELLED": 1,
    }  # fmt: skip
    assert data["errors"][0]["error_code"] == "TIMEOUT:UPSTREAM_API"
    assert data["oldest_held"][0]["id"] == known["running_silent"]
    assert [(r["status"], r["due_for_prune"]) for r in data["retention"]] == [
        ("SUCCEEDED", 2), ("CANCELLED", 1), ("FAILED", 1),
    ]  # fmt: skip


def test_stats_text_answers_the_five_questions_without_colour_when_piped(db_url, known):
    out = sqlq("stats", "--db", db_url).stdout

    for heading in (
        "1. Jobs by state",
        "2. Oldest in-progress",
        "3. Retries",
        "4. Top failure reasons",
        "5. Retention",
    ):
        assert heading in out
    assert "\033[" not in out
    default_row = next(line.split() for line in out.splitlines() if line.startswith("  default"))
    # WAITING first (none), then QUEUED, CLAIMED, RUNNING, SUCCEEDED, FAILED, CANCELLED, total
    assert default_row[1:9] == ["0", "3", "0", "2", "4", "3", "1", "13"]


def test_stats_prometheus_format_exposes_gauges(db_url, known):
    out = sqlq("stats", "--format", "prometheus", "--db", db_url).stdout

    assert 'sqlq_jobs{queue="default",status="RUNNING"} 2' in out.splitlines()
    assert "# TYPE sqlq_expired_leases gauge" in out


def test_stats_watch_redraws_until_interrupted(db_url, known):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "sqlq_orm", "stats", "--json", "--watch", "0.2", "--db", db_url],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    reports = 0
    deadline = time.monotonic() + 60
    while reports < 2 and time.monotonic() < deadline:
        line = process.stdout.readline()
        reports += line.startswith("{")
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=60)

    assert reports == 2
    assert process.returncode == 0


def test_show_prints_the_timeline_as_text_and_json(db_url, known):
    job_id = str(known["running_silent"])

    text = sqlq("show", job_id, "--db", db_url).stdout
    data = json.loads(sqlq("show", job_id, "--json", "--db", db_url).stdout)

    assert f"job {job_id}" in text and "attempts" in text and "timeline" in text
    assert "held by w-silent (silent" in text
    assert data["job"]["status"] == "RUNNING"
    assert [a["status"] for a in data["attempts"]] == ["FAILED", "RUNNING"]
    assert [e["event"] for e in data["events"]] == ["ENQUEUED"]
    assert data["worker_state"] == "silent"
    assert "lease_token" not in data["job"]


def test_show_of_a_missing_job_exits_1_naming_the_id(db_url, known):
    done = sqlq("show", "987654", "--db", db_url, check=False)

    assert done.returncode == 1
    assert "no job with id 987654" in done.stderr


def test_prune_dry_run_writes_nothing_then_prune_deletes_what_is_due(db_url, known):
    dry = json.loads(sqlq("prune", "--dry-run", "--json", "--db", db_url).stdout)
    real = json.loads(sqlq("prune", "--batch", "1", "--json", "--db", db_url).stdout)
    again = json.loads(sqlq("prune", "--json", "--db", db_url).stdout)

    assert dry["jobs"] == {"SUCCEEDED": 2, "CANCELLED": 1, "FAILED": 1} and dry["dry_run"]
    assert real["jobs"] == dry["jobs"] and real["batches"] == 4 and real["complete"]
    assert again["total_jobs"] == 0


def test_prune_with_custom_days_keeps_what_the_options_say(db_url, known):
    out = json.loads(
        sqlq(
            "prune", "--failed-days", "-1", "--succeeded-days", "35", "--json", "--db", db_url
        ).stdout
    )

    assert out["jobs"] == {"SUCCEEDED": 1, "CANCELLED": 1, "FAILED": 0}


def test_prune_rejects_bad_days_with_a_clear_error_and_deletes_nothing(db_url, known):
    done = sqlq("prune", "--failed-days", "-5", "--db", db_url, check=False)
    after = json.loads(sqlq("stats", "--json", "--db", db_url).stdout)

    assert done.returncode == 2  # a usage error: the parser names the option
    assert "argument --failed-days: expected a whole number from -1" in done.stderr
    assert "got '-5'" in done.stderr
    assert after["counts"]["total"] == 17


def test_maintenance_vacuums_and_explains_what_it_did(db_url, known):
    out = sqlq("maintenance", "--checkpoint", "--vacuum", "--db", db_url).stdout
    nothing = sqlq("maintenance", "--db", db_url, check=False)

    assert "vacuum: VACUUM" in out or "vacuum: OPTIMIZE TABLE" in out  # OPTIMIZE: MariaDB
    assert out.startswith("checkpoint: ")  # ran on SQLite, explained as skipped on PostgreSQL
    assert nothing.returncode == 1 and "pass --checkpoint and/or --vacuum" in nothing.stderr
