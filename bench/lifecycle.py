"""Bench 1: one job's whole life, one at a time, in one process, on a SQLite file.

Per job: ``enqueue`` -> ``claim`` -> ``start`` -> ``succeed`` through :class:`sqlq_orm.Queue`
(four transactions, eleven statements), and the worker's shorter path ``enqueue`` ->
``claim(start=True)`` -> ``succeed`` (three transactions), each against
:class:`bench.raw_sqlite_baseline.RawSqliteQueue` running the same statements in the
same transactions with the standard ``sqlite3``. Both sides start from a fresh file
with the schema created from the models. Target: ratio >= 0.5.
"""

from __future__ import annotations

import time

import sqlq_orm
from bench.core import Config, Result, compare, fresh_sqlite, side_by_side
from bench.raw_sqlite_baseline import RawSqliteQueue

NAME = "lifecycle"
WORKER = "bench-worker"


def run_queue(config: Config, jobs: int, *, start_on_claim: bool = False) -> float:
    """jobs/s for the full lifecycle through ``Queue``."""
    _, engine = fresh_sqlite(config, "lifecycle_queue")
    queue = sqlq_orm.Queue(engine)
    try:
        started = time.perf_counter()
        for number in range(jobs):
            queue.enqueue("noop", {"n": number})
            (lease,) = queue.claim(WORKER, start=start_on_claim)
            if not start_on_claim:
                queue.start(lease)
            queue.succeed(lease)
        elapsed = time.perf_counter() - started
        counts = queue.counts_by_status()
        assert counts["SUCCEEDED"] == jobs, counts
    finally:
        engine.dispose()
    return jobs / elapsed


def run_raw(config: Config, jobs: int, *, start_on_claim: bool = False) -> float:
    """jobs/s for the same lifecycle through the raw ``sqlite3`` baseline."""
    path, engine = fresh_sqlite(config, "lifecycle_raw")
    engine.dispose()
    raw = RawSqliteQueue(path)
    try:
        started = time.perf_counter()
        for number in range(jobs):
            raw.enqueue("noop", {"n": number})
            (lease,) = raw.claim(WORKER, start=start_on_claim)
            if not start_on_claim:
                raw.start(lease, WORKER)
            raw.succeed(lease, WORKER)
        elapsed = time.perf_counter() - started
        done = raw.connection.execute(
            "SELECT count(*) FROM sqlq_jobs WHERE status = 'SUCCEEDED'"
        ).fetchone()[0]
        assert done == jobs, done
    finally:
        raw.close()
    return jobs / elapsed


def run(config: Config) -> list[Result]:
    jobs = config.size(full=2000, quick=1000, smoke=20)
    samples = side_by_side(
        {
            "queue": lambda: run_queue(config, jobs),
            "raw": lambda: run_raw(config, jobs),
            "queue_started": lambda: run_queue(config, jobs, start_on_claim=True),
            "raw_started": lambda: run_raw(config, jobs, start_on_claim=True),
        },
        config.reps,
    )
    return [
        compare(
            NAME,
            f"enqueue+claim+start+succeed x{jobs} (sqlite file)",
            samples["queue"],
            "raw sqlite3, same SQL",
            samples["raw"],
            "jobs/s",
            target_ratio=0.5,
            note="4 transactions, 11 statements per job",
        ),
        compare(
            NAME,
            f"enqueue+claim(start=True)+succeed x{jobs} (sqlite file)",
            samples["queue_started"],
            "raw sqlite3, same SQL",
            samples["raw_started"],
            "jobs/s",
            target_ratio=0.5,
            note="3 transactions, 9 statements per job (the path the worker takes)",
        ),
    ]
