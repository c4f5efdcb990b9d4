"""Bench: how soon ``Queue.wait`` returns once the job it waits for has finished.

An idle ``Worker`` (concurrency 1, sweeper off) runs a task that records
``time.time()`` as its last act; this process enqueues one job at a time, calls
``task.wait(job.id)`` at once, and records the moment ``wait`` returns. The figure is
return minus the handler's end, so it includes the worker's commit of the success:
what a caller waiting on a result sees beyond the job's own work. Every job finds the
worker idle (a pause of ``GAP_SECONDS`` between jobs).

Two settings, on SQLite and (with ``--pg`` / ``--mariadb``) the servers:

- **worker in this process** (a thread): the run's end wakes the wait at once
  (:mod:`sqlq_orm.db.wakeups`);
- **worker in another process**: the finish reaches this process through the
  database (PostgreSQL: the finishing transaction's ``NOTIFY``, heard by the wait's
  listener thread; SQLite: ``PRAGMA data_version``, read every 1 ms). MariaDB has
  neither: there the wait reads its job every 5 ms growing to every 20 ms.

Absolute figures (p50, p95), no baseline beside them.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlq_orm
from bench.core import Config, Result, on_every_database, percentile

NAME = "wait"
GAP_SECONDS = 0.02
TARGET_P50_MS = 20.0

_ends: Any = None
"""Where the task reports (seq, time it ended): a list here, a queue in a child."""


def _registry(queue: sqlq_orm.Queue) -> tuple[sqlq_orm.TaskRegistry, Any]:
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(name="bench.wait.stamp")
    def stamp(seq: int) -> int:
        _ends.put((seq, time.time()))
        return seq

    return registry, stamp


def _worker(queue: sqlq_orm.Queue, registry: sqlq_orm.TaskRegistry) -> sqlq_orm.Worker:
    return sqlq_orm.Worker(
        queue, registry, install_signal_handlers=False, sweep_interval=None,
        poll_interval=1.0, worker_id="bench-wait",
    )  # fmt: skip


def _worker_process(url: str, stop: Any, ends: Any) -> None:
    global _ends
    _ends = ends
    engine = sqlq_orm.create_engine(url)
    queue = sqlq_orm.Queue(engine)
    registry, _ = _registry(queue)
    worker = _worker(queue, registry)
    threading.Thread(target=lambda: (stop.wait(), worker.request_stop()), daemon=True).start()
    worker.run()
    engine.dispose()


class _Ends:
    """A thread-safe (seq, time) channel with the ``put``/``get`` of a process queue."""

    def __init__(self) -> None:
        self._items: list[tuple[int, float]] = []
        self._ready = threading.Condition()

    def put(self, item: tuple[int, float]) -> None:
        with self._ready:
            self._items.append(item)
            self._ready.notify_all()

    def get(self, timeout: float) -> tuple[int, float]:
        with self._ready:
            self._ready.wait_for(lambda: bool(self._items), timeout)
            return self._items.pop(0)


def measure(url: str, jobs: int, in_process: bool) -> list[float]:
    """Wait-return minus handler-end, in milliseconds, for ``jobs`` jobs one at a time."""
    global _ends
    engine = sqlq_orm.create_engine(url)
    queue = sqlq_orm.Queue(engine)
    registry, stamp = _registry(queue)
    stop: Any
    if in_process:
        _ends = ends = _Ends()
        worker = _worker(queue, registry)
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()
        stop = worker
    else:
        context = multiprocessing.get_context("spawn")
        stop, ends = context.Event(), context.Queue()
        child = context.Process(target=_worker_process, args=(url, stop, ends))
        child.start()
    try:
        stamp.wait(stamp.enqueue(-1).id, timeout=60)  # the worker is up
        ends.get(timeout=5)
        found: list[float] = []
        for seq in range(jobs):
            time.sleep(GAP_SECONDS)
            job = stamp.enqueue(seq)
            assert stamp.wait(job.id, timeout=30) == seq
            returned = time.time()
            got, ended = ends.get(timeout=5)
            assert got == seq, (got, seq)
            found.append((returned - ended) * 1000)
    finally:
        if in_process:
            worker.request_stop()
            runner.join(timeout=30)
        else:
            stop.set()
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
        engine.dispose()
    return found


def _cases(config: Config, label: str, fresh: Callable[[], str]) -> list[Result]:
    jobs = config.size(full=200, quick=60, smoke=5)
    results = []
    for in_process, where in (
        (True, "worker in this process"),
        (False, "worker in another process"),
    ):
        samples: list[float] = []
        for _ in range(config.repeats or 1):
            samples += measure(fresh(), jobs, in_process)
        p50 = percentile(samples, 0.5)
        results.append(
            Result(
                NAME,
                f"job finished -> wait returns, idle Worker, {where} ({label})",
                p50,
                "ms",
                target=f"p50 <= {TARGET_P50_MS:g} ms",
                met=p50 <= TARGET_P50_MS,
                note=f"p50; p95 {percentile(samples, 0.95):.1f} ms, max {max(samples):.1f} ms"
                f" over {len(samples)} jobs",
                samples=samples,
            )
        )
    return results


def run(config: Config) -> list[Result]:
    return on_every_database(config, NAME, _cases)
