"""Bench 9: what concurrency keys cost the claim, at 100,000 queued jobs.

Two queues in one database, each holding N queued jobs (default 100,000): ``plain``
(no keys) and ``keyed`` (every job has one of 1,000 keys, limit 2). A sample claims
a batch of 10 (``start=True``) and finishes it with ``succeed_many``, ``rounds``
times, and reports the mean claim time; only the claim is timed. Target: the keyed
claim costs at most 1.5 times the plain one (ratio >= 0.67, plain time / keyed time).

A second keyed case shows the claim's worst shape: a few hot keys (10 keys, limit 1)
whose jobs fill the front of the queue, all full, so each claim passes over every
job of a full key before it reaches one it may take (here: plain jobs queued behind
``blocked`` keyed ones). Its cost grows with the number of blocked jobs in front.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlq_orm
from bench.core import Config, Result, compare, on_every_database, side_by_side

NAME = "concurrency"
BATCH = 10


def _claim_ms(queue: sqlq_orm.Queue, name: str, rounds: int) -> float:
    elapsed = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        leases = queue.claim("bench", queues=[name], limit=BATCH, start=True)
        elapsed += time.perf_counter() - started
        assert leases, f"queue {name!r} ran dry"
        queue.succeed_many(leases)
    return elapsed / rounds * 1000


def _fill(queue: sqlq_orm.Queue, name: str, jobs: int, **keys: object) -> None:
    chunk = 10_000
    for start in range(0, jobs, chunk):
        count = min(chunk, jobs - start)
        queue.enqueue_many([{"type": "noop", "queue": name, **keys} for _ in range(count)])


def _cases(config: Config, database: str, fresh_url: Callable[[], str]) -> list[Result]:
    jobs = config.size(full=100_000, quick=100_000, smoke=500)
    rounds = config.size(full=200, quick=60, smoke=3)
    hot_blocked = config.size(full=1_000, quick=1_000, smoke=20)
    engine = sqlq_orm.create_engine(fresh_url())
    queue = sqlq_orm.Queue(engine)
    _fill(queue, "plain", jobs)
    keyed = [
        {"type": "noop", "queue": "keyed", "concurrency_key": f"k{n % 1000}",
         "concurrency_limit": 2}
        for n in range(jobs)
    ]  # fmt: skip
    for start in range(0, jobs, 10_000):
        queue.enqueue_many(keyed[start : start + 10_000])
    # Hot keys: 10 keys, limit 1, each with one job held; `hot_blocked` of their jobs
    # queued in front of plain jobs.
    hot = [{"type": "noop", "queue": "hot", "concurrency_key": f"hot{n % 10}"} for n in range(10)]
    queue.enqueue_many(hot)
    queue.claim("holder", queues=["hot"], limit=10, start=True)
    queue.enqueue_many(
        [
            {"type": "noop", "queue": "hot", "concurrency_key": f"hot{n % 10}", "priority": 1}
            for n in range(hot_blocked)
        ]
    )
    _fill(queue, "hot", jobs // 10)

    samples = side_by_side(
        {
            "plain": lambda: _claim_ms(queue, "plain", rounds),
            "keyed": lambda: _claim_ms(queue, "keyed", rounds),
            "hot": lambda: _claim_ms(queue, "hot", rounds),
        },
        config.reps,
    )
    engine.dispose()
    queued = f"{jobs:,} queued"
    return [
        compare(
            NAME, f"{database}: claim {BATCH}, 1,000 keys (limit 2), {queued}",
            samples["keyed"], f"claim {BATCH}, no keys, {queued}", samples["plain"], "ms",
            higher_is_better=False, target_ratio=1 / 1.5, target_text="<= 1.5x plain",
            note=f"{rounds} claims per sample, each finished by succeed_many",
        ),
        compare(
            NAME, f"{database}: claim {BATCH} past {hot_blocked:,} jobs of 10 full keys",
            samples["hot"], f"claim {BATCH}, no keys, {queued}", samples["plain"], "ms",
            higher_is_better=False,
            note="the worst shape: every claim passes over the blocked jobs in front",
        ),
    ]  # fmt: skip


def run(config: Config) -> list[Result]:
    return on_every_database(config, NAME, _cases)
