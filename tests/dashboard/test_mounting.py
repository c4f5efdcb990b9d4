"""The dashboard mounted by a host: under a prefix in an ASGI app, and in a WSGI server."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from sqlq_orm.dashboard import create_app
from tests.dashboard.seed import seed


def get(url: str, **headers: str) -> str:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as response:
        assert response.status == 200
        return response.read().decode()


def test_under_a_prefix_in_an_asgi_host_every_link_keeps_the_prefix(serve, queue):
    jobs = seed(queue)
    host = Starlette(
        routes=[
            Route("/", lambda request: PlainTextResponse("the host app")),
            Mount("/ops/jobs", app=create_app(queue)),
        ]
    )
    url = serve(app=host).url
    assert get(url + "/") == "the host app"
    overview = get(url + "/ops/jobs/")
    assert 'href="/ops/jobs/static/dashboard.css"' in overview
    assert 'href="/ops/jobs/jobs?status=FAILED"' in overview
    assert "PAYMENT:CARD_DECLINED" in get(url + "/ops/jobs/jobs?status=FAILED")
    assert f"Job {jobs.failed}" in get(url + f"/ops/jobs/jobs/{jobs.failed}")
    assert "dashboard" in get(url + "/ops/jobs/static/dashboard.js")


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_in_a_wsgi_host_through_a2wsgi(queue):
    a2wsgi = pytest.importorskip("a2wsgi", reason="needs sqlq_orm[dashboard-test]")
    seed(queue)
    # A WSGI server may not pass the client's address on (wsgiref sends no port, so
    # a2wsgi leaves it out): the default loopback check then refuses everyone, and the
    # host plugs in its own check, here a header its login layer would set.
    dashboard = a2wsgi.ASGIMiddleware(
        create_app(queue, authorize=lambda request: request.headers.get("X-User") == "ops")
    )
    unguarded = a2wsgi.ASGIMiddleware(create_app(queue))

    def host(environ, start_response):
        # What Flask's or Django's mounting does: the prefix moves to SCRIPT_NAME.
        path = environ.get("PATH_INFO", "")
        if path.startswith("/jobs"):
            environ["SCRIPT_NAME"] += "/jobs"
            environ["PATH_INFO"] = path[len("/jobs") :] or "/"
            return dashboard(environ, start_response)
        if path.startswith("/open"):
            environ["SCRIPT_NAME"] += "/open"
            environ["PATH_INFO"] = path[len("/open") :] or "/"
            return unguarded(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the host app"]

    server = make_server("127.0.0.1", 0, host, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        assert get(url + "/") == "the host app"
        overview = get(url + "/jobs/", **{"X-User": "ops"})
        assert 'href="/jobs/workers"' in overview
        assert "w-alive" in get(url + "/jobs/workers", **{"X-User": "ops"})
        assert "sqlq_jobs" in get(url + "/jobs/metrics", **{"X-User": "ops"})
        for refused in (url + "/jobs/", url + "/open/"):
            with pytest.raises(urllib.error.HTTPError, match="403"):
                get(refused)
    finally:
        server.shutdown()
        server.server_close()


def test_a_host_with_its_own_models_sees_its_tables_and_columns(serve, engine):
    import sqlq_orm
    from tests.acceptance.test_host_app import RENAMED

    RENAMED.base.metadata.create_all(engine)
    queue = sqlq_orm.Queue(engine, models=RENAMED.models)
    job = queue.enqueue("send_invoice", {"invoice": 12}, tenant_id=7).id
    url = serve(app=create_app(engine, models=RENAMED.models)).url
    detail = get(url + f"/jobs/{job}")
    assert '<tr class="app-column"><th>tenant_id</th><td>7</td></tr>' in detail
    assert "send_invoice" in get(url + "/jobs")
    assert 'sqlq_jobs{queue="default",status="QUEUED"} 1.0' in get(url + "/metrics")


def test_a_host_without_a_schedule_model_gets_a_page_saying_so(serve, engine):
    import sqlq_orm
    from tests.acceptance.test_host_app import RENAMED

    assert RENAMED.models.schedule is None
    RENAMED.base.metadata.create_all(engine)
    sqlq_orm.Queue(engine, models=RENAMED.models).enqueue("send_invoice", {"invoice": 12})
    url = serve(app=create_app(engine, models=RENAMED.models)).url
    assert 'href="/schedules"' in get(url + "/")  # the navigation still offers the page
    page = get(url + "/schedules")
    assert "models have no schedule table, so it runs no recurring schedules" in page
    assert 'id="schedules"' not in page


def test_the_worker_page_and_metrics_show_a_process_pools_children_and_mishaps(serve, queue):
    pool = {
        "kind": "process",
        "children": [{"pid": 4101, "jobs": 7}, {"pid": 4102, "jobs": 3}],
        "recycles": 2,
        "crashes": 1,
        "deadline_kills": 1,
    }
    queue.register_worker(
        "pool-worker", hostname="h", pid=4100, queues=["default"], concurrency=2, pool=pool
    )
    queue.register_worker(
        "thread-worker", hostname="h", pid=4200, queues=["default"], concurrency=2
    )
    url = serve().url

    page = get(url + "/worker?id=pool-worker")
    metrics = get(url + "/metrics")

    assert "process: 2 children (pid 4101 ran 7 jobs, pid 4102 ran 3 jobs)" in page
    assert "2 recycled, 1 crashed, 1 killed at deadline" in page
    assert '<td id="worker-pool">thread</td>' in get(url + "/worker?id=thread-worker")
    assert 'sqlq_worker_pool_children{worker="pool-worker"} 2.0' in metrics
    assert 'sqlq_worker_pool_crashes{worker="pool-worker"} 1.0' in metrics
    assert 'sqlq_worker_pool_child_jobs{pid="4101",worker="pool-worker"} 7.0' in metrics
    assert "thread-worker" not in metrics.split("sqlq_worker_pool_recycles")[1]
