"""``async def`` handlers in the worker: tasks on the worker's event loop, beside plain
handlers on its threads, bounded together by ``concurrency``; ``await ctx.sleep``;
cancellation when the worker gives up on a job; a task that ignores it is abandoned
like a stuck thread.

Real threads and a real database; every wait is a bounded poll on a condition.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sqlq_orm import AsyncJobContext, HandlerRegistry, HandlersStuck, JobContext, JobError, Worker
from tests.support.worker_helpers import job_row, running, status_is, wait_until

FAST = {
    "poll_interval": 0.05,
    "sweep_interval": None,
    "install_signal_handlers": False,
    "heartbeat_interval": 0.05,
}


class Gauge:
    """How many handlers run at once (threads and tasks alike), and the most seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def test_async_and_plain_handlers_share_one_registry_and_the_concurrency(queue):
    gauge = Gauge()
    loop_threads: set[str] = set()
    plain_threads: set[str] = set()
    contexts: set[type] = set()

    async def fetch(ctx: AsyncJobContext) -> str:
        gauge.enter()
        loop_threads.add(threading.current_thread().name)
        contexts.add(type(ctx))
        await asyncio.sleep(0.02)  # a task switch: the others run meanwhile
        gauge.leave()
        return f"fetched-{ctx.payload['n']}"

    def crunch(ctx: JobContext) -> None:
        gauge.enter()
        plain_threads.add(threading.current_thread().name)
        time.sleep(0.01)
        gauge.leave()

    registry = HandlerRegistry({"fetch": fetch, "crunch": crunch})
    jobs = [queue.enqueue("fetch", {"n": n}) for n in range(40)]
    jobs += [queue.enqueue("crunch") for _ in range(10)]

    stats = Worker(queue, registry, concurrency=4, burst=True, **FAST).run()

    assert stats.succeeded == 50 and stats.failed == 0
    assert job_row(queue, jobs[3].id).result_ref == "fetched-3"
    assert loop_threads == {"sqlq-handler-loop"}
    assert plain_threads and "sqlq-handler-loop" not in plain_threads
    assert contexts == {AsyncJobContext}
    assert gauge.most == 4  # tasks ran side by side, never more than the concurrency


def test_async_handlers_fail_like_plain_ones(queue):
    async def classified(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0)
        raise JobError("PAYMENT:DECLINED", "card declined", retryable=False)

    async def crashing(ctx: AsyncJobContext) -> None:
        raise KeyError("missing")

    declined = queue.enqueue("classified", max_retries=0)
    crashed = queue.enqueue("crashing", max_retries=0)
    registry = HandlerRegistry({"classified": classified, "crashing": crashing})

    stats = Worker(queue, registry, burst=True, **FAST).run()

    assert stats.failed == 2
    assert (job_row(queue, declined.id).status, job_row(queue, declined.id).error_code) == (
        "FAILED",
        "PAYMENT:DECLINED",
    )
    assert job_row(queue, crashed.id).error_code == "INTERNAL:UNHANDLED_EXCEPTION"


def test_ctx_sleep_wakes_early_when_shutdown_is_requested(queue):
    sleeping = threading.Event()
    woke: list[tuple[bool, bool]] = []

    async def patient(ctx: AsyncJobContext) -> None:
        sleeping.set()
        stop = await ctx.sleep(60)
        woke.append((stop, ctx.shutdown_requested))

    job = queue.enqueue("patient")
    worker = Worker(queue, HandlerRegistry({"patient": patient}), grace_period=30, **FAST)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(sleeping.is_set, "the handler to sleep")

    worker.request_stop()
    thread.join(20)  # well before the 60 s sleep or the 30 s grace would end

    assert not thread.is_alive()
    assert woke == [(False, True)]  # woken by the shutdown, the job still ours
    assert job_row(queue, job.id).status == "SUCCEEDED"


