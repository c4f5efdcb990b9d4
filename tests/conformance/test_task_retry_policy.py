"""When a failed run comes back (issue 24, items 3 and 5), on every backend with a
pinned clock: a task's own ``backoff=`` wins over the queue's retry policy, a
``JobError(retry_in=N)`` wins over both and spends a retry, ``retryable=False`` fails
at once, and ``Queue.fail(retry_in=...)`` is fenced by the lease like every write."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import sqlq_orm
from sqlq_orm import FixedBackoff, InvalidInput, JobError, LinearBackoff, Queue, RetryPolicy
from sqlq_orm.core.timing import ROUNDING_SECONDS
from sqlq_orm.testing import drain  # every job due at the pinned now, run in this thread
from tests.support.queue_helpers import assert_histories_are_legal, event_names, job_row

QUEUE_POLICY = RetryPolicy(base_seconds=10, max_seconds=3600, jitter=0)
"""The queue's own policy: 10 s, 20 s, ... — what a task's backoff must override."""


@pytest.fixture
def steady_queue(engine: Any, clock: sqlq_orm.PinnedClock) -> Queue:
    return Queue(engine, clock=clock, retry_policy=QUEUE_POLICY)


def retry_delays(engine: Any, job_id: int) -> list[int]:
    """The ``delay`` of each RETRY_SCHEDULED event of the job, oldest first."""
    queue = Queue(engine)
    events = sorted(queue.get_job(job_id).events, key=lambda e: e.id)
    return [json.loads(e.detail)["delay"] for e in events if e.event == "RETRY_SCHEDULED"]


# Whole seconds added to the (truncated) database now: ceil(N) + 1, never early.
@pytest.mark.parametrize(
    ("backoff", "first", "second", "kind"),
    [
        (FixedBackoff(30), 31, 31, "def"),
        (30, 31, 31, "async def"),
        (LinearBackoff(5, step_seconds=10), 6, 16, "def"),
        (RetryPolicy(base_seconds=7, jitter=0), 8, 15, "def"),
        (lambda retry: 100 * retry, 101, 201, "async def"),
    ],
    ids=["fixed", "number-async", "linear", "exponential", "function-async"],
)
def test_a_tasks_backoff_wins_over_the_queues_retry_policy(
    steady_queue, engine, clock, backoff, first, second, kind
):
    registry = sqlq_orm.TaskRegistry(steady_queue)
    if kind == "def":

        @registry.task(name="flaky", max_retries=5, backoff=backoff)
        def flaky() -> None:
            raise ConnectionError("upstream down")

    else:

        @registry.task(name="flaky", max_retries=5, backoff=backoff)
        async def flaky() -> None:
            raise ConnectionError("upstream down")

    job = flaky.enqueue()
    drain(steady_queue, registry)
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.error_code) == ("QUEUED", 1, "NETWORK:UNHANDLED")
    assert row.run_at == clock.now() + first

    clock.set(row.run_at)
    drain(steady_queue, registry)
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count) == ("QUEUED", 2)
    assert row.run_at == clock.now() + second
    assert retry_delays(engine, job.id) == [first, second]
    assert assert_histories_are_legal(engine) == 1


def test_a_task_without_backoff_keeps_the_queues_retry_policy(steady_queue, engine, clock):
    registry = sqlq_orm.TaskRegistry(steady_queue)

    @registry.task(name="flaky", max_retries=5)
    def flaky() -> None:
        raise KeyError("missing")

    job = flaky.enqueue()
    drain(steady_queue, registry)

    assert job_row(engine, job.id).run_at == clock.now() + 10


def test_a_run_the_sweeper_takes_back_retries_after_the_tasks_backoff(steady_queue, engine, clock):
    registry = sqlq_orm.TaskRegistry(steady_queue)

    @registry.task(name="export", max_retries=5, backoff=FixedBackoff(300))
    def export() -> None: ...

    @registry.task(name="plain", max_retries=5)
    def plain() -> None: ...

    jobs = [export.enqueue(), plain.enqueue()]
    steady_queue.claim("gone-worker", limit=2, lease_seconds=30, start=True)  # then it died
    clock.advance(31 + ROUNDING_SECONDS)
    worker = sqlq_orm.Worker(
        steady_queue, registry, burst=True, install_signal_handlers=False,
        sweep_interval=3600, poll_interval=0.05,
    )  # fmt: skip
    worker.run()  # nothing due to run; sweeps on its way out

    rows = [job_row(engine, job.id) for job in jobs]
    assert [(row.status, row.error_code) for row in rows] == [("QUEUED", "LEASE:EXPIRED")] * 2
    # The task's 300 s (whole seconds, never early), and the queue's 10 s for the other.
    assert [row.run_at - clock.now() for row in rows] == [301, 10]
    assert assert_histories_are_legal(engine) == 2


def test_sweep_takes_each_job_types_retry_delay_and_the_queues_policy_otherwise(
    steady_queue, engine, clock
):
    jobs = [steady_queue.enqueue(job_type, {}, max_retries=3) for job_type in ("own", "other")]
    steady_queue.claim("gone-worker", limit=2, lease_seconds=30, start=True)
    clock.advance(31 + ROUNDING_SECONDS)
    asked: list[tuple[str, int]] = []

    def delays(job_type: str, retry_number: int) -> float | None:
        asked.append((job_type, retry_number))
        return 120 if job_type == "own" else None

    assert steady_queue.sweep(retry_delays=delays).requeued == 2

    assert sorted(asked) == [("other", 1), ("own", 1)]
    assert [job_row(engine, job.id).run_at - clock.now() for job in jobs] == [121, 10]


def test_retry_in_spends_a_retry_and_wins_over_every_backoff(steady_queue, engine, clock):
    registry = sqlq_orm.TaskRegistry(steady_queue)

    @registry.task(name="export", max_retries=1, backoff=FixedBackoff(600))
    def export() -> None:
        raise JobError("DEPENDENCY:NOT_READY", "export not ready", retry_in=45)

    job = export.enqueue()
    drain(steady_queue, registry)
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.error_code) == ("QUEUED", 1, "DEPENDENCY:NOT_READY")
    assert row.run_at == clock.now() + 46

    clock.set(row.run_at)
    drain(steady_queue, registry)  # no retry left: retry_in does not buy one
    row = job_row(engine, job.id)
    assert (row.status, row.retry_count) == ("FAILED", 1)
    assert event_names(engine, job.id)[-1] == "FAILED"
    assert assert_histories_are_legal(engine) == 1


def test_a_job_error_that_is_not_retryable_fails_at_once(steady_queue, engine):
    registry = sqlq_orm.TaskRegistry(steady_queue)

    @registry.task(name="charge", max_retries=5, backoff=FixedBackoff(5))
    def charge() -> None:
        raise JobError("PAYMENT:DECLINED", "card refused", retryable=False)

    job = charge.enqueue()
    drain(steady_queue, registry)

    row = job_row(engine, job.id)
    assert (row.status, row.retry_count, row.error_code) == ("FAILED", 0, "PAYMENT:DECLINED")


def test_fail_with_retry_in_after_the_lease_was_lost_changes_nothing(steady_queue, engine):
    job = steady_queue.enqueue("t", max_retries=3)
    (lease,) = steady_queue.claim("worker-1", start=True)
    steady_queue.cancel(job.id)

    with pytest.raises(sqlq_orm.LeaseLost):
        steady_queue.fail(lease, "DEPENDENCY:NOT_READY", retry_in=5)

    row = job_row(engine, job.id)
    assert (row.status, row.retry_count) == ("CANCELLED", 0)
    assert "RETRY_SCHEDULED" not in event_names(engine, job.id)


@pytest.mark.parametrize("retry_in", [-1, float("nan"), "5", True], ids=repr)
def test_a_bad_retry_in_is_refused_and_writes_nothing(steady_queue, engine, retry_in):
    job = steady_queue.enqueue("t", max_retries=3)
    (lease,) = steady_queue.claim("worker-1", start=True)

    with pytest.raises(InvalidInput, match="retry_in"):
        steady_queue.fail(lease, "DEPENDENCY:NOT_READY", retry_in=retry_in)

    assert (job_row(engine, job.id).status, job_row(engine, job.id).retry_count) == (
        "RUNNING", 0,
    )  # fmt: skip


# -- per-task lease (item 1: lease=) -------------------------------------------------


def lease_expires_at(engine: Any, job_id: int) -> int | None:
    value = job_row(engine, job_id).lease_expires_at
    return None if value is None else int(value)


@pytest.mark.parametrize("task_lease", [300, 3], ids=["longer", "shorter"])
def test_a_tasks_lease_is_what_its_heartbeats_renew(steady_queue, engine, clock, task_lease):
    registry = sqlq_orm.TaskRegistry(steady_queue)
    seen: dict[str, Any] = {}

    @registry.task(name="long_export", lease=task_lease)
    def long_export(ctx: sqlq_orm.JobContext) -> None:
        seen["lease"] = ctx.lease_seconds
        # Runs until a heartbeat has renewed the lease to the task's length (the
        # claim took the worker's 30 s), or the worker gives up on it.
        wanted = clock.now() + task_lease + ROUNDING_SECONDS  # never short: see timing
        give_up_at = time.monotonic() + 10
        while lease_expires_at(engine, ctx.job_id) != wanted and time.monotonic() < give_up_at:
            ctx.sleep(0.05)
        seen["renewed to"] = lease_expires_at(engine, ctx.job_id) - clock.now()

    worker = sqlq_orm.Worker(
        steady_queue, registry, burst=True, install_signal_handlers=False,
        sweep_interval=None, poll_interval=0.05, lease_seconds=30,
        heartbeat_interval=0.2,
    )  # fmt: skip
    job = long_export.enqueue()
    worker.run()

    assert seen == {"lease": task_lease, "renewed to": task_lease + ROUNDING_SECONDS}
    assert job_row(engine, job.id).status == "SUCCEEDED"


@pytest.mark.parametrize("task_lease", [300, 3], ids=["longer", "shorter"])
def test_a_tasks_lease_holds_from_the_claim_before_any_heartbeat(
    steady_queue, engine, clock, task_lease
):
    registry = sqlq_orm.TaskRegistry(steady_queue)
    seen: dict[str, Any] = {}

    @registry.task(name="long_export", lease=task_lease)
    def long_export(ctx: sqlq_orm.JobContext) -> None:
        seen["held for"] = lease_expires_at(engine, ctx.job_id) - clock.now()

    worker = sqlq_orm.Worker(
        steady_queue, registry, burst=True, install_signal_handlers=False,
        sweep_interval=None, poll_interval=0.05, lease_seconds=30,
        heartbeat_interval=29,  # none during the run (a 3 s lease: the first after 1 s)
    )  # fmt: skip
    long_export.enqueue()
    worker.run()

    assert seen == {"held for": task_lease + ROUNDING_SECONDS}


def test_a_claim_gives_each_job_type_its_own_lease_length(steady_queue, engine, clock):
    long_job = steady_queue.enqueue("long", {})
    plain_job = steady_queue.enqueue("plain", {})

    leases = steady_queue.claim(
        "worker-1", limit=2, lease_seconds=30, start=True, lease_seconds_by_type={"long": 600}
    )

    expiries = {lease.job_id: lease.lease_expires_at for lease in leases}
    assert expiries == {
        long_job.id: clock.now() + 600 + ROUNDING_SECONDS,
        plain_job.id: clock.now() + 30 + ROUNDING_SECONDS,
    }
    assert {job_id: lease_expires_at(engine, job_id) for job_id in expiries} == expiries


def test_a_bad_lease_length_by_type_is_refused_and_nothing_is_claimed(steady_queue, engine):
    job = steady_queue.enqueue("long", {})

    refused = r"lease_seconds_by_type\['long'\]: lease_seconds must be >= 2, got 1"
    with pytest.raises(InvalidInput, match=refused):
        steady_queue.claim("worker-1", lease_seconds_by_type={"long": 1})

    assert job_row(engine, job.id).status == "QUEUED"


def test_the_worker_heartbeats_within_a_third_of_the_shortest_task_lease(steady_queue):
    registry = sqlq_orm.TaskRegistry(steady_queue)

    @registry.task(name="quick", lease=6)
    def quick() -> None: ...

    worker = sqlq_orm.Worker(steady_queue, registry, lease_seconds=30)
    assert worker.heartbeat_interval == 2
    assert (
        sqlq_orm.Worker(steady_queue, sqlq_orm.TaskRegistry(), lease_seconds=30).heartbeat_interval
        == 10
    )


@pytest.mark.parametrize("lease", [1, 2.5, "60"])
def test_a_bad_task_lease_is_refused_when_the_task_is_defined(lease):
    registry = sqlq_orm.TaskRegistry()
    with pytest.raises(InvalidInput, match=r"task 'export': lease="):
        registry.task(name="export", lease=lease)
