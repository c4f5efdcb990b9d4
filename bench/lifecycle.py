"""Bench 1: one job's whole life, one at a time, in one process.

Per job: ``enqueue`` -> ``claim`` -> ``start`` -> ``succeed`` through :class:`sqlq_orm.Queue`
(four transactions, fourteen statements on SQLite, four of them ``BEGIN IMMEDIATE``),
and the worker's shorter path ``enqueue`` -> ``claim(start=True)`` -> ``succeed``
(three transactions).

On a SQLite file each is timed against :class:`bench.raw_sqlite_baseline.RawSqliteQueue`
running the same statements in the same transactions with the standard ``sqlite3``;
both sides start from a fresh file with the schema created from the models. Target:
ratio >= 0.5.

With ``--pg`` / ``--mariadb`` the same two paths also run through ``Queue`` on
PostgreSQL and MariaDB (:func:`bench.core.server_databases`: both throw-away databases
open at once, their runs interleaved), and MariaDB is reported against PostgreSQL: a
server has no raw baseline here, PostgreSQL is the yardstick.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    fresh_sqlite,
    median,
    server_databases,
    side_by_side,
)
from bench.raw_sqlite_baseline import RawSqliteQueue

NAME = "lifecycle"
WORKER = "bench-worker"


def run_queue(config: Config, jobs: int, *, start_on_claim: bool = False) -> float:
    """jobs/s for the full lifecycle through ``Queue`` on a fresh SQLite file."""
    _, engine = fresh_sqlite(config, "lifecycle_queue")
    return lifecycle(engine, jobs, start_on_claim=start_on_claim)


def lifecycle(engine: sqlalchemy.Engine, jobs: int, *, start_on_claim: bool = False) -> float:
    """jobs/s for ``jobs`` lifecycles one at a time through ``Queue`` on an empty queue
    (the engine is disposed of afterwards)."""
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


CASES = {
    "queue": ("enqueue+claim+start+succeed", False, "4 transactions per job"),
    "queue_started": (
        "enqueue+claim(start=True)+succeed",
        True,
        "3 transactions per job (the path the worker takes)",
    ),
}


def _sqlite_cases(config: Config) -> list[Result]:
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


def _server_cases(config: Config) -> list[Result]:
    """The two paths through ``Queue`` on each server, all runs interleaved, each on an
    emptied database; MariaDB over PostgreSQL where both answered."""
    jobs = config.size(full=2000, quick=500, smoke=20)
    with server_databases(config) as servers:

        def measure(fresh: Callable[[], str], start_on_claim: bool) -> Callable[[], float]:
            def run_once() -> float:
                engine = sqlq_orm.create_engine(fresh())
                return lifecycle(engine, jobs, start_on_claim=start_on_claim)

            return run_once

        samples = side_by_side(
            {
                f"{database}/{path}": measure(fresh, start_on_claim)
                for database, fresh in servers.items()
                for path, (_, start_on_claim, _) in CASES.items()
            },
            config.reps,
        )
    results = [
        Result(
            NAME,
            f"{title} x{jobs} ({database})",
            median(samples[f"{database}/{path}"]),
            "jobs/s",
            note=note,
            samples=samples[f"{database}/{path}"],
        )
        for database in servers
        for path, (title, _, note) in CASES.items()
    ]
    if {"postgresql", "mariadb"} <= set(servers):
        results += [
            compare(
                NAME,
                f"{title} x{jobs} (MariaDB / PostgreSQL)",
                samples[f"mariadb/{path}"],
                "PostgreSQL, same run",
                samples[f"postgresql/{path}"],
                "jobs/s",
                note=f"{note}; runs on both databases interleaved",
            )
            for path, (title, _, note) in CASES.items()
        ]
    return results


def run(config: Config) -> list[Result]:
    return _sqlite_cases(config) + _server_cases(config)
