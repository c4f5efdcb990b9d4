"""The dashboard on the oldest Starlette it supports, mounted in the FastAPI that pins it.

``sqlq_orm[dashboard]`` required ``starlette>=0.40``: installed into a FastAPI 0.111 app
(which pins ``starlette>=0.37.2,<0.38``), pip moved Starlette to 1.x and the app's own
import failed (``Router.__init__() got an unexpected keyword argument 'on_startup'``).
The extra now takes every Starlette from :data:`OLDEST_STARLETTE` on, which covers
every FastAPI release since 0.110 (March 2024). The rest of the suite runs on the
newest. This test runs the mount test in a child process whose ``sys.path`` puts the
oldest Starlette and that FastAPI first. They are installed once with ``pip install
--no-deps --target`` into a cache directory (``$SQLQ_TEST_CACHE``, default
``~/.cache/sqlq_orm-tests``), reused on later runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.worker_helpers import ROOT

OLDEST_STARLETTE = "0.37.2"
"""Keep in step with ``starlette>=`` in pyproject.toml's ``dashboard`` extra."""
FASTAPI_PINNING_IT = "0.112.0"
"""A FastAPI that requires ``starlette>=0.37.2,<0.38.0``."""

MOUNTED = """
import socket
import sys
import threading
import time
import urllib.request

import fastapi
import starlette
import uvicorn

import sqlq_orm
from sqlq_orm import migrate
from sqlq_orm.dashboard import create_app

assert (starlette.__version__, fastapi.__version__) == (sys.argv[2], sys.argv[3]), (
    starlette.__file__, starlette.__version__, fastapi.__version__)
migrate.upgrade(sys.argv[1])
queue = sqlq_orm.Queue(sqlq_orm.create_engine(sys.argv[1]))
job = queue.enqueue("send_invoice", {"order": 7}).id

app = fastapi.FastAPI()


@app.get("/")
def home():
    return {"app": "host"}


app.mount("/ops/jobs", create_app(queue))

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
port = listener.getsockname()[1]
server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True).start()
while not server.started:
    time.sleep(0.01)


def get(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as response:
        assert response.status == 200, path
        return response.read().decode()


assert get("/") == '{"app":"host"}'
overview = get("/ops/jobs/")
assert 'href="/ops/jobs/static/dashboard.css"' in overview, overview[:2000]
assert 'href="/ops/jobs/jobs?status=FAILED"' in overview
assert "send_invoice" in get("/ops/jobs/jobs")
assert f"Job {job}" in get(f"/ops/jobs/jobs/{job}")
assert "dashboard" in get("/ops/jobs/static/dashboard.js")
server.should_exit = True
print("mounted ok")
"""


def oldest_packages() -> Path:
    """A directory holding the oldest Starlette and its FastAPI (installed once)."""
    cache = Path(os.environ.get("SQLQ_TEST_CACHE", Path.home() / ".cache" / "sqlq_orm-tests"))
    target = cache / f"starlette-{OLDEST_STARLETTE}-fastapi-{FASTAPI_PINNING_IT}"
    if (target / "starlette").is_dir() and (target / "fastapi").is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=cache))
    done = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
            str(building), f"starlette=={OLDEST_STARLETTE}", f"fastapi=={FASTAPI_PINNING_IT}",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        building.rename(target)  # another run may have won the race: then use its copy
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
    return target


def test_the_dashboard_mounts_in_a_fastapi_app_on_the_oldest_supported_starlette(tmp_path):
    packages = oldest_packages()
    path = os.pathsep.join([str(packages), str(ROOT)])

    done = subprocess.run(
        [sys.executable, "-c", MOUNTED, f"sqlite:///{tmp_path / 'queue.db'}",
         OLDEST_STARLETTE, FASTAPI_PINNING_IT],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert "mounted ok" in done.stdout


def test_the_dashboard_extra_admits_the_oldest_starlette_tested_here():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dashboard = extras["optional-dependencies"]["dashboard"]
    assert f"starlette>={OLDEST_STARLETTE}" in dashboard


