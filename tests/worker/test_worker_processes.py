"""Real worker processes (``python -m sqlq_orm worker``) meeting the real world.

SIGKILL in the middle of a job, SIGSTOP past the lease, SIGTERM with jobs in flight,
and a poison job that kills every worker that touches it. Leases are short (2 s) and
the sweeper runs inside the surviving workers, so recovery needs nobody. Every wait is
a bounded poll of the database or of a worker's log; every process is killed at
teardown.
"""

from __future__ import annotations

import signal
from contextlib import suppress
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import func, select

import sqlq_orm
from sqlq_orm.cli.demo import WorkerPool
from sqlq_orm.schema.models import Job, WorkerRecord
from tests.support.worker_helpers import TEST_HANDLERS, job_row, status_is, wait_until

pytestmark = pytest.mark.slow

SHORT_LEASE = ("--lease", "2")
RECOVERING = ("--lease", "2", "--sweep-interval", "0.5", "--retry-base", "1")
"""A worker whose own sweeper takes back expired leases within half a second."""


def running_first_attempt(queue: sqlq_orm.Queue, job_id: int):
    def check() -> bool:
        job = job_row(queue, job_id)
        return job.status == "RUNNING" and [a.status for a in job.attempts] == ["RUNNING"]

    return check


def test_job_of_a_sigkilled_worker_is_recovered_and_succeeds_on_another(
    live_queue, processes, tmp_path
):
    job = live_queue.enqueue("hold", {"until_file": str(tmp_path / "never"), "on_attempts": [1]})
    doomed = processes.worker("worker-a", *SHORT_LEASE, "--no-sweep")
    wait_until(running_first_attempt(live_queue, job.id), "worker-a to start the job")

    doomed.kill()
    doomed.wait(timeout=10)
    processes.worker("worker-b", *RECOVERING)
    wait_until(status_is(live_queue, job.id, "SUCCEEDED", "FAILED"), "the job to end")

    row = job_row(live_queue, job.id)
    assert row.status == "SUCCEEDED"
    assert [(a.attempt, a.worker_id, a.status, a.error_code) for a in row.attempts] == [
        (1, "worker-a", "FAILED", "LEASE:EXPIRED"),
        (2, "worker-b", "SUCCEEDED", None),
    ]
    assert [(e.event, e.actor) for e in sqlq_orm.job_timeline(live_queue, job.id).events] == [
        ("ENQUEUED", "system"),
        ("CLAIMED", "worker-a"),
        ("STARTED", "worker-a"),
        ("RECOVERED", "sweeper@worker-b"),
        ("RETRY_SCHEDULED", "sweeper@worker-b"),
        ("CLAIMED", "worker-b"),
        ("STARTED", "worker-b"),
        ("SUCCEEDED", "worker-b"),
    ]


def test_worker_stopped_past_its_lease_cannot_report_after_another_finished_the_job(
    live_queue, processes, tmp_path
):
    release = tmp_path / "release"
    job = live_queue.enqueue("hold", {"until_file": str(release), "on_attempts": [1]})
    frozen = processes.worker("worker-a", *SHORT_LEASE, "--no-sweep")
    wait_until(running_first_attempt(live_queue, job.id), "worker-a to start the job")

    frozen.send_signal(signal.SIGSTOP)
    processes.worker("worker-b", *RECOVERING)
    wait_until(status_is(live_queue, job.id, "SUCCEEDED"), "worker-b to finish the job")
    release.touch()  # worker-a's handler now returns, believing it succeeded
    frozen.send_signal(signal.SIGCONT)
    wait_until(
        lambda: f"job {job.id} attempt 1 (hold): outcome discarded" in processes.log(frozen),
        "worker-a to discard its late outcome",
    )

    row = job_row(live_queue, job.id)
    assert [(a.worker_id, a.status) for a in row.attempts] == [
        ("worker-a", "FAILED"),
        ("worker-b", "SUCCEEDED"),
    ]
    events = sqlq_orm.job_timeline(live_queue, job.id).events
    assert [e.actor for e in events if e.event == "SUCCEEDED"] == ["worker-b"]


