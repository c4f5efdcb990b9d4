"""Regression tests for the worker defects of issue #11.

Stuck handlers that spend the abandoned-thread budget, burst workers that never
swept, heartbeats lost to a server's idle timeout, and max runtime noticed only at
heartbeat time. Real threads and processes on a real database; time is pinned where
the queue's clock decides, and every wait is a bounded poll.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

import sqlq_orm
from sqlq_orm import HandlerRegistry, JobContext, Worker
from sqlq_orm.schema.models import WorkerRecord
from tests.support.faultkit import PauseAfter
from tests.support.worker_helpers import job_row, running, wait_until

FAST = {"poll_interval": 0.05, "sweep_interval": None, "install_signal_handlers": False}
EXIT_HANDLERS_STUCK = 3


def attempts_of(queue: sqlq_orm.Queue, job_id: int) -> list[tuple[str, str | None]]:
    return [(a.status, a.error_code) for a in job_row(queue, job_id).attempts]


# ------------------------------------------------- 2. the abandoned-thread budget


@pytest.mark.slow
def test_worker_whose_stuck_handlers_spent_the_abandoned_budget_says_so_and_exits_3(
    live_queue, processes, tmp_path
):
    # Stuck inside one C call (time.sleep): the interrupt at the max runtime cannot
    # reach it (a Python loop would be stopped: test_worker.py's spinning handler).
    stuck = [
        live_queue.enqueue("ignore_shutdown", max_runtime_seconds=2, max_retries=0)
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


# ------------------------------------------------------- 3. burst workers sweep


def test_burst_worker_sweeps_before_deciding_there_is_nothing_to_do(queue, clock):
    job = queue.enqueue("echo", max_retries=0)
    (lease,) = queue.claim("dead-worker", lease_seconds=5, start=True)
    clock.advance(6)  # the dead worker's lease ran out; nobody else sweeps

    Worker(
        queue, HandlerRegistry({"echo": lambda ctx: None}), burst=True,
        **{**FAST, "sweep_interval": 60.0},
    ).run()  # fmt: skip

    assert lease.job_id == job.id
    assert job_row(queue, job.id).status == "FAILED"
    assert attempts_of(queue, job.id) == [("FAILED", "LEASE:EXPIRED")]


def test_burst_worker_stays_for_a_job_its_own_run_requeued_while_it_claimed(queue, engine):
    """The claim looks while a run holds its slot and finds nothing; the run then
    snoozes (its job is due again at once) and frees the slot before the worker asks
    whether anything is left. The worker must claim again, not leave the job behind."""
    if engine.dialect.name == "sqlite":
        pytest.skip("a claim paused inside its transaction holds SQLite's one writer")
    job = queue.enqueue("nap")
    started, go_on, runs = threading.Event(), threading.Event(), []

    def nap(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            started.set()
            go_on.wait(30)
            raise sqlq_orm.Snooze(0)

    worker = Worker(queue, HandlerRegistry({"nap": nap}), burst=True, concurrency=2, **FAST)
    thread = threading.Thread(target=worker.run, name="burst-worker", daemon=True)
    thread.start()
    assert started.wait(30)
    # The worker's next claim (its candidate read, on PostgreSQL and MariaDB alike).
    with PauseAfter(engine, r"sqlq_jobs\.priority( AS priority)?, sqlq_jobs\.run_at") as paused:
        paused.wait()  # it found nothing: the one job is running
        go_on.set()
        wait_until(lambda: job_row(queue, job.id).status == "QUEUED", "the snooze to land")
        wait_until(lambda: not worker.running_jobs, "the run's slot to be freed")
    thread.join(30)

    assert not thread.is_alive()
    assert len(runs) == 2 and job_row(queue, job.id).status == "SUCCEEDED"


def test_burst_worker_sweeps_a_job_it_abandoned_for_max_runtime_before_exiting(queue, clock):
    unhang = threading.Event()
    started = threading.Event()

    def hang(ctx: JobContext) -> None:
        started.set()
        unhang.wait(60)  # a truly stuck call: ignores its context

    job = queue.enqueue("hang", max_runtime_seconds=60, max_retries=0)
    worker = Worker(
        queue, HandlerRegistry({"hang": hang}), burst=True, lease_seconds=120,
        heartbeat_interval=0.05, **{**FAST, "sweep_interval": 60.0},
    )  # fmt: skip
    run = threading.Thread(target=worker.run, daemon=True)
    try:
        run.start()
        wait_until(started.is_set, "the job to start")
        clock.advance(61)
        run.join(timeout=60)
    finally:
        unhang.set()

    assert not run.is_alive(), "the burst worker did not exit"
    row = job_row(queue, job.id)
    assert (row.status, row.error_code) == ("FAILED", "TIMEOUT:MAX_RUNTIME")


def test_burst_worker_with_sweeping_disabled_does_not_sweep(queue, clock):
    queue.enqueue("echo", max_retries=0)
    (lease,) = queue.claim("dead-worker", lease_seconds=5, start=True)
    clock.advance(6)

    Worker(queue, HandlerRegistry({"echo": lambda ctx: None}), burst=True, **FAST).run()

    assert job_row(queue, lease.job_id).status == "RUNNING"


# ------------------------------------------- 4. a server idle timeout on the pool


@pytest.mark.postgres
def test_heartbeat_on_a_connection_the_server_timed_out_retries_and_the_job_succeeds(
    db_url, engine
):
    if not db_url.startswith("postgresql"):
        pytest.skip("idle_session_timeout is PostgreSQL's")
    # Every pooled connection dies after 0.3 s idle, well inside each heartbeat interval.
    idle_killed = sqlq_orm.create_engine(
        db_url, connect_args={"options": "-c idle_session_timeout=300"}
    )
    queue = sqlq_orm.Queue(idle_killed)
    fenced: list[str | None] = []

    def patient(ctx: JobContext) -> None:
        ctx.sleep(4.5)  # longer than the lease: only heartbeats keep the job ours
        fenced.append(ctx.stop_reason)

    job = queue.enqueue("patient", max_retries=0)
    worker = Worker(
        queue, HandlerRegistry({"patient": patient}), lease_seconds=3,
        heartbeat_interval=1.0, **FAST,
    )  # fmt: skip
    try:
        with running(worker):
            wait_until(lambda: fenced, "the handler to return")
            wait_until(lambda: not worker.running_jobs, "its outcome to be dealt with")
    finally:
        idle_killed.dispose()

    assert fenced == [None]
    assert attempts_of(sqlq_orm.Queue(engine), job.id) == [("SUCCEEDED", None)]


def test_cli_worker_engine_pings_pooled_connections(tmp_path, monkeypatch):
    from sqlq_orm.cli import connect, main

    made: list[dict] = []
    real = connect.open_engine

    def recording(db, **kwargs):
        made.append(kwargs)
        return real(db, **kwargs)

    monkeypatch.setattr(connect, "open_engine", recording)
    db = f"sqlite:///{tmp_path / 'q.db'}"
    assert main(["--db", db, "migrate"]) == 0
    made.clear()
    assert main(["--db", db, "worker", "--handlers", "tests.support.handlers_for_tests",
                          "--burst", "--no-sweep"]) == 0  # fmt: skip

    assert made and all(kwargs.get("pool_pre_ping") for kwargs in made)


# ------------------------------------------- 5. max runtime at its own deadline


def test_max_runtime_stops_the_handler_at_its_deadline_not_at_the_next_heartbeat(queue, clock):
    told_to_stop: list[bool] = []
    returned = threading.Event()

    def slow(ctx: JobContext) -> None:
        told_to_stop.append(ctx.sleep(3))  # wakes early once the job should stop
        returned.set()

    job = queue.enqueue("slow", max_runtime_seconds=1, max_retries=0)
    worker = Worker(queue, HandlerRegistry({"slow": slow}), lease_seconds=30, **FAST)
    with running(worker):
        wait_until(returned.is_set, "the handler to return")
        wait_until(lambda: not worker.running_jobs, "the worker to let go of the job")
        clock.advance(2)  # the queue's clock agrees the run is past its max runtime
        swept = queue.sweep()

    row = job_row(queue, job.id)
    assert told_to_stop == [True]
    assert swept.timed_out == 1
    assert (row.status, row.error_code) == ("FAILED", "TIMEOUT:MAX_RUNTIME")
    assert worker.stats.succeeded == 0 and worker.stats.discarded == 1
