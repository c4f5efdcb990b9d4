"""Bench 2: the real :class:`sqlq_orm.Worker` draining pre-enqueued no-op jobs.

N jobs (default 20,000) are enqueued, then drained by 1 and by 2 worker processes
(each a ``Worker(..., burst=True)`` that exits once nothing is left), on a SQLite
file and on PostgreSQL, with full attempt and event history kept. Reported: jobs/s
(N over the wall time from "go" to the last worker's exit) and claim-to-finish
latency p50/p99, measured in-process with ``time.perf_counter()`` (the database's
timestamps have one-second resolution): a thin ``Queue`` subclass notes when
``claim`` hands a lease out and when its ``succeed`` returns.

Baseline, side by side: one process calling the ``Queue`` directly in a loop
(``claim(start=True, limit=concurrency)`` then ``succeed`` per job), no worker
runtime (no threads, heartbeats or registry). A third run shows what grouping buys
with the same guarantees: claims of 100 and ``Queue.succeed_many`` (one transaction
finishing the batch, each job still fenced by its token). Target: >= 5,000 jobs/s
for one worker process on SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    count_events,
    count_rows,
    on_every_database,
    percentile,
    run_children,
    side_by_side,
)

NAME = "workers"
CONCURRENCY = 64
GROUPED_BATCH = 100
TARGET_JOBS_PER_SECOND = 5000.0


def _noop(context: Any) -> None:
    return None


class TimedQueue(sqlq_orm.Queue):
    """A Queue that notes, per job, when a claim returned it and when it was finished."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claimed_at: dict[int, float] = {}
        self.latencies: list[float] = []

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        leases = super().claim(*args, **kwargs)
        now = time.perf_counter()
        for lease in leases:
            self.claimed_at[lease.job_id] = now
        return leases

    def succeed(self, lease: Any, *args: Any, **kwargs: Any) -> None:
        super().succeed(lease, *args, **kwargs)
        self.latencies.append(time.perf_counter() - self.claimed_at.pop(lease.job_id))

    def succeed_many(self, leases: Any, *args: Any, **kwargs: Any) -> Any:
        lost = super().succeed_many(leases, *args, **kwargs)  # type: ignore[misc]
        now = time.perf_counter()
        for lease in leases:
            self.latencies.append(now - self.claimed_at.pop(lease.job_id))
        return lost


def _worker_process(url: str, number: int, go: Any, out: Any) -> None:
    from sqlq_orm.worker.runtime import Worker

    engine = sqlq_orm.create_engine(url)
    queue = TimedQueue(engine)
    worker = Worker(
        queue,
        {"noop": _noop},
        concurrency=CONCURRENCY,
        poll_interval=0.05,
        sweep_interval=None,
        burst=True,
        install_signal_handlers=False,
        worker_id=f"bench-worker-{number}",
    )
    go.wait()
    stats = worker.run()
    engine.dispose()
    out.put((stats.succeeded, queue.latencies))


def run_workers(url: str, processes: int) -> tuple[float, int, list[float]]:
    """Drain the database at ``url`` with ``processes`` workers; (seconds, done, latencies)."""
    # A second for imports and connections before the clock starts.
    elapsed, reports, _ = run_children(_worker_process, [(url, n) for n in range(processes)], 1.0)
    latencies = [value for _, found in reports for value in found]
    return elapsed, sum(done for done, _ in reports), latencies


def _direct(url: str, jobs: int, *, batch: int = CONCURRENCY, grouped: bool = False) -> float:
    """One process calling the Queue in a loop: claim ``batch``, finish each (or all)."""
    engine = sqlq_orm.create_engine(url)
    queue = sqlq_orm.Queue(engine)
    started = time.perf_counter()
    done = 0
    while True:
        leases = queue.claim("bench-direct", limit=batch, start=True)
        if not leases:
            break
        if grouped:
            assert queue.succeed_many(leases) == []  # type: ignore[attr-defined]
        else:
            for lease in leases:
                queue.succeed(lease)
        done += len(leases)
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def _enqueue(url: str, jobs: int) -> None:
    engine = sqlq_orm.create_engine(url)
    sqlq_orm.Queue(engine).enqueue_many(
        [{"type": "noop", "payload": {"n": n}} for n in range(jobs)]
    )
    engine.dispose()


