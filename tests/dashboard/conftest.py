"""The dashboard served for real: uvicorn in a thread on a free port, a headless chromium.

The app runs on the ``queue`` fixture (a SQLite file and, when reachable, PostgreSQL;
the queue's clock is pinned). Browser tests need Debian's ``chromium`` (and Playwright
from PyPI, which drives it without downloading a browser of its own): without them
they skip with the reason, unless ``SQLQ_REQUIRE_BROWSER=1`` (set by CI) makes that a
failure. Screenshots go to ``$SQLQ_TEST_ARTIFACTS`` (default ``test-artifacts/``).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the dashboard tests need sqlq_orm[dashboard]")
uvicorn = pytest.importorskip("uvicorn", reason="the dashboard tests need sqlq_orm[dashboard]")

from sqlq_orm.dashboard import create_app  # noqa: E402
from tests.support.queue_helpers import wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")


def _require_browser() -> bool:
    return os.environ.get("SQLQ_REQUIRE_BROWSER", "") not in ("", "0", "false")


def artifact_dir() -> Path:
    path = Path(os.environ.get("SQLQ_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Served:
    """A running dashboard: its base URL and the queue behind it."""

    url: str
    queue: Any


class _Server:
    def __init__(self, app: Any) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    def __enter__(self) -> _Server:
        self.thread.start()
        wait_for(lambda: self.server.started, "the dashboard server to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.socket.close()


@pytest.fixture
def serve(queue) -> Iterator[Callable[..., Served]]:
    """``serve(**create_app_options)``: the dashboard for ``queue``, running until the end."""
    servers: list[_Server] = []

    def start(app: Any = None, **options: Any) -> Served:
        options.setdefault("refresh_seconds", 0)
        # Each test reads what it just wrote: no report shared across requests.
        options.setdefault("shared_seconds", 0)
        server = _Server(app if app is not None else create_app(queue, **options))
        servers.append(server.__enter__())
        return Served(url=f"http://127.0.0.1:{server.port}", queue=queue)

    yield start
    for server in servers:
        server.__exit__()


@pytest.fixture(scope="session")
def chromium_path() -> str:
    found = next((p for p in map(shutil.which, CHROMIUM_CANDIDATES) if p), None)
    problem = None
    if found is None:
        problem = "no chromium on PATH (Debian: apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "playwright is not installed (pip install 'sqlq_orm[dashboard-test]')"
    if problem:
        if _require_browser():
            pytest.fail(f"SQLQ_REQUIRE_BROWSER is set but {problem}")
        pytest.skip(problem)
    assert found is not None
    return found


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def console(message: Any) -> None:
        # A refused request (403/404) is logged by the browser too; those are tested
        # where they happen. Anything else (a script error, a CSP violation) fails.
        if message.type == "error" and "Failed to load resource" not in message.text:
            errors.append(message.text)

    page.on("console", console)
    yield page
    context.close()
    assert errors == [], f"errors in the browser console: {errors}"


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as a test artifact; return its path."""
    path = artifact_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
