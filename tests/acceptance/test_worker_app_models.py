"""A worker on a host's job table runs with the app's models, or not at all.

A worker started without ``--models`` read the host's table through the library's own
models: ``ctx.columns`` was ``{}``, handlers that read an app column took the wrong
branch and ended SUCCEEDED, and only a warning was printed. And the worker needed the
database URL again although ``--handlers app_jobs:registry`` names a registry bound to
the app's queue, engine and models. Now the worker takes both from a bound registry and
refuses (:class:`~sqlq_orm.ModelsMissColumns`, exit 1 naming the columns and
``--models``) a job table with columns its models do not map.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy.orm import Session

import sqlq_orm
from tests.acceptance.test_host_app_columns import MODELS, Base, Order
from tests.support.worker_helpers import subprocess_env

pytestmark = pytest.mark.slow

APP_JOBS = """
import os

import sqlq_orm
from tests.acceptance.test_host_app_columns import MODELS

queue = sqlq_orm.Queue(sqlq_orm.create_engine(os.environ["APP_DATABASE_URL"]), models=MODELS)
registry = sqlq_orm.TaskRegistry(queue)
unbound = sqlq_orm.TaskRegistry()


def send_invoice(ctx):
    return f"tenant {ctx.columns.get('tenant_id')}"


registry.register("send_invoice", send_invoice)
unbound.register("send_invoice", send_invoice)
"""


@pytest.fixture
def app(db_url, tmp_path):
    engine = sqlq_orm.create_engine(db_url)
    Base.metadata.create_all(engine)
    optional = [sqlq_orm.ScheduleRecord.__table__, sqlq_orm.JobDependency.__table__]
    sqlq_orm.Base.metadata.create_all(engine, tables=optional)  # the library's models have them
    with Session(engine) as session:
        session.add(Order(id=1))
        session.commit()
    (tmp_path / "app_jobs.py").write_text(APP_JOBS)
    queue = sqlq_orm.Queue(engine, models=MODELS)
    job_id = queue.enqueue("send_invoice", tenant_id=7).id
    yield queue, job_id
    engine.dispose()


def sqlq(cwd, db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    unset = ("SQLQ_DATABASE_URL", "SQLQ_MODELS")
    env = {k: v for k, v in subprocess_env().items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-m", "sqlq_orm", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**env, "APP_DATABASE_URL": db_url},
        timeout=120,
    )


def test_a_worker_takes_the_database_and_models_from_a_bound_registry(app, db_url, tmp_path):
    queue, job_id = app

    done = sqlq(tmp_path, db_url, "worker", "--handlers", "app_jobs:registry", "--burst")

    assert done.returncode == 0, done.stderr
    job = queue.get_job(job_id)
    assert (job.status, job.result_ref) == ("SUCCEEDED", "tenant 7")


def test_a_worker_without_the_apps_models_refuses_to_run_naming_the_columns(
    app, db_url, tmp_path
):
    queue, job_id = app

    done = sqlq(
        tmp_path, db_url, "--db", db_url, "worker", "--handlers", "app_jobs:unbound", "--burst"
    )

    assert done.returncode == 1, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("sqlq: error: the job table sqlq_jobs has columns")
    assert "label, order_id, tenant_id" in error and "--models" in error
    assert queue.get_job(job_id).status == "QUEUED"  # nothing run


def test_a_worker_object_on_the_library_models_refuses_a_table_with_app_columns(app, db_url):
    queue, job_id = app
    library_models = sqlq_orm.Queue(queue.engine)  # Job's app columns unmapped
    worker = sqlq_orm.Worker(library_models, {"send_invoice": lambda ctx: None}, burst=True)

    with pytest.raises(sqlq_orm.ModelsMissColumns, match="tenant_id") as refused:
        worker.run()

    assert refused.value.columns == ["label", "order_id", "tenant_id"]
    assert queue.get_job(job_id).status == "QUEUED"
    sqlq_orm.Worker(queue, {"send_invoice": lambda ctx: None}, burst=True).run()  # app's: runs
    assert queue.get_job(job_id).status == "SUCCEEDED"