def _cases(config: Config, label: str, fresh: Callable[[], str]) -> list[Result]:
    jobs = config.size(full=20_000, quick=4_000, smoke=50)
    latencies: dict[int, list[float]] = {1: [], 2: []}
    problems: list[str] = []

    def with_workers(processes: int) -> float:
        url = fresh()
        _enqueue(url, jobs)
        elapsed, done, found = run_workers(url, processes)
        latencies[processes] += found
        engine = sqlq_orm.create_engine(url)
        succeeded = count_rows(engine, "sqlq_jobs", "status = 'SUCCEEDED'")
        events = count_events(engine)
        engine.dispose()
        # ENQUEUED, CLAIMED, STARTED, SUCCEEDED per job: the full history is kept.
        if not (done == succeeded == jobs and events == 4 * jobs):
            problems.append(f"{processes}p: done={done} succeeded={succeeded} events={events}")
        return jobs / elapsed

    def direct(**how: Any) -> Callable[[], float]:
        def measure() -> float:
            url = fresh()
            _enqueue(url, jobs)
            return _direct(url, jobs, **how)

        return measure

    runs = {"1p": lambda: with_workers(1), "2p": lambda: with_workers(2), "direct": direct()}
    if hasattr(sqlq_orm.Queue, "succeed_many"):
        runs["grouped"] = direct(batch=GROUPED_BATCH, grouped=True)
    samples = side_by_side(runs, config.heavy_reps)
    results = []
    for processes in (1, 2):
        found = latencies[processes]
        result = compare(
            NAME,
            f"Worker x{processes} process, {jobs:,} no-op jobs ({label})",
            samples[f"{processes}p"],
            "Queue loop, 1 process, no worker",
            samples["direct"],
            "jobs/s",
            note=(
                f"claim-to-finish p50 {percentile(found, 0.5) * 1000:.1f} ms,"
                f" p99 {percentile(found, 0.99) * 1000:.1f} ms"
                f" (concurrency={CONCURRENCY})"
                + (f"; PROBLEMS: {'; '.join(problems)}" if problems else "")
            ),
        )
        if processes == 1 and label == "sqlite":
            result.target = f">= {TARGET_JOBS_PER_SECOND:,.0f} jobs/s"
            result.met = result.value >= TARGET_JOBS_PER_SECOND and not problems
        results.append(result)
        results.append(
            Result(
                NAME,
                f"claim-to-finish p50 / p99, {processes}p ({label})",
                percentile(found, 0.5) * 1000,
                "ms",
                note=f"p99 {percentile(found, 0.99) * 1000:.1f} ms over {len(found):,} jobs",
                samples=[percentile(found, 0.99) * 1000],
            )
        )
    if "grouped" in samples:
        grouped = compare(
            NAME,
            f"Queue loop, claim {GROUPED_BATCH} + succeed_many, {jobs:,} jobs ({label})",
            samples["grouped"],
            "Queue loop, 1 process, no worker",
            samples["direct"],
            "jobs/s",
            note="what a worker that groups its finishes could reach, same guarantees",
        )
        if label == "sqlite":
            grouped.target = f">= {TARGET_JOBS_PER_SECOND:,.0f} jobs/s"
            grouped.met = grouped.value >= TARGET_JOBS_PER_SECOND
        results.append(grouped)
    return results


def run(config: Config) -> list[Result]:
    try:
        import sqlq_orm.worker  # noqa: F401
    except ImportError:
        return [Result(NAME, "Worker", float("nan"), "jobs/s", note="skipped: no sqlq_orm.worker")]
    return on_every_database(config, "workers", _cases)
