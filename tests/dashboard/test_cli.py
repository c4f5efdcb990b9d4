"""``sqlq dashboard``: serves on loopback, refuses an open bind without a hook."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.support.worker_helpers import ROOT, subprocess_env, wait_until

pytestmark = pytest.mark.slow


def sqlq(*args: str, cwd=ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq_orm", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=subprocess_env(),
        timeout=60,
    )


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    assert sqlq("--db", url, "migrate").returncode == 0
    assert sqlq("--db", url, "enqueue", "send_email", "--payload", '{"to": "ada"}').returncode == 0
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return None


def fetch_as(url: str, host: str) -> int:
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_sqlq_dashboard_serves_the_pages_on_loopback(sqlite_url):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sqlq_orm",
            "--db",
            sqlite_url,
            "dashboard",
            "--port",
            str(port),
            "--allowed-host",
            "jobs.example.com",
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
    )
    try:
        overview = wait_until(lambda: fetch(f"http://127.0.0.1:{port}/"), "the dashboard")
        assert "read-only" in overview and "Jobs by state, per type" in overview
        assert "send_email" in (fetch(f"http://127.0.0.1:{port}/jobs") or "")
        assert fetch_as(f"http://127.0.0.1:{port}/", f"localhost:{port}") == 200
        assert fetch_as(f"http://127.0.0.1:{port}/", "jobs.example.com") == 200
        assert fetch_as(f"http://127.0.0.1:{port}/", "rebound.example") == 400
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/" in out


def test_an_open_bind_without_an_authorize_hook_is_refused(sqlite_url):
    result = sqlq("--db", sqlite_url, "dashboard", "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 1
    assert "refusing to serve the dashboard on '0.0.0.0' without an authorisation hook" in (
        result.stderr
    )


def test_a_bad_authorize_spec_is_named(sqlite_url):
    result = sqlq("--db", sqlite_url, "dashboard", "--authorize", "no_such_module:check")
    assert result.returncode == 1
    assert "cannot import 'no_such_module' for --authorize" in result.stderr
