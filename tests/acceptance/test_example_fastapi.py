"""examples/fastapi_app: a FastAPI app that enqueues inside the request's transaction,
driven through FastAPI's test client, its jobs checked and run with the testing kit
(``sqlq_orm.testing``: the example's worker's queue and async handler, drained in the
test's thread through the worker's own code).

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

from sqlq_orm.testing import assert_enqueued, assert_not_enqueued, drain

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


def test_an_order_and_its_job_commit_together_and_an_async_handler_runs_it(example, db_url, engine):
    # No driver in the URL, as a user would write it: create_engine and
    # create_async_engine each pick theirs (psycopg / asyncpg, PyMySQL / aiomysql).
    parsed = sqlalchemy.make_url(db_url)
    url = parsed.set(drivername=parsed.get_backend_name()).render_as_string(hide_password=False)
    worker = example.worker.make_worker(url)
    queue = worker.queue

    with TestClient(example.app.create_app(url)) as client:
        refused = client.post("/orders", json={"number": "A-0", "total": 0})
        assert refused.status_code == 422, refused.text
        assert_not_enqueued("send_receipt", on=queue)  # rolled back with the request

        placed = client.post("/orders", json={"number": "A-1", "total": 42})
        assert placed.status_code == 201, placed.text
        order_id, job_id = placed.json()["order_id"], placed.json()["job_id"]
        assert_enqueued("send_receipt", on=queue, args={"order_id": order_id}, queue="mail")
        assert client.get(f"/orders/{order_id}").json()["receipt"] is None

        assert drain(queue, worker.handlers, queues=worker.queues).succeeded == 1

        assert client.get(f"/orders/{order_id}").json() == {
            "number": "A-1", "total": 42, "receipt": "receipt for A-1: 42",
        }  # fmt: skip
        assert client.get("/orders/999").status_code == 404
    row = queue.get_job(job_id)
    assert (row.status, row.result_ref, row.queue) == ("SUCCEEDED", f"receipt:{order_id}", "mail")
