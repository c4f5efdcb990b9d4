"""The sweeper: expired leases and runs past their max runtime, in batches, and its
races with finishing workers and with other sweepers.

Races are forced in a chosen order: one side is held inside its open transaction
(``pause_after``) while the other runs, so the outcome never depends on timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from sqlq_orm import LeaseLost, Queue, RetryPolicy
from tests.support.faultkit import lock_waiters
from tests.support.queue_helpers import (
    assert_histories_are_legal,
    attempt_rows,
    count_events,
    event_names,
    is_sqlite,
    job_row,
    pause_after,
    row_counts,
    second_engine,
    statements_seen,
    wait_for,
)

LEASE = 30
NO_JITTER = RetryPolicy(base_seconds=10, jitter=0)


class Outcome:
    """Runs a call in a thread and keeps what it returned or raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test to assert on
            self.error = exc

    def join(self) -> Outcome:
        self.thread.join(60)
        assert not self.thread.is_alive(), "thread did not finish"
        return self


def _is_expired_lease_read(sql: str) -> bool:
    return sql.lstrip().startswith("SELECT") and "lease_expires_at <=" in sql


def _is_succeed_update(sql: str) -> bool:
    return sql.lstrip().startswith("UPDATE") and "result_ref" in sql


def _wait_until_blocked(engine, seen: list[str], what: str) -> None:
    """Wait until a call on another engine is waiting for the lock we hold."""
    if is_sqlite(engine):
        # Its BEGIN IMMEDIATE waits for the write lock held by the paused call.
        wait_for(lambda: any(s.startswith("BEGIN") for s in seen), what)
    else:
        with engine.connect() as connection:
            wait_for(lambda: lock_waiters(connection) >= 1, what)


@pytest.fixture
def steady_queue(engine, clock) -> Queue:
    return Queue(engine, clock=clock, retry_policy=NO_JITTER)


def test_expired_unstarted_claim_is_recovered_and_released_with_no_retry_spent(
    steady_queue, engine, clock
):
    job = steady_queue.enqueue("render", max_retries=0)
    steady_queue.claim("worker-a", lease_seconds=LEASE)
    clock.advance(LEASE)  # a truncated "now": the lease may have 0.9 s left
    assert steady_queue.sweep().total == 0
    clock.advance(1)  # expiry is inclusive: lease_expires_at <= now
    result = steady_queue.sweep()

    # Claimed, never started (a dead worker's prefetch): it costs nothing, not even
    # with no retry left; it is ready again at once.
    assert (result.expired, result.timed_out, result.requeued, result.failed) == (1, 0, 1, 0)
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.error_code, row.lease_token) == (
        "QUEUED", 0, None, None,
    )  # fmt: skip
    assert row.run_at == clock.now()
    assert attempt_rows(engine, job.id) == []
    assert event_names(engine, job.id) == ["ENQUEUED", "CLAIMED", "RECOVERED", "RELEASED"]
    assert assert_histories_are_legal(engine) == 1


def test_a_sweep_charges_the_started_run_and_releases_the_unstarted_claims_free(
    steady_queue, engine, clock
):
    started, prefetched = (steady_queue.enqueue("render").id for _ in range(2))
    leases = steady_queue.claim(
        "worker-a", limit=2, lease_seconds=LEASE, start=True, start_at_most=1
    )
    clock.advance(LEASE + 1)
    result = steady_queue.sweep()

    assert [(lease.job_id, lease.started) for lease in leases] == [
        (started, True), (prefetched, False),
    ]  # fmt: skip
    assert (result.expired, result.requeued) == (2, 2)
    assert [job_row(engine, i).retry_count for i in (started, prefetched)] == [1, 0]
    assert [status for _, status, _ in attempt_rows(engine, started)] == ["FAILED"]
    assert attempt_rows(engine, prefetched) == []
    assert event_names(engine, prefetched) == ["ENQUEUED", "CLAIMED", "RECOVERED", "RELEASED"]
    assert assert_histories_are_legal(engine) == 2


def test_expired_running_job_with_no_retries_left_ends_failed(queue, engine, clock):
    job = queue.enqueue("render", max_retries=0)
    queue.claim("worker-a", lease_seconds=LEASE, start=True)
    clock.advance(LEASE + 1)
    result = queue.sweep()

    assert (result.expired, result.failed) == (1, 1)
    row = job_row(engine, job.id)
    assert (row.status, row.error_code, row.finished_at) == (
        "FAILED", "LEASE:EXPIRED", clock.now(),
    )  # fmt: skip
    assert attempt_rows(engine, job.id) == [(1, "FAILED", "LEASE:EXPIRED")]
    assert event_names(engine, job.id)[-2:] == ["RECOVERED", "FAILED"]


def test_a_job_that_heartbeats_is_never_reclaimed(queue, engine, clock):
    job = queue.enqueue("long_report")
    (lease,) = queue.claim("worker-a", lease_seconds=LEASE, start=True)
    for _ in range(10):  # 10 x 20 s: far past the first lease, renewed each time
        clock.advance(20)
        queue.heartbeat(lease, lease_seconds=LEASE)
        assert queue.sweep().total == 0

    assert job_row(engine, job.id).status == "RUNNING"
    assert "RECOVERED" not in event_names(engine, job.id)


def test_sweep_works_in_batches_and_returns_counts(queue, engine, clock):
    queue.enqueue_many([{"type": "render"} for _ in range(25)])
    queue.claim("worker-a", limit=25, lease_seconds=LEASE)
    clock.advance(LEASE + 1)  # one second more than the lease: never expired early

    first = queue.sweep(batch_size=10, max_batches=1)
    rest = queue.sweep(batch_size=10)
    assert (first.expired, rest.expired, rest.requeued) == (10, 15, 15)
    assert queue.counts_by_status()["QUEUED"] == 25
    assert queue.sweep().total == 0