def test_sigterm_lets_quick_jobs_finish_releases_slow_ones_and_deregisters(
    live_queue, processes, engine
):
    quick = [live_queue.enqueue("finish_on_shutdown").id for _ in range(2)]
    slow = [live_queue.enqueue("ignore_shutdown").id for _ in range(2)]
    worker = processes.worker("worker-a", "--concurrency", "4", "--grace", "1", "--no-sweep")
    wait_until(
        lambda: all(job_row(live_queue, i).status == "RUNNING" for i in quick + slow),
        "all four jobs to run",
    )

    worker.send_signal(signal.SIGTERM)
    exit_code = worker.wait(timeout=30)

    assert exit_code == 0
    assert [job_row(live_queue, i).status for i in quick] == ["SUCCEEDED", "SUCCEEDED"]
    for job_id in slow:
        row = job_row(live_queue, job_id)
        assert (row.status, row.retry_count, row.events[-1].event) == ("QUEUED", 0, "RELEASED")
        assert [a.status for a in row.attempts] == ["RELEASED"]
    with sqlalchemy.orm.Session(engine) as session:
        assert session.scalar(select(func.count()).where(Job.status == "RUNNING")) == 0
        assert session.scalar(select(func.count()).select_from(WorkerRecord)) == 0


def test_poison_job_that_kills_every_worker_ends_failed_while_other_jobs_flow(
    live_queue, db_url, tmp_path
):
    poison = live_queue.enqueue("poison", max_retries=1, priority=10)
    others = [live_queue.enqueue("echo").id for _ in range(12)]
    pool = WorkerPool(
        db_url,
        TEST_HANDLERS,
        {f"w{n}": [*RECOVERING, "--concurrency", "2"] for n in (1, 2)},
        log_dir=tmp_path,
    )

    def poison_failed_and_others_succeeded() -> bool:
        pool.restart_dead()
        return job_row(live_queue, poison.id).status == "FAILED" and all(
            job_row(live_queue, i).status == "SUCCEEDED" for i in others
        )

    try:
        pool.start()
        wait_until(
            poison_failed_and_others_succeeded, "the poison job to fail, the rest to succeed"
        )
    finally:
        pool.stop(grace=0)

    row = job_row(live_queue, poison.id)
    assert (row.error_code, row.attempt_count) == ("LEASE:EXPIRED", 2)
    assert [a.status for a in row.attempts] == ["FAILED", "FAILED"]
    assert len(pool.deaths) >= 2


def test_second_sigterm_skips_the_grace_period_and_still_releases(live_queue, processes):
    job = live_queue.enqueue("ignore_shutdown")
    worker = processes.worker("worker-a", "--grace", "600", "--no-sweep")
    wait_until(status_is(live_queue, job.id, "RUNNING"), "the job to run")
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: "signal received" in processes.log(worker), "the first signal to land")

    worker.send_signal(signal.SIGTERM)
    exit_code = worker.wait(timeout=30)  # far inside the 600 s grace period

    assert exit_code == 0
    row = job_row(live_queue, job.id)
    assert (row.status, row.events[-1].event) == ("QUEUED", "RELEASED")


def test_tasks_that_swallow_cancellation_stop_the_worker_with_status_3_and_a_clean_log(
    live_queue, processes
):
    """Issue 23, item 12: the exit-3 path with ``async def`` handlers names tasks (not
    threads), and leaves no "Task was destroyed" or GeneratorExit noise behind."""
    first, second = (live_queue.enqueue("stubborn_task", max_retries=0).id for _ in range(2))
    # Heartbeats every 0.2 s: a cancel is noticed at the next one (default: lease / 3).
    worker = processes.worker("worker-a", "--concurrency", "1", "--no-sweep", "--heartbeat", "0.2")
    wait_until(status_is(live_queue, first, "RUNNING"), "the first task to run")

    live_queue.cancel(first)  # swallowed: abandoned within the budget (max_abandoned=1)
    wait_until(status_is(live_queue, second, "RUNNING"), "the second task to run")
    live_queue.cancel(second)  # a second stuck task spends the budget
    exit_code = worker.wait(timeout=60)

    log = processes.log(worker)
    assert exit_code == 3, log
    assert "2 async tasks it gave up on are still running" in log
    assert f"job {first} attempt 1 (stubborn_task): an async task that ignored its" in log
    for noise in ("Task was destroyed", "GeneratorExit", "Traceback", "handler thread"):
        assert noise not in log, log


