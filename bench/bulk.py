"""Bench 3: bulk enqueue.

``Queue.enqueue_many`` of N jobs (default 100,000) in one call, against the raw
baseline: one ``BEGIN IMMEDIATE`` transaction with ``executemany`` for the jobs and
``executemany`` for their ENQUEUED events, on the same schema. Both validate nothing
beyond encoding the JSON payload on the raw side; the service also validates every
job before writing any. Both sides start from a fresh SQLite file.
"""

from __future__ import annotations

import time

import sqlq_orm
from bench.core import Config, Result, compare, fresh_sqlite, side_by_side
from bench.raw_sqlite_baseline import RawSqliteQueue
from sqlq_orm import JobSpec

NAME = "bulk"


def run_queue(config: Config, jobs: int) -> float:
    _, engine = fresh_sqlite(config, "bulk_queue")
    queue = sqlq_orm.Queue(engine)
    specs = [JobSpec("noop", {"n": number}) for number in range(jobs)]
    try:
        started = time.perf_counter()
        ids = queue.enqueue_many(specs)
        elapsed = time.perf_counter() - started
        assert len(ids) == jobs and queue.counts_by_status()["QUEUED"] == jobs
    finally:
        engine.dispose()
    return jobs / elapsed


def run_raw(config: Config, jobs: int) -> float:
    path, engine = fresh_sqlite(config, "bulk_raw")
    engine.dispose()
    raw = RawSqliteQueue(path)
    rows = [("noop", {"n": number}) for number in range(jobs)]
    try:
        started = time.perf_counter()
        ids = raw.enqueue_many(rows)
        elapsed = time.perf_counter() - started
        assert len(ids) == jobs
    finally:
        raw.close()
    return jobs / elapsed


def run(config: Config) -> list[Result]:
    jobs = config.size(full=100_000, quick=20_000, smoke=200)
    reps = config.heavy_reps
    samples = side_by_side(
        {"queue": lambda: run_queue(config, jobs), "raw": lambda: run_raw(config, jobs)}, reps
    )
    results = [
        compare(
            NAME,
            f"enqueue_many x{jobs:,} (sqlite file)",
            samples["queue"],
            "raw executemany",
            samples["raw"],
            "jobs/s",
        )
    ]
    return results
