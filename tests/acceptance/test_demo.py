"""``sqlq demo`` runs to completion (a smaller configuration) and tells the whole story."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import sqlq_orm
from sqlq_orm import migrate
from tests.support.worker_helpers import ROOT, subprocess_env

pytestmark = pytest.mark.slow


def test_demo_recovers_the_killed_job_and_fails_the_poison_job(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "demo", "--jobs", "60", "--workers", "2",
         "--path", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=120,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout
    assert "its worker was SIGKILLed mid-run; the sweeper recovered it (now SUCCEEDED)" in report
    assert (
        "the poison job crashed 3 child process(es) of the media worker's process pool, "
        "no worker, and ended FAILED (WORKER:CRASHED)"
    ) in report
    assert "workers lost to the poison job: 0" in report
    assert re.search(r"\b1[0-9]{9}\b", report) is None, "an epoch number in the report"
    assert "expired at 20" in report and "run_at=20" in report  # times people can read
    assert "nothing left behind: 0 running, 0 claimed" in report
    assert "EXCEPTION:KEY_ERROR" in report  # the buggy task's code, named after its class
    engine = sqlq_orm.create_engine(f"sqlite:///{tmp_path / 'demo.db'}")
    assert migrate.current(engine), "the demo database was not built by the migrations"
    queue = sqlq_orm.Queue(engine)
    victim = queue.get_job(1)
    assert [e.event for e in victim.events].count("RECOVERED") == 1
    assert [a.status for a in victim.attempts] == ["FAILED", "SUCCEEDED"]
    assert sum(queue.counts_by_status().values()) == 60
    # The jobs are task calls: arguments by name, and a task's return value as its result.
    resized = [job for job in map(queue.get_job, range(3, 13)) if job.type == "resize_image"]
    assert resized and all(set(json.loads(job.payload)) == {"image", "ms"} for job in resized)
    done = next(job for job in resized if job.status == "SUCCEEDED")
    assert queue.result(done.id).startswith("file:///thumbnails/photo-")


@pytest.mark.mariadb
@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_demo_runs_on_mariadb_with_db(db_url, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", db_url, "demo", "--jobs", "60",
         "--workers", "2", "--path", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=120,
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout
    assert "ended FAILED (WORKER:CRASHED)" in report and "lost to the poison job: 0" in report
    assert "nothing left behind: 0 running, 0 claimed" in report
    engine = sqlq_orm.create_engine(db_url)
    assert migrate.current(engine), "the demo database was not built by the migrations"
    queue = sqlq_orm.Queue(engine)
    assert sum(queue.counts_by_status().values()) == 60
    assert queue.get_job(1).attempts[-1].status == "SUCCEEDED"
    engine.dispose()


@pytest.mark.mariadb
@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_demo_refuses_a_database_whose_queue_has_jobs(db_url, tmp_path):
    migrate.upgrade(db_url)
    engine = sqlq_orm.create_engine(db_url)
    sqlq_orm.Queue(engine).enqueue("keep_me")
    engine.dispose()

    result = subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", db_url, "demo", "--path", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=60,
    )  # fmt: skip

    assert result.returncode != 0
    assert "the demo needs an empty queue" in result.stderr
    assert "holds 1 job(s)" in result.stderr
