"""The process pool (``Worker(pool="process")``): a job that crashes, spins past its max
runtime or eats memory harms only itself.

Real segfaults (``ctypes.string_at(0)``), real spins, real allocations and real
SIGKILLs of children, on every database; the worker runs in a thread of the test.
Handler outcomes that do not depend on the pool are checked over both pools in
``test_worker.py``.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
from pathlib import Path

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm import HandlerRegistry, JobContext, JobResult, Worker
from tests.support.worker_helpers import job_row, running, status_is, wait_until

FAST = {"poll_interval": 0.05, "sweep_interval": None, "install_signal_handlers": False}


def process_worker(queue: sqlq_orm.Queue, registry: HandlerRegistry, **options) -> Worker:
    return Worker(queue, registry, pool="process", **{**FAST, **options})


def pid_of(ctx: JobContext) -> JobResult:
    return JobResult(os.getpid())


def crash(ctx: JobContext) -> None:
    ctypes.string_at(0)  # a real segfault, as a broken C extension would


def spin(ctx: JobContext) -> None:
    while True:  # pure Python, never looks at its context: only a kill stops it
        pass


def wait_for_file(ctx: JobContext) -> None:
    Path(ctx.payload["pid_file"]).write_text(str(os.getpid()))
    ctx.sleep(120)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie of ours is gone too: nobody waits for it any more.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def result_of(queue: sqlq_orm.Queue, job_id: int):
    return json.loads(job_row(queue, job_id).result)


def attempts_of(queue: sqlq_orm.Queue, job_id: int) -> list[tuple[int, str, str | None]]:
    return [(a.attempt, a.status, a.error_code) for a in job_row(queue, job_id).attempts]


def test_a_segfaulting_job_fails_alone_naming_sigsegv_and_every_other_job_succeeds_first_time(
    live_queue,
):
    registry = HandlerRegistry({"echo": pid_of, "crash": crash})
    others = [live_queue.enqueue("echo").id for _ in range(12)]
    crasher = live_queue.enqueue("crash", max_retries=0).id
    others += [live_queue.enqueue("echo").id for _ in range(12)]
    worker = process_worker(live_queue, registry, concurrency=2, burst=True)

    stats = worker.run()

    row = job_row(live_queue, crasher)
    assert (row.status, row.error_code) == ("FAILED", "WORKER:CRASHED")
    assert "SIGSEGV" in row.error_detail
    assert all(attempts_of(live_queue, j) == [(1, "SUCCEEDED", None)] for j in others)
    assert (stats.succeeded, stats.failed) == (24, 1)
    assert worker.pool_info["crashes"] == 1
    timeline = sqlq_orm.job_timeline(live_queue, crasher)
    assert "SIGSEGV" in timeline.attempts[-1].error_detail  # what `sqlq show` prints
    pids = {result_of(live_queue, j) for j in others}
    assert os.getpid() not in pids and all(gone(pid) for pid in pids)


def test_a_poison_job_spends_only_its_own_retries(live_queue):
    queue = sqlq_orm.Queue(
        live_queue.engine, retry_policy=sqlq_orm.RetryPolicy(base_seconds=1, max_seconds=1)
    )
    registry = HandlerRegistry({"echo": pid_of, "crash": crash})
    poison = queue.enqueue("crash", max_retries=2).id
    others = [queue.enqueue("echo").id for _ in range(6)]
    worker = process_worker(queue, registry, concurrency=2)

    with running(worker):
        wait_until(status_is(queue, poison, "FAILED"), "the poison job to use up its retries")
        wait_until(lambda: all(job_row(queue, j).status == "SUCCEEDED" for j in others), "others")

    assert attempts_of(queue, poison) == [(n, "FAILED", "WORKER:CRASHED") for n in (1, 2, 3)]
    assert all(attempts_of(queue, j) == [(1, "SUCCEEDED", None)] for j in others)
    assert worker.pool_info["crashes"] == 3


def test_a_spinning_job_is_killed_at_its_max_runtime_and_timed_out_at_once(live_queue):
    registry = HandlerRegistry({"spin": spin, "echo": pid_of})
    spinner = live_queue.enqueue("spin", max_runtime_seconds=1, max_retries=0).id
    worker = process_worker(live_queue, registry, concurrency=1)

    with running(worker):
        # No sweeper runs: the worker itself records the timeout.
        wait_until(status_is(live_queue, spinner, "FAILED"), "the spinner to be timed out")
        after = live_queue.enqueue("echo").id
        wait_until(status_is(live_queue, after, "SUCCEEDED"), "the slot to serve the next job")
        info = worker.pool_info

    row = job_row(live_queue, spinner)
    assert row.error_code == "TIMEOUT:MAX_RUNTIME"
    assert "max runtime of 1s" in row.error_detail and "SIGTERM" in row.error_detail
    assert (info["deadline_kills"], info["crashes"]) == (1, 0)
    assert gone(result_of(live_queue, after))


def test_a_sigkilled_child_fails_its_job_naming_the_oom_killer_and_is_replaced(
    live_queue, tmp_path
):
    registry = HandlerRegistry({"wait": wait_for_file, "echo": pid_of})
    pid_file = tmp_path / "child.pid"
    victim = live_queue.enqueue("wait", {"pid_file": str(pid_file)}, max_retries=0).id
    worker = process_worker(live_queue, registry, concurrency=1)

    with running(worker):
        child = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), "child pid"))
        os.kill(child, signal.SIGKILL)
        wait_until(status_is(live_queue, victim, "FAILED"), "the victim to fail")
        after = live_queue.enqueue("echo").id
        wait_until(status_is(live_queue, after, "SUCCEEDED"), "a fresh child to take the slot")
        info = worker.pool_info

    row = job_row(live_queue, victim)
    assert row.error_code == "WORKER:CRASHED"
    assert "SIGKILL (possibly the OOM killer)" in row.error_detail
    assert result_of(live_queue, after) not in (child, os.getpid())
    assert info["crashes"] == 1 and len(info["children"]) == 1


def test_children_are_recycled_after_max_jobs_and_none_is_left_after_the_worker(live_queue):
    registry = HandlerRegistry({"echo": pid_of})
    jobs = [live_queue.enqueue("echo").id for _ in range(5)]
    worker = process_worker(
        live_queue, registry, concurrency=1, prefetch=0, max_jobs_per_child=2, burst=True
    )

    worker.run()

    pids = [result_of(live_queue, j) for j in jobs]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert worker.pool_info["recycles"] == 2
    assert all(gone(pid) for pid in pids)


def allocate(ctx: JobContext) -> JobResult:
    held = b"x" * (ctx.payload["mb"] << 20)  # written, so resident: a real allocation
    return JobResult({"pid": os.getpid(), "held": len(held) >> 20})


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_child_that_grew_past_max_memory_is_replaced_after_its_job(live_queue):
    registry = HandlerRegistry({"allocate": allocate})
    small = live_queue.enqueue("allocate", {"mb": 1}).id
    big = live_queue.enqueue("allocate", {"mb": 150}).id
    after = live_queue.enqueue("allocate", {"mb": 1}).id
    worker = process_worker(
        live_queue, registry, concurrency=1, prefetch=0, max_memory_per_child=100, burst=True
    )
    # A worker already past the limit itself: its children share these pages, and
    # only what a child adds counts (it failed when a big test session forked them).
    ballast = b"w" * (120 << 20)

    stats = worker.run()
    del ballast

    results = [result_of(live_queue, j) for j in (small, big, after)]
    assert stats.succeeded == 3 and results[1]["held"] == 150
    assert results[0]["pid"] == results[1]["pid"] != results[2]["pid"]
    assert worker.pool_info["recycles"] == 1


async def async_pid(ctx: JobContext) -> JobResult:
    await asyncio.sleep(0)
    return JobResult({"pid": os.getpid(), "loop": id(asyncio.get_running_loop())})


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_async_handlers_run_on_each_childs_own_loop(live_queue):
    registry = HandlerRegistry({"async_pid": async_pid})
    jobs = [live_queue.enqueue("async_pid").id for _ in range(4)]

    stats = process_worker(live_queue, registry, concurrency=1, burst=True).run()

    results = [result_of(live_queue, j) for j in jobs]
    assert stats.succeeded == 4
    assert {r["pid"] for r in results} != {os.getpid()} and len({r["pid"] for r in results}) == 1
    assert len({r["loop"] for r in results}) == 1  # one loop for the child's life


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sqlq_stats_shows_each_workers_pool_its_children_and_their_jobs(live_queue):
    from sqlq_orm.ops.render import render_stats_text
    from sqlq_orm.ops.stats import collect_stats

    registry = HandlerRegistry({"echo": pid_of})
    job = live_queue.enqueue("echo").id
    worker = process_worker(live_queue, registry, concurrency=2, heartbeat_interval=0.1)

    def pool_seen():
        (view,) = collect_stats(live_queue).workers
        return view.pool and sum(c["jobs"] for c in view.pool["children"]) == 1 and view

    with running(worker):
        wait_until(status_is(live_queue, job, "SUCCEEDED"), "the job to run")
        view = wait_until(pool_seen, "the worker row to carry its pool")
        text = render_stats_text(collect_stats(live_queue))

    assert view.pool_kind == "process" and len(view.pool["children"]) == 2
    assert result_of(live_queue, job) in {c["pid"] for c in view.pool["children"]}
    assert f"pool of {worker.worker_id}: process: 2 children" in text


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_app_engine_the_parent_used_before_the_fork_is_not_shared_with_a_child(
    db_url, live_queue
):
    app_engine = sqlalchemy.create_engine(db_url)  # the app's own: no sqlq fork guard
    backend_pid = sqlalchemy.text("SELECT pg_backend_pid()")
    with app_engine.connect() as connection:
        parents = connection.execute(backend_pid).scalar()

    def backend(ctx: JobContext) -> JobResult:
        with app_engine.connect() as connection:
            return JobResult(connection.execute(backend_pid).scalar())

    job = live_queue.enqueue("backend").id
    stats = process_worker(live_queue, HandlerRegistry({"backend": backend}), burst=True).run()

    assert stats.succeeded == 1 and result_of(live_queue, job) != parents
    with app_engine.connect() as connection:  # and the parent's connection still works
        assert connection.execute(backend_pid).scalar() == parents
    app_engine.dispose()
