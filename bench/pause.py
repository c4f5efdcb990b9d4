"""Bench 10: what paused queues cost the claim of the queues still running.

One database: a ``work`` queue of N queued jobs (default 50,000) and 10 other queues
of N/10 jobs each. A sample claims a batch of 10 from ``work`` (``start=True``) and
finishes it with ``succeed_many``, ``rounds`` times, and reports the mean claim time;
only the claim is timed. The two sides run alternately in one process: no queue
paused, and the 10 other queues paused (rows in ``sqlq_queues`` that every claim
checks). Target: ratio >= 0.9 (the claim with 10 paused queues is at most ~11 %
slower).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlq_orm
from bench.core import Config, Result, compare, on_every_database, side_by_side

NAME = "pause"
BATCH = 10
OTHER_QUEUES = [f"other{n}" for n in range(10)]


def _claim_ms(queue: sqlq_orm.Queue, rounds: int, paused: bool) -> float:
    for name in OTHER_QUEUES:
        if paused:
            queue.pause_queue(name)
        else:
            queue.resume_queue(name)
    assert len(queue.paused_queues()) == (len(OTHER_QUEUES) if paused else 0)
    elapsed = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        leases = queue.claim("bench", queues=["work"], limit=BATCH, start=True)
        elapsed += time.perf_counter() - started
        assert leases, "queue 'work' ran dry"
        queue.succeed_many(leases)
    return elapsed / rounds * 1000


def _fill(queue: sqlq_orm.Queue, name: str, jobs: int) -> None:
    chunk = 10_000
    for start in range(0, jobs, chunk):
        count = min(chunk, jobs - start)
        queue.enqueue_many([{"type": "noop", "queue": name} for _ in range(count)])


def _cases(config: Config, database: str, fresh_url: Callable[[], str]) -> list[Result]:
    jobs = config.size(full=50_000, quick=20_000, smoke=500)
    rounds = config.size(full=200, quick=60, smoke=3)
    engine = sqlq_orm.create_engine(fresh_url())
    queue = sqlq_orm.Queue(engine)
    _fill(queue, "work", jobs)
    for name in OTHER_QUEUES:
        _fill(queue, name, jobs // 10)
    samples = side_by_side(
        {
            "none": lambda: _claim_ms(queue, rounds, paused=False),
            "paused": lambda: _claim_ms(queue, rounds, paused=True),
        },
        config.reps,
    )
    engine.dispose()
    queued = f"{jobs:,} queued"
    return [
        compare(
            NAME, f"{database}: claim {BATCH} with 10 other queues paused, {queued}",
            samples["paused"], f"claim {BATCH}, no queue paused, {queued}", samples["none"],
            "ms", higher_is_better=False, target_ratio=0.9, target_text=">= 0.9",
            note=f"{rounds} claims per sample, each finished by succeed_many",
        ),
    ]  # fmt: skip


def run(config: Config) -> list[Result]:
    return on_every_database(config, NAME, _cases)
