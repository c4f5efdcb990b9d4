"""Bench 11: rate limits, held by worker processes, and what they cost other queues.

**Soak.** One queue limited to LIMIT starts per PERIOD seconds, counted per
``rate_key``, with a backlog of two keys far larger than the run can start. Three
worker processes with four handler threads each (``sqlq_orm.Worker``, the database's
own clock) run it for ``duration`` seconds (60 in full mode). Afterwards, per key,
from the starts the claims recorded (``rate_started_at``, whole seconds): the most
starts in any PERIOD consecutive seconds (target: <= LIMIT) and the share of the limit
used over the run's complete periods (target: >= 90 %). Each process also counts its
claim calls: a worker held back by the window sleeps until it frees, so claims per
second stay near the handlers' pace instead of the idle floor's 10 per second.

**Claim.** As bench 10 (pause): a batch of 10 claimed from a ``work`` queue with no
other queue limited, and with 10 other queues rate-limited (with backlogs), the
sides alternating in one process. Target: ratio >= 0.9.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    on_every_database,
    run_children,
    side_by_side,
)

NAME = "rate_limit"
BATCH = 10
OTHER_QUEUES = [f"other{n}" for n in range(10)]
LIMIT = 60
PERIOD = 5
KEYS = ("tenant:1", "tenant:2")
PROCESSES = 3
THREADS = 4


def _run_job(ctx: Any) -> None:
    time.sleep(0.02)  # a handler that does a little I/O


class _CountingQueue(sqlq_orm.Queue):
    """Counts the worker's claim calls (busy polling would show as many)."""

    claims = 0

    def claim(self, *args: Any, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        self.claims += 1
        return super().claim(*args, **kwargs)


def _worker_process(url: str, name: str, duration: float, go: Any, out: Any) -> None:
    engine = sqlq_orm.create_engine(url)
    queue = _CountingQueue(engine)
    worker = sqlq_orm.Worker(
        queue,
        {"limited": _run_job},
        queues=["limited"],
        concurrency=THREADS,
        worker_id=name,
        install_signal_handlers=False,
        run_schedules=False,
    )
    go.wait()
    thread = threading.Thread(target=worker.run)
    thread.start()
    time.sleep(duration)
    worker.request_stop()
    thread.join(timeout=60)
    out.put((name, queue.claims))
    engine.dispose()


def most_in_any_window(per_second: Counter[int], period: int) -> int:
    """The most starts in any ``period`` consecutive seconds."""
    return max(
        (sum(per_second[s] for s in range(first, first + period)) for first in per_second),
        default=0,
    )


def _soak(config: Config, database: str, fresh_url: Callable[[], str]) -> list[Result]:
    # 60 s in quick mode too: the soak's length is its point.
    duration = config.size(full=60, quick=60, smoke=3)
    url = fresh_url()
    engine = sqlq_orm.create_engine(url)
    queue = sqlq_orm.Queue(engine)
    backlog = int(LIMIT * (duration / PERIOD + 2)) * 2
    for start in range(0, backlog, 5_000):
        queue.enqueue_many(
            [
                {"type": "limited", "queue": "limited", "rate_key": KEYS[n % 2]}
                for n in range(start, min(backlog, start + 5_000))
            ]
        )
    queue.set_rate_limit("limited", LIMIT, PERIOD)
    args = [(url, f"soak-{n}", duration) for n in range(PROCESSES)]
    _elapsed, reports, _children = run_children(_worker_process, args, settle=3.0)
    claims = sum(count for _name, count in reports)
    j = queue.tables.jobs.c
    with queue.read() as connection:
        started = connection.execute(
            select(j.rate_key, j.rate_started_at).where(j.rate_started_at.is_not(None))
        ).all()
    engine.dispose()
    results = []
    for key in KEYS:
        per_second = Counter(int(second) for k, second in started if k == key)
        most = most_in_any_window(per_second, PERIOD)
        first, last = min(per_second), max(per_second)
        periods = max(1, (last - first + 1) // PERIOD)
        in_full_periods = sum(
            count for s, count in per_second.items() if s < first + periods * PERIOD
        )
        used = in_full_periods / (periods * LIMIT)
        results.append(
            Result(
                bench=NAME,
                case=f"{database}: most starts of {key} in any {PERIOD} s (limit {LIMIT})",
                value=float(most),
                unit="starts",
                target=f"<= {LIMIT}",
                met=most <= LIMIT,
                note=(
                    f"{PROCESSES} processes x {THREADS} threads, {duration:.0f} s; "
                    f"{sum(per_second.values())} starts of {key} over {periods} full periods"
                ),
            )
        )
        results.append(
            Result(
                bench=NAME,
                case=f"{database}: share of the limit used by {key} with a backlog",
                value=used * 100,
                unit="%",
                target=">= 90 %",
                met=used >= 0.9,
                note=f"{in_full_periods} starts in {periods} x {PERIOD} s (limit {LIMIT})",
            )
        )
    results.append(
        Result(
            bench=NAME,
            case=f"{database}: claim calls per second per worker process, held back",
            value=claims / PROCESSES / duration,
            unit="claims/s",
            note="an idle worker's floor is 10/s; a window-aware sleep stays far below",
        )
    )
    return results


def _claim_ms(queue: sqlq_orm.Queue, rounds: int, limited: bool) -> float:
    for name in OTHER_QUEUES:
        if limited:
            queue.set_rate_limit(name, 5, 60)
        else:
            queue.clear_rate_limit(name)
    elapsed = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        leases = queue.claim("bench", queues=["work"], limit=BATCH, start=True)
        elapsed += time.perf_counter() - started
        assert leases, "queue 'work' ran dry"
        queue.succeed_many(leases)
    return elapsed / rounds * 1000


def _claim(config: Config, database: str, fresh_url: Callable[[], str]) -> list[Result]:
    jobs = config.size(full=50_000, quick=20_000, smoke=500)
    rounds = config.size(full=200, quick=60, smoke=3)
    engine = sqlq_orm.create_engine(fresh_url())
    queue = sqlq_orm.Queue(engine)
    for name, count in [("work", jobs)] + [(other, jobs // 10) for other in OTHER_QUEUES]:
        for start in range(0, count, 10_000):
            size = min(10_000, count - start)
            queue.enqueue_many([{"type": "noop", "queue": name} for _ in range(size)])
    samples = side_by_side(
        {
            "none": lambda: _claim_ms(queue, rounds, limited=False),
            "limited": lambda: _claim_ms(queue, rounds, limited=True),
        },
        config.reps,
    )
    engine.dispose()
    queued = f"{jobs:,} queued"
    return [
        compare(
            NAME, f"{database}: claim {BATCH} with 10 other queues rate-limited, {queued}",
            samples["limited"], f"claim {BATCH}, no queue limited, {queued}", samples["none"],
            "ms", higher_is_better=False, target_ratio=0.9, target_text=">= 0.9",
            note=f"{rounds} claims per sample, each finished by succeed_many",
        ),
    ]  # fmt: skip


def _cases(config: Config, database: str, fresh_url: Callable[[], str]) -> list[Result]:
    return _claim(config, database, fresh_url) + _soak(config, database, fresh_url)


def run(config: Config) -> list[Result]:
    return on_every_database(config, NAME, _cases)
