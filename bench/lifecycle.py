"""Bench 1: one job's whole life, one at a time, in one process.

Per job: ``enqueue`` -> ``claim`` -> ``start`` -> ``succeed`` through :class:`sqlq_orm.Queue`
(four transactions, eleven statements on SQLite), and the worker's shorter path
``enqueue`` -> ``claim(start=True)`` -> ``succeed`` (three transactions).

On a SQLite file each is timed against :class:`bench.raw_sqlite_baseline.RawSqliteQueue`
running the same statements in the same transactions with the standard ``sqlite3``;
both sides start from a fresh file with the schema created from the models. Target:
ratio >= 0.5.

With ``--pg`` / ``--mariadb`` the same two paths also run through ``Queue`` on
PostgreSQL and MariaDB (:func:`bench.core.on_every_database`), and MariaDB is reported
against PostgreSQL from the same run: a server has no raw baseline here, PostgreSQL is
the yardstick.
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
    on_every_database,
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


def _server_cases(config: Config, label: str, fresh: Callable[[], str]) -> list[Result]:
    """The two paths through ``Queue`` on a server, each run on an emptied database."""
    jobs = config.size(full=2000, quick=500, smoke=20)

    def measure(start_on_claim: bool) -> Callable[[], float]:
        def run_once() -> float:
            url = fresh()
            return lifecycle(sqlq_orm.create_engine(url), jobs, start_on_claim=start_on_claim)

        return run_once

    samples = side_by_side(
        {name: measure(start) for name, (_, start, _) in CASES.items()}, config.reps
    )
    return [
        Result(
            NAME,
            f"{title} x{jobs} ({label})",
            median(samples[name]),
            "jobs/s",
            note=note,
            samples=samples[name],
        )
        for name, (title, _, note) in CASES.items()
    ]


def _cases(config: Config, label: str, fresh: Callable[[], str]) -> list[Result]:
    return _sqlite_cases(config) if label == "sqlite" else _server_cases(config, label, fresh)


def _mariadb_against_postgres(results: list[Result]) -> list[Result]:
    """MariaDB / PostgreSQL for each path, from the samples of this run."""
    by_case = {result.case: result for result in results}
    ratios = []
    for result in results:
        if not result.case.endswith(" (mariadb)"):
            continue
        postgres = by_case.get(result.case.replace(" (mariadb)", " (postgresql)"))
        if postgres is None:
            continue
        ratios.append(
            compare(
                NAME,
                result.case.replace(" (mariadb)", " (MariaDB / PostgreSQL)"),
                result.samples,
                "PostgreSQL, same run",
                postgres.samples,
                "jobs/s",
                note=f"{result.note}; MariaDB's samples over PostgreSQL's",
            )
        )
    return ratios


def run(config: Config) -> list[Result]:
    results = on_every_database(config, NAME, _cases)
    return results + _mariadb_against_postgres(results)
