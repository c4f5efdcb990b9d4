"""examples/fastapi_app: a FastAPI app that enqueues inside the request's transaction,
driven through FastAPI's test client, with a real worker running its async handler.

Runs on a SQLite file (aiosqlite), PostgreSQL (asyncpg) and MariaDB (aiomysql).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy
from sqlalchemy import func, select

from sqlq_orm.schema.models import Job
from tests.support.worker_helpers import running, wait_until

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402 - after the skip

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app"


@pytest.fixture(scope="module")
def example() -> Iterator[SimpleNamespace]:
    """The example's modules (``models``, ``app``, ``worker``), imported as it does."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        modules = {name: importlib.import_module(name) for name in ("models", "app", "worker")}
    finally:
        sys.path.remove(str(EXAMPLE))
    yield SimpleNamespace(**modules)
    for name in modules:
        sys.modules.pop(name, None)


def _jobs(engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(Job)))


def test_an_order_and_its_job_commit_together_and_an_async_handler_runs_it(example, db_url, engine):
    # No driver in the URL, as a user would write it: create_engine and
    # create_async_engine each pick theirs (psycopg / asyncpg, PyMySQL / aiomysql).
    parsed = sqlalchemy.make_url(db_url)
    url = parsed.set(drivername=parsed.get_backend_name()).render_as_string(hide_password=False)
    worker = example.worker.make_worker(
        url, poll_interval=0.05, install_signal_handlers=False, sweep_interval=None
    )

    with TestClient(example.app.create_app(url)) as client:
        refused = client.post("/orders", json={"number": "A-0", "total": 0})
        assert refused.status_code == 422, refused.text
        assert _jobs(engine) == 0  # rolled back with the request: no order, no job

        placed = client.post("/orders", json={"number": "A-1", "total": 42})
        assert placed.status_code == 201, placed.text
        order_id, job_id = placed.json()["order_id"], placed.json()["job_id"]
        assert client.get(f"/orders/{order_id}").json()["receipt"] is None

        with running(worker):
            wait_until(
                lambda: client.get(f"/orders/{order_id}").json()["receipt"] is not None,
                "the worker's async handler to send the receipt",
            )

        assert client.get(f"/orders/{order_id}").json() == {
            "number": "A-1", "total": 42, "receipt": "receipt for A-1: 42",
        }  # fmt: skip
        assert client.get("/orders/999").status_code == 404
    row = worker.queue.get_job(job_id)
    assert (row.status, row.result_ref, row.queue) == ("SUCCEEDED", f"receipt:{order_id}", "mail")
    assert _jobs(engine) == 1
