"""Regression tests for the worker defects of issue #11.

Stuck handlers that spend the abandoned-thread budget, burst workers that never
swept, heartbeats lost to a server's idle timeout, and max runtime noticed only at
heartbeat time. Real threads and processes on a real database; time is pinned where
the queue's clock decides, and every wait is a bounded poll.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

import sqlq_orm
from sqlq_orm.schema.models import WorkerRecord
from tests.worker_helpers import Processes, job_row, wait_until

EXIT_HANDLERS_STUCK = 3


@pytest.fixture
def live_queue(engine) -> sqlq_orm.Queue:
    """A queue on the database's own clock, like the worker processes use."""
    return sqlq_orm.Queue(engine)


@pytest.fixture
def processes(tmp_path, db_url) -> Iterator[Processes]:
    started = Processes(tmp_path, db_url)
    try:
        yield started
    finally:
        started.kill_all()


def attempts_of(queue: sqlq_orm.Queue, job_id: int) -> list[tuple[str, str | None]]:
    return [(a.status, a.error_code) for a in job_row(queue, job_id).attempts]


# ------------------------------------------------- 2. the abandoned-thread budget


@pytest.mark.slow
def test_worker_whose_stuck_handlers_spent_the_abandoned_budget_says_so_and_exits_3(
    live_queue, processes, tmp_path
):
    never = str(tmp_path / "never")
    stuck = [
        live_queue.enqueue("hold", {"until_file": never}, max_runtime_seconds=2, max_retries=0)
        for _ in range(3)
    ]
    quick = [live_queue.enqueue("echo") for _ in range(3)]
    worker = processes.worker(
        "stuck-worker", "--concurrency", "1", "--lease", "3", "--heartbeat", "0.2", "--burst"
    )

    wait_until(lambda: worker.poll() is not None, "the worker with spent budget to exit")

    log = processes.log(worker)
    assert worker.returncode == EXIT_HANDLERS_STUCK, log
    (line,) = [line for line in log.splitlines() if " ERROR sqlq_orm.worker:" in line]
    assert "max_abandoned=1" in line
    assert "sqlq: error:" in log  # and one line on stderr, like any command error
    abandoned = [job.id for job in stuck if f"job {job.id} " in line]
    assert len(abandoned) == 2, line
    with live_queue.read() as connection:
        registered = connection.execute(select(func.count()).select_from(WorkerRecord)).scalar()
    assert registered == 0, "a worker that gave up must not look alive in stats"
    assert all(job_row(live_queue, job.id).status == "QUEUED" for job in quick)