def test_sweep_that_reads_first_wins_and_the_late_finish_is_rejected(db_url, engine, clock):
    worker_engine, sweeper_engine = second_engine(db_url), second_engine(db_url)
    worker, sweeper = Queue(worker_engine, clock=clock), Queue(sweeper_engine, clock=clock)
    job = worker.enqueue("render")
    (lease,) = worker.claim("worker-a", lease_seconds=LEASE, start=True)
    clock.advance(LEASE + 1)

    with (
        pause_after(sweeper_engine, _is_expired_lease_read) as sweeper_paused,
        statements_seen(worker_engine) as worker_statements,
    ):
        sweep = Outcome(sweeper.sweep)
        sweeper_paused.wait_reached("the sweeper's read of expired leases")
        finish = Outcome(lambda: worker.succeed(lease))
        _wait_until_blocked(engine, worker_statements, "the worker to wait for the sweeper")
        sweeper_paused.resume()
        sweep.join()
        finish.join()

    assert sweep.error is None and sweep.value.expired == 1
    assert isinstance(finish.error, LeaseLost)
    assert job_row(engine, job.id).status == "QUEUED"
    assert attempt_rows(engine, job.id) == [(1, "FAILED", "LEASE:EXPIRED")]
    assert event_names(engine, job.id).count("SUCCEEDED") == 0
    assert event_names(engine, job.id).count("RECOVERED") == 1
    assert assert_histories_are_legal(engine) == 1
    worker_engine.dispose()
    sweeper_engine.dispose()


def test_finish_that_writes_first_wins_and_the_sweeper_leaves_the_job_alone(db_url, engine, clock):
    worker_engine, sweeper_engine = second_engine(db_url), second_engine(db_url)
    worker, sweeper = Queue(worker_engine, clock=clock), Queue(sweeper_engine, clock=clock)
    job = worker.enqueue("render")
    (lease,) = worker.claim("worker-a", lease_seconds=LEASE, start=True)
    clock.advance(LEASE + 1)  # expired, but not yet swept: the worker may still finish

    with (
        pause_after(worker_engine, _is_succeed_update) as worker_paused,
        statements_seen(sweeper_engine) as sweeper_statements,
    ):
        finish = Outcome(lambda: worker.succeed(lease))
        worker_paused.wait_reached("the worker's succeed update")
        sweep = Outcome(sweeper.sweep)
        # PostgreSQL: SKIP LOCKED passes over the row and the sweep ends at once.
        # SQLite: the sweep waits for the write lock the worker holds.
        wait_for(
            lambda: (
                not sweep.thread.is_alive()
                or any(s.startswith("BEGIN") for s in sweeper_statements)
            ),
            "the sweeper to run while the worker holds the job",
        )
        worker_paused.resume()
        finish.join()
        sweep.join()

    assert finish.error is None and sweep.error is None
    assert sweep.value.total == 0
    assert job_row(engine, job.id).status == "SUCCEEDED"
    assert attempt_rows(engine, job.id) == [(1, "SUCCEEDED", None)]
    assert "RECOVERED" not in event_names(engine, job.id)
    assert assert_histories_are_legal(engine) == 1
    worker_engine.dispose()
    sweeper_engine.dispose()


def test_two_sweepers_at_once_recover_each_job_once(db_url, engine, clock):
    first_engine, other_engine = second_engine(db_url), second_engine(db_url)
    first, other = Queue(first_engine, clock=clock), Queue(other_engine, clock=clock)
    first.enqueue_many([{"type": "render"} for _ in range(20)])
    first.claim("worker-a", limit=20, lease_seconds=LEASE, start=True)
    clock.advance(LEASE + 1)

    with (
        pause_after(first_engine, _is_expired_lease_read) as first_paused,
        statements_seen(other_engine) as other_statements,
    ):
        sweep_a = Outcome(first.sweep)
        first_paused.wait_reached("the first sweeper's read")
        sweep_b = Outcome(other.sweep)
        wait_for(
            lambda: (
                not sweep_b.thread.is_alive()
                or any(s.startswith("BEGIN") for s in other_statements)
            ),
            "the second sweeper to run while the first holds the batch",
        )
        first_paused.resume()
        sweep_a.join()
        sweep_b.join()

    assert sweep_a.error is None and sweep_b.error is None
    assert (sweep_a.value.expired, sweep_b.value.expired) == (20, 0)
    assert row_counts(engine)["sqlq_job_attempts"] == 20
    assert count_events(engine, "RECOVERED") == 20
    assert assert_histories_are_legal(engine) == 20
    first_engine.dispose()
    other_engine.dispose()


def test_two_sweepers_started_together_split_the_work_without_overlap(db_url, engine, clock):
    engines = [second_engine(db_url) for _ in range(2)]
    sweepers = [Queue(e, clock=clock) for e in engines]
    sweepers[0].enqueue_many([{"type": "render"} for _ in range(60)])
    sweepers[0].claim("worker-a", limit=60, lease_seconds=LEASE)
    clock.advance(LEASE + 1)
    barrier = threading.Barrier(2)

    def sweep_after_barrier(sweeper: Queue):
        barrier.wait()
        return sweeper.sweep(batch_size=7)

    runs = [Outcome(lambda s=s: sweep_after_barrier(s)) for s in sweepers]
    results = [run.join() for run in runs]

    assert [r.error for r in results] == [None, None]
    assert sum(r.value.expired for r in results) == 60
    assert count_events(engine, "RECOVERED") == 60
    assert assert_histories_are_legal(engine) == 60
    for e in engines:
        e.dispose()