# ------------------------------------------------------------- the process pool


def children_of(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux: /proc/PID/task/*/children)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with suppress(OSError):
            found.update(int(p) for p in (task / "children").read_text().split())
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_poison_job_in_a_process_pool_costs_no_worker_and_no_other_job(live_queue, processes):
    poison = live_queue.enqueue("poison", max_retries=0, priority=10)
    others = [live_queue.enqueue("echo").id for _ in range(12)]

    worker = processes.worker("pool", "--pool", "process", "--concurrency", "2", "--burst")

    assert worker.wait(timeout=60) == 0, processes.log(worker)
    row = job_row(live_queue, poison.id)
    assert (row.status, row.error_code) == ("FAILED", "WORKER:CRASHED")
    assert "SIGKILL (possibly the OOM killer)" in row.error_detail
    assert all([a.status for a in job_row(live_queue, i).attempts] == ["SUCCEEDED"] for i in others)


def test_the_children_of_a_sigkilled_process_pool_worker_die_with_it(
    live_queue, processes, tmp_path
):
    job = live_queue.enqueue("hold", {"until_file": str(tmp_path / "never"), "on_attempts": [1]})
    worker = processes.worker("pool", *SHORT_LEASE, "--pool", "process", "--concurrency", "2")
    wait_until(running_first_attempt(live_queue, job.id), "a child to start the job")
    children = wait_until(
        lambda: len(children_of(worker.pid)) == 2 and children_of(worker.pid), "2 children"
    )

    worker.kill()
    worker.wait(timeout=10)

    wait_until(lambda: not any(alive(pid) for pid in children), "the children to die too")


def test_a_sigkilled_worker_is_charged_for_the_job_it_started_not_for_its_prefetch(
    live_queue, processes, tmp_path
):
    # Handlers of ~60 ms (slow enough that the worker starts its prefetch apart, see
    # sqlq_orm.worker.starting): two warm it up, then one holds its only thread
    # while the worker prefetches the next ones behind it.
    def span(priority: int) -> int:
        payload = {"seconds": 0.06, "key": "span", "log_file": str(tmp_path / "spans")}
        return live_queue.enqueue("span", payload, priority=priority).id

    for _ in range(2):
        span(20)
    held = live_queue.enqueue("hold", {"until_file": str(tmp_path / "never")}, priority=10).id
    behind = [span(0) for _ in range(6)]
    doomed = processes.worker("worker-a", "--concurrency", "1", *SHORT_LEASE, "--no-sweep")

    def prefetched() -> list[int]:
        return [
            job_id
            for job_id in behind
            if (row := job_row(live_queue, job_id)).status == "CLAIMED"
            and row.claimed_by == "worker-a"
        ]

    wait_until(running_first_attempt(live_queue, held), "worker-a to start the held job")
    wait_until(prefetched, "worker-a to prefetch the jobs behind it")
    never_started = prefetched()
    doomed.kill()
    doomed.wait(timeout=10)

    def nothing_held() -> bool:
        live_queue.sweep()
        return all(job_row(live_queue, i).status == "QUEUED" for i in [held, *never_started])

    wait_until(nothing_held, "the dead worker's leases to expire and be swept")

    row = job_row(live_queue, held)
    assert row.retry_count == 1  # its handler ran: charged (a poison job must pay)
    assert [(a.status, a.error_code) for a in row.attempts] == [("FAILED", "LEASE:EXPIRED")]
    for job_id in never_started:
        row = job_row(live_queue, job_id)
        assert (row.retry_count, row.error_code, row.attempts) == (0, None, [])
        assert [e.event for e in sqlq_orm.job_timeline(live_queue, job_id).events] == [
            "ENQUEUED", "CLAIMED", "RECOVERED", "RELEASED",
        ]  # fmt: skip
