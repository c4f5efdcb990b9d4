"""Bench 8: the scheduler's tick with 1,000 recurring schedules (target: < 5 ms).

1,000 schedules are registered (``m * * * *`` with ``m = i % 60``, a third of them in
Europe/Paris, a third in America/New_York), on the queue's pinned clock. Two ticks
are timed, each beside the worker's idle poll (``Queue.claim`` on an empty queue)
measured in the same run, interleaved:

- **idle tick**: nothing due (the clock sits between two minutes). What every
  worker pays each second: one indexed read, no write lock.
- **busy tick**: the clock moves on a minute, so ~17 schedules are due: the tick
  claims their slots (compare-and-set, one UPDATE each) and enqueues their jobs in
  one transaction. Its baseline is ``Queue.enqueue_many`` of as many jobs, so the
  ratio shows what scheduling adds on top of the enqueue itself.

Reported as milliseconds per tick (median of the repetitions, each the mean of a
batch); the ratio is the baseline's time over the tick's (>1: the tick is cheaper).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.core import (
    Config,
    Result,
    compare,
    fresh_sqlite,
    postgres_database,
    postgres_reachable,
    reset_postgres,
    side_by_side,
)
from sqlq_orm import PinnedClock, Queue, Schedule, Scheduler

NAME = "scheduler"
START = 1_700_000_000 - 1_700_000_000 % 3600 + 30  # 30 s past an hour
ZONES = ("UTC", "Europe/Paris", "America/New_York")


def _schedules(count: int) -> list[Schedule]:
    return [
        Schedule.declare(
            f"{i % 60} * * * *", "report", name=f"report-{i:04d}", timezone=ZONES[i % 3]
        )
        for i in range(count)
    ]


def _cases(config: Config, backend: str, engine_factory: Callable[[], object]) -> list[Result]:
    count = config.size(full=1000, quick=1000, smoke=50)
    batch = config.size(full=200, quick=60, smoke=3)
    engine = engine_factory()
    clock = PinnedClock(START)
    queue = Queue(engine, clock=clock)  # type: ignore[arg-type]
    scheduler = Scheduler(queue, _schedules(count))
    scheduler.register()

    def idle_tick() -> float:
        clock.set(clock.now() - clock.now() % 60 + 30)  # between two slots
        started = time.perf_counter()
        for _ in range(batch):
            scheduler.tick()
        return (time.perf_counter() - started) / batch * 1000

    due: list[int] = []

    def busy_tick() -> float:
        elapsed = 0.0
        for _ in range(batch):
            clock.advance(60)  # the next minute's slots fall due
            started = time.perf_counter()
            due.append(len(scheduler.tick().job_ids))
            elapsed += time.perf_counter() - started
        return elapsed / batch * 1000

    def idle_claim() -> float:
        started = time.perf_counter()
        for _ in range(batch):
            queue.claim("bench", queues=["empty"], limit=1)
        return (time.perf_counter() - started) / batch * 1000

    per_minute = max(1, count // 60)

    def plain_enqueue() -> float:
        jobs = [{"type": "report", "run_at": START} for _ in range(per_minute)]
        started = time.perf_counter()
        for _ in range(batch):
            queue.enqueue_many(jobs)
        return (time.perf_counter() - started) / batch * 1000

    idle = side_by_side({"tick": idle_tick, "claim": idle_claim}, config.reps)
    busy = side_by_side({"tick": busy_tick, "enqueue": plain_enqueue}, config.reps)
    engine.dispose()  # type: ignore[attr-defined]
    per_tick = sum(due) / len(due)
    return [
        compare(
            NAME, f"{backend}: idle tick, {count} schedules, none due", idle["tick"],
            "empty claim", idle["claim"], "ms", higher_is_better=False,
            target_text="< 5 ms", note=f"{batch} ticks per sample",
        ),
        compare(
            NAME, f"{backend}: busy tick, {count} schedules, {per_tick:.0f} due",
            busy["tick"], f"enqueue_many({per_minute})", busy["enqueue"], "ms",
            higher_is_better=False,
            target_text="< 5 ms", note=f"claims and enqueues {per_tick:.1f} slots per tick",
        ),
    ]  # fmt: skip


def run(config: Config) -> list[Result]:
    results = _cases(config, "sqlite", lambda: fresh_sqlite(config, NAME)[1])
    if postgres_reachable(config.pg_url) is None and config.pg_url:
        with postgres_database(config.pg_url) as url:
            results += _cases(config, "postgresql", lambda: reset_postgres(url))
    for result in results:
        result.met = result.value < 5.0
    return results
