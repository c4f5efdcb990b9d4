"""examples/tasks_app, run the way its docstring tells a user to (issue 24, item 8): a
worker process loads the task registry by name, the app enqueues a task with
dataclass arguments, waits for its dataclass result and enqueues the next task with
it; on every database. mypy --strict accepts the example as it is."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from mypy import api

import sqlq_orm
from tests.support.worker_helpers import ROOT, subprocess_env, wait_until

EXAMPLE = ROOT / "examples" / "tasks_app"


def test_the_example_type_checks_under_mypy_strict(tmp_path, monkeypatch):
    monkeypatch.setenv("MYPYPATH", str(EXAMPLE))  # app.py imports jobs as a user runs it
    stdout, stderr, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--explicit-package-bases", str(EXAMPLE / "jobs.py"), str(EXAMPLE / "app.py")]
    )  # fmt: skip
    assert status == 0, stdout + stderr


def test_the_app_enqueues_waits_for_a_result_and_a_worker_runs_both_tasks(db_url):
    sqlq_orm.migrate.upgrade(db_url)  # before the worker starts (the app migrates too)
    env = {**subprocess_env(), "TASKS_APP_DATABASE_URL": db_url}
    worker = subprocess.Popen(
        [sys.executable, "-m", "sqlq_orm", "--db", db_url, "worker", "--handlers",
         "jobs:registry", "--queue", "billing", "--queue", "mail", "--poll", "0.2"],
        cwd=EXAMPLE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        app = subprocess.run(
            [sys.executable, "app.py"], cwd=EXAMPLE, env=env, capture_output=True, text=True,
            timeout=90,
        )  # fmt: skip
        assert app.returncode == 0, app.stdout + app.stderr
        receipt = int(app.stdout.strip())
        engine = sqlq_orm.create_engine(db_url)
        queue = sqlq_orm.Queue(engine)
        wait_until(lambda: queue.get_job(receipt).status == "SUCCEEDED", "the receipt task")
        invoice = queue.get_job(receipt - 1)
        assert (invoice.type, invoice.status) == ("jobs.make_invoice", "SUCCEEDED")
        assert queue.result(invoice.id) == {"order": "A-1001", "total_cents": 2100}
        engine.dispose()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)


def test_the_example_tasks_under_the_testing_kit(monkeypatch):
    # A unit test of the example's tasks, as its users would write one: perform runs a
    # task now (arguments through the same check and JSON as enqueue), without a worker.
    from sqlq_orm.testing import perform

    monkeypatch.syspath_prepend(str(EXAMPLE))
    import jobs  # examples/tasks_app/jobs.py

    invoice = perform(jobs.make_invoice, "A-1", [jobs.Line("tea", 2, 450)], job_id=7)
    assert invoice == jobs.Invoice("A-1", 900)  # rebuilt from its JSON, as task.wait gives it
    assert perform(jobs.send_receipt, to="a@example.com", invoice=invoice) is None
    with pytest.raises(ValueError, match="not an address"):
        perform(jobs.send_receipt, to="nobody", invoice=invoice)
    with pytest.raises(sqlq_orm.InvalidInput, match="lines"):
        perform(jobs.make_invoice, "A-1", lines=[object()])
    sys.modules.pop("jobs", None)
