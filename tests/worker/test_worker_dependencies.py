"""Dependencies run by a real :class:`~sqlq_orm.Worker`: a chain runs in order, a
fan-in runs last, and a failing parent cancels what waits for it."""

from __future__ import annotations

import threading

import sqlq_orm
from sqlq_orm import HandlerRegistry, JobError, JobSpec, Worker
from sqlq_orm.ops.invariants import check
from tests.support.worker_helpers import job_row

FAST = {"poll_interval": 0.05, "sweep_interval": None, "install_signal_handlers": False}


def burst(queue: sqlq_orm.Queue, registry: HandlerRegistry, **options) -> sqlq_orm.WorkerStats:
    return Worker(queue, registry, burst=True, **{**FAST, **options}).run()


def recording_registry(*types: str) -> tuple[HandlerRegistry, list[str]]:
    ran: list[str] = []
    lock = threading.Lock()

    def handler(ctx):
        with lock:
            ran.append(ctx.payload["step"])

    return HandlerRegistry({name: handler for name in types}), ran


def test_a_chain_run_by_a_worker_completes_in_order(queue):
    registry, ran = recording_registry("step")
    ids = queue.enqueue_chain([JobSpec("step", {"step": n}) for n in range(5)])

    stats = burst(queue, registry, concurrency=4)

    assert ran == [0, 1, 2, 3, 4]
    assert stats.succeeded == 5
    assert {job_row(queue, job_id).status for job_id in ids} == {"SUCCEEDED"}
    assert check(queue) == []


def test_a_fan_in_runs_after_every_parent(queue):
    registry, ran = recording_registry("part", "merge")
    *parents, merge = queue.enqueue_fan_in(
        [JobSpec("part", {"step": f"part-{n}"}) for n in range(6)],
        JobSpec("merge", {"step": "merge"}),
    )

    burst(queue, registry, concurrency=3)

    assert sorted(ran[:-1]) == [f"part-{n}" for n in range(6)] and ran[-1] == "merge"
    assert job_row(queue, merge).status == "SUCCEEDED"
    assert check(queue) == []


def test_a_parent_failing_in_a_worker_cancels_the_rest_of_its_chain(queue):
    registry, ran = recording_registry("step")

    def broken(ctx):
        raise JobError("UPSTREAM:DOWN", "no luck", retryable=False)

    registry.register("broken", broken)
    first, second, third = queue.enqueue_chain(
        [JobSpec("step", {"step": 0}), JobSpec("broken"), JobSpec("step", {"step": 2})]
    )

    burst(queue, registry)

    assert ran == [0]
    assert [job_row(queue, i).status for i in (first, second, third)] == [
        "SUCCEEDED", "FAILED", "CANCELLED",
    ]  # fmt: skip
    assert job_row(queue, third).error_code == "DEPENDENCY:FAILED"
    assert check(queue) == []
