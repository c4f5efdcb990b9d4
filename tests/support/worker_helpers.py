"""Helpers for the worker tests: bounded waits, in-process workers, worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import sqlq_orm
from tests.support.pgbouncer import worker_environment

ROOT = Path(__file__).resolve().parents[2]
TEST_HANDLERS = "tests.support.handlers_for_tests:registry"
WAIT_LIMIT = 60.0
"""Upper bound of any wait for a condition; reaching it fails the test, it never passes it."""


def wait_until(condition: Callable[[], Any], what: str, timeout: float = WAIT_LIMIT) -> Any:
    """Poll ``condition`` until it is truthy; after ``timeout``, fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def job_row(queue: sqlq_orm.Queue, job_id: int) -> Any:
    """A fresh read of the job with its attempts and events."""
    return queue.get_job(job_id)


def status_is(queue: sqlq_orm.Queue, job_id: int, *statuses: str) -> Callable[[], bool]:
    return lambda: job_row(queue, job_id).status in statuses


@contextmanager
def running(worker: sqlq_orm.Worker) -> Iterator[sqlq_orm.Worker]:
    """Run ``worker`` in a thread for the duration of the block, then stop it."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    thread = threading.Thread(target=target, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop(immediate=True)
        thread.join(timeout=30)
    assert not thread.is_alive(), "worker thread did not stop"
    if errors:
        raise errors[0]


def worker_command(db_url: str, *args: str, handlers: str = TEST_HANDLERS) -> list[str]:
    return [
        sys.executable, "-m", "sqlq_orm", "--db", db_url,
        "worker", "--handlers", handlers, "--poll", "0.1", *args,
    ]  # fmt: skip


def subprocess_env() -> dict[str, str]:
    """The environment for child processes: this checkout importable first."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


class Processes:
    """Worker processes started by one test; all are killed at teardown, whatever happened."""

    def __init__(self, directory: Path, db_url: str) -> None:
        self.directory = directory
        self.db_url = db_url
        self.started: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def worker(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log_path = self.directory / f"{name}.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                worker_command(self.db_url, "--worker-id", name, *args),
                stdout=log,
                stderr=subprocess.STDOUT,
                # Through PgBouncer: the variables that make `sqlq` pool-safe.
                env={**subprocess_env(), **worker_environment(self.db_url)},
                cwd=ROOT,
            )
        self.started.append(process)
        self.logs[process.pid] = log_path
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        return self.logs[process.pid].read_text(errors="replace")

    def kill_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()  # SIGKILL ends a SIGSTOPped process too
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
