"""The worker's pipeline: reused handler threads, prefetch bounded by the handlers' pace,
prefetched jobs given back at shutdown, and one heartbeat statement for every lease."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import event

from sqlq_orm import HandlerRegistry, JobContext, Worker, job_timeline
from tests.support.worker_helpers import job_row, running, status_is, wait_until

FAST = {"poll_interval": 0.05, "sweep_interval": None, "install_signal_handlers": False}


def events_of(queue, job_id: int) -> list[str]:
    return [e.event for e in job_timeline(queue, job_id).events]


def test_handler_threads_are_reused_not_started_per_job(queue):
    threads: set[int] = set()
    queue.enqueue_many([{"type": "note"}] * 60)

    stats = Worker(
        queue,
        HandlerRegistry({"note": lambda ctx: threads.add(threading.get_ident())}),
        concurrency=3,
        burst=True,
        **FAST,
    ).run()

    assert stats.succeeded == 60
    assert 1 <= len(threads) <= 3


def test_a_worker_claims_no_job_ahead_of_handlers_it_has_not_seen_finish(queue):
    # Nothing is known of how long "block" takes: no prefetch, so the second job stays
    # free for other workers instead of waiting behind the first, its lease running.
    go = threading.Event()
    first, second = queue.enqueue("block"), queue.enqueue("block")
    worker = Worker(
        queue,
        HandlerRegistry({"block": lambda ctx: go.wait(30)}),
        concurrency=1,
        prefetch=4,
        **FAST,
    )
    try:
        with running(worker):
            wait_until(status_is(queue, first.id, "RUNNING"), "the first job to run")
            wait_until(lambda: worker.stats.claimed == 1, "the first claim")
            assert job_row(queue, second.id).status == "QUEUED"
            go.set()
            wait_until(status_is(queue, second.id, "SUCCEEDED"), "the second job to finish")
    finally:
        go.set()


def test_prefetched_jobs_go_back_at_once_when_the_worker_stops(queue):
    go = threading.Event()
    blocking = threading.Event()

    def block(ctx: JobContext) -> None:
        blocking.set()
        go.wait(30)

    queue.enqueue_many([{"type": "quick"}] * 20)  # the worker learns "quick" is quick
    worker = Worker(
        queue,
        HandlerRegistry({"quick": lambda ctx: None, "block": block}),
        concurrency=1,
        prefetch=4,
        grace_period=30,
        **FAST,
    )
    try:
        with running(worker):
            wait_until(lambda: worker.stats.succeeded == 20, "the quick jobs")
            held = queue.enqueue("block")
            waiting = [queue.enqueue("quick") for _ in range(3)]
            wait_until(blocking.is_set, "the blocking job to run")
            wait_until(lambda: worker.stats.claimed == 24, "the prefetch behind it")
            worker.request_stop()
            wait_until(lambda: worker.stats.released == 3, "the prefetched jobs to go back")
            assert job_row(queue, held.id).status == "RUNNING"  # still within its grace
            go.set()
            wait_until(status_is(queue, held.id, "SUCCEEDED"), "the running job to finish")
    finally:
        go.set()

    for job in waiting:
        row = job_row(queue, job.id)
        assert (row.status, row.retry_count) == ("QUEUED", 0)
        assert events_of(queue, job.id)[-1] == "RELEASED"
        assert [a.status for a in row.attempts] == ["RELEASED"]


def test_one_heartbeat_statement_renews_every_lease_the_worker_holds(queue, engine):
    go = threading.Event()
    jobs = [queue.enqueue("block") for _ in range(4)]
    heartbeats: list[str] = []
    liveness: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE") and "heartbeat_at" in statement:
            heartbeats.append(statement)
        elif "INSERT INTO sqlq_workers" in statement:
            liveness.append(statement)

    worker = Worker(
        queue,
        HandlerRegistry({"block": lambda ctx: go.wait(30)}),
        concurrency=4,
        heartbeat_interval=0.05,
        **FAST,
    )
    try:
        with running(worker):
            for job in jobs:
                wait_until(status_is(queue, job.id, "RUNNING"), "every job to run")
            event.listen(engine, "before_cursor_execute", seen)
            try:
                wait_until(lambda: len(liveness) >= 5, "five heartbeat rounds")
            finally:
                event.remove(engine, "before_cursor_execute", seen)
            go.set()
    finally:
        go.set()

    # One renewal per round for the four leases (a round renews, then says alive).
    assert len(liveness) - 1 <= len(heartbeats) <= len(liveness) + 1
