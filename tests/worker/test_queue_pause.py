"""Pausing a queue under a real worker: it stops starting jobs within a second, jobs
already running finish, and a resume wakes an idle worker (no poll waited out)."""

from __future__ import annotations

import threading
import time

import pytest

import sqlq_orm
from sqlq_orm import HandlerRegistry, Worker
from tests.support.worker_helpers import running, status_is, wait_until
from tests.worker.test_wakeups import SLOW_PROCESS, WAKE_LIMIT, skip_without_a_listener

PAUSE_LIMIT = 1.0
"""Target: a paused queue starts no job later than this after the pause commits."""
ROUNDS = 5


def test_a_paused_queue_stops_starting_jobs_within_a_second_and_resumes(live_queue):
    starts: list[float] = []
    lock = threading.Lock()

    def record(ctx: sqlq_orm.JobContext) -> None:
        with lock:
            starts.append(time.monotonic())
        time.sleep(0.005)

    live_queue.enqueue_many([{"type": "record"} for _ in range(3000)])
    worker = Worker(
        live_queue,
        HandlerRegistry({"record": record}),
        concurrency=4,
        poll_interval=0.2,
        sweep_interval=None,
        install_signal_handlers=False,
        run_schedules=False,
    )
    latencies = []
    with running(worker):
        wait_until(lambda: len(starts) >= 20, "the first jobs")
        for _ in range(ROUNDS):
            live_queue.pause_queue("default")
            paused_at = time.monotonic()
            time.sleep(PAUSE_LIMIT + 0.5)
            with lock:
                late = [t - paused_at for t in starts if t > paused_at]
                before = len(starts)
            latencies.append(max(late, default=0.0))
            live_queue.resume_queue("default")
            wait_until(lambda n=before: len(starts) >= n + 20, "jobs after the resume", timeout=10)
    print(f"\nlast start after a pause, seconds: {[round(x, 3) for x in latencies]}")
    assert max(latencies) <= PAUSE_LIMIT, f"starts after the pause, seconds: {latencies}"
    assert sqlq_orm.invariants.check(live_queue) == []


@pytest.mark.slow
def test_a_resume_wakes_an_idle_worker_process_at_once(live_queue, processes):
    skip_without_a_listener(live_queue)
    worker = processes.worker("worker-a", *SLOW_PROCESS)
    first = live_queue.enqueue("echo")
    wait_until(status_is(live_queue, first.id, "SUCCEEDED"), "the first job", timeout=30)
    live_queue.pause_queue("default")
    job = live_queue.enqueue("echo")  # wakes the worker, which finds nothing to claim
    time.sleep(1.5)
    assert live_queue.get_job(job.id).status == "QUEUED"

    live_queue.resume_queue("default")

    wait_until(status_is(live_queue, job.id, "SUCCEEDED"), "the job", timeout=WAKE_LIMIT)
    assert worker.poll() is None