def test_a_task_whose_lease_is_lost_is_cancelled_and_no_other_job_fails(queue):
    waiting = threading.Event()
    cancelled = threading.Event()
    others_done = threading.Event()

    async def long_call(ctx: AsyncJobContext) -> None:
        waiting.set()
        try:
            await asyncio.Event().wait()  # never set: only a cancellation ends it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def quick(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0.01)
        if ctx.payload["n"] == 9:
            others_done.set()

    lost = queue.enqueue("long_call", max_retries=0)
    registry = HandlerRegistry({"long_call": long_call, "quick": quick})
    with running(Worker(queue, registry, concurrency=3, lease_seconds=30, **FAST)) as worker:
        wait_until(waiting.is_set, "the long call to start")
        queue.cancel(lost.id, reason="the user gave up")  # the worker's lease is gone
        others = [queue.enqueue("quick", {"n": n}) for n in range(10)]
        wait_until(cancelled.is_set, "the task to be cancelled")
        wait_until(lambda: worker.stats.succeeded == 10, "the other jobs to succeed")

    assert job_row(queue, lost.id).status == "CANCELLED"
    assert [job_row(queue, job.id).status for job in others] == ["SUCCEEDED"] * 10
    assert (worker.stats.failed, worker.stats.discarded) == (0, 1)


def test_a_task_that_ignores_its_cancellation_is_abandoned_like_a_stuck_thread(queue):
    waiting = threading.Event()
    release = asyncio.Event()
    swallowed: list[int] = []

    async def stubborn(ctx: AsyncJobContext) -> None:
        waiting.set()
        while not release.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                swallowed.append(ctx.job_id)  # and carries on regardless

    async def quick(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0)

    stuck = queue.enqueue("stubborn", max_retries=0)
    registry = HandlerRegistry({"stubborn": stubborn, "quick": quick})
    worker = Worker(queue, registry, concurrency=2, max_abandoned=1, **FAST)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        wait_until(waiting.is_set, "the stubborn call to start")
        queue.cancel(stuck.id)
        wait_until(lambda: swallowed, "the cancellation to be swallowed")
        # Within the budget its slot is freed: both slots run other jobs meanwhile.
        others = [queue.enqueue("quick") for _ in range(6)]
        for job in others:
            wait_until(status_is(queue, job.id, "SUCCEEDED"), "the other jobs to run")
        assert worker.stats.discarded == 0  # still in its handler: nothing discarded yet
        # A second stuck task spends the budget (max_abandoned=1): the worker stops.
        waiting.clear()
        second = queue.enqueue("stubborn", max_retries=0)
        wait_until(waiting.is_set, "the second stubborn call to start")
        queue.cancel(second.id)
        thread.join(30)
    finally:
        worker.request_stop(immediate=True)
        thread.join(30)

    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], HandlersStuck), errors
    assert f"job {stuck.id} " in str(errors[0]) and f"job {second.id} " in str(errors[0])
    assert swallowed[:2] == [stuck.id, second.id]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_stream_of_async_jobs_never_runs_more_than_the_concurrency(queue, concurrency):
    gauge = Gauge()

    async def step(ctx: AsyncJobContext) -> None:
        gauge.enter()
        await asyncio.sleep(0.005)
        gauge.leave()

    queue.enqueue_many([{"type": "step"}] * 60)

    stats = Worker(
        queue, HandlerRegistry({"step": step}), concurrency=concurrency, burst=True, **FAST
    ).run()

    assert stats.succeeded == 60
    assert gauge.most == concurrency


def test_loop_clean_ups_run_on_the_handlers_loop_before_it_stops(queue):
    seen: list[tuple[str, str]] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def fetch(ctx: AsyncJobContext) -> None:
        loops.append(asyncio.get_running_loop())

    registry = HandlerRegistry({"fetch": fetch})

    @registry.on_loop_shutdown
    async def close_pool() -> None:
        running = asyncio.get_running_loop()
        seen.append((threading.current_thread().name, "same loop" if running is loops[0] else "?"))

    queue.enqueue("fetch")
    Worker(queue, registry, burst=True, **FAST).run()

    assert seen == [("sqlq-handler-loop", "same loop")]
    assert not loops[0].is_running()
