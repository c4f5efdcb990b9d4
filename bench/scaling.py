"""Bench 4: does the queue stay fast when the table holds a million finished jobs?

- claim+finish throughput (``claim(start=True)`` then ``succeed``, one job at a time)
  on a database whose history holds N finished jobs (default 1,000,000, with their
  attempts and two events each), against the same work on an empty database.
  Target: ratio >= 0.8.
- ``sweep`` with 100 expired leases among those rows. Target: < 50 ms. Baseline: the
  same sweep on an empty database.
- every stats query at that size. Target: < 250 ms each. ``counts_by_status`` is set
  beside the same SQL run raw; the observability queries
  (:class:`sqlq_orm.ops.stats.StatsQueries`) and the whole ``collect_stats``
  report are timed on their own.

The history is written with one raw ``INSERT ... SELECT`` (see :mod:`bench.fill`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    drain,
    fresh_sqlite,
    median,
    postgres_database,
    postgres_reachable,
    reset_postgres,
    side_by_side,
    timed,
)
from bench.fill import add_expired_leases, delete_jobs, fill_finished_history

NAME = "scaling"
WORKER = "bench-worker"
EXPIRED = 100
STATS_TARGET_MS = 250.0
SWEEP_TARGET_MS = 50.0


def _drain_rate(engine: Engine, jobs: int) -> float:
    queue = sqlq_orm.Queue(engine)
    queue.enqueue_many([{"type": "noop", "payload": {"n": n}} for n in range(jobs)])
    elapsed, done = timed(lambda: drain(queue, WORKER, batch=1))
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def _sweep_ms(engine: Engine) -> float:
    queue = sqlq_orm.Queue(engine)
    ids = add_expired_leases(engine, EXPIRED)
    try:
        elapsed, result = timed(queue.sweep)
        assert result.expired == EXPIRED, result
    finally:
        delete_jobs(engine, ids)
    return elapsed * 1000


def _stats_cases(queue: sqlq_orm.Queue) -> dict[str, Callable[[], Any]]:
    """Every stats read that exists in this tree, by name."""
    cases: dict[str, Callable[[], Any]] = {"counts_by_status": queue.counts_by_status}
    try:
        from sqlq_orm.ops import stats as observability
    except ImportError:
        return cases
    queries = getattr(observability, "StatsQueries", None)
    if queries is not None:
        for named in queries(queue.tables, int(time.time()), queue.dialect).all():
            # (name, statement[, params]) or an object with those attributes.
            if isinstance(named, tuple):
                name, statement, params = (*named, {})[:3]
            else:
                name, statement = named.name, named.statement
                params = getattr(named, "params", {})

            def run_one(statement: Any = statement, params: Any = params) -> Any:
                with queue.read() as connection:
                    return connection.execute(statement, params).all()

            cases[name] = run_one
    collect = getattr(observability, "collect_stats", None)
    if collect is not None:
        cases["collect_stats (whole report)"] = lambda: collect(queue)
    return cases


def _raw_counts_ms(engine: Engine) -> float:
    sql = "SELECT sqlq_jobs.status, count(*) AS count_1 FROM sqlq_jobs GROUP BY sqlq_jobs.status"
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        started = time.perf_counter()
        cursor = driver.cursor()
        cursor.execute(sql)
        cursor.fetchall()
        cursor.close()
        elapsed = time.perf_counter() - started
        connection.rollback()
    return elapsed * 1000


def _cases(
    config: Config,
    label: str,
    big: Engine,
    empty: Callable[[], Engine],
    rows: int,
) -> list[Result]:
    jobs = config.size(full=3000, quick=1000, smoke=30)
    results: list[Result] = []

    def on_empty(measure: Callable[[Engine], float]) -> Callable[[], float]:
        def run() -> float:
            engine = empty()
            try:
                return measure(engine)
            finally:
                engine.dispose()

        return run

    throughput = side_by_side(
        {
            "history": lambda: _drain_rate(big, jobs),
            "empty": on_empty(lambda e: _drain_rate(e, jobs)),
        },
        config.reps,
    )
    results.append(
        compare(
            NAME,
            f"claim+finish x{jobs} with {rows:,} finished ({label})",
            throughput["history"],
            "same, empty history",
            throughput["empty"],
            "jobs/s",
            target_ratio=0.8,
        )
    )

    sweeps = side_by_side(
        {"history": lambda: _sweep_ms(big), "empty": on_empty(_sweep_ms)}, config.reps
    )
    sweep = compare(
        NAME,
        f"sweep {EXPIRED} expired among {rows:,} ({label})",
        sweeps["history"],
        "same, empty history",
        sweeps["empty"],
        "ms",
        higher_is_better=False,
        target_text=f"< {SWEEP_TARGET_MS:.0f} ms",
    )
    sweep.met = sweep.value < SWEEP_TARGET_MS
    results.append(sweep)

    queue = sqlq_orm.Queue(big)
    idle = [timed(queue.sweep)[0] * 1000 for _ in range(config.reps)]
    results.append(
        Result(
            NAME,
            f"sweep, nothing expired, {rows:,} rows ({label})",
            median(idle),
            "ms",
            target=f"< {SWEEP_TARGET_MS:.0f} ms",
            met=median(idle) < SWEEP_TARGET_MS,
            samples=idle,
        )
    )

    for name, call in _stats_cases(queue).items():
        try:
            call()  # warm the page cache and the statement cache once
        except Exception as exc:  # noqa: BLE001 - report a broken query, bench the rest
            results.append(
                Result(NAME, f"stats {name} at {rows:,} ({label})", float("nan"), "ms",
                       target=f"< {STATS_TARGET_MS:.0f} ms", met=False,
                       note=f"raised {type(exc).__name__}: {exc}")
            )  # fmt: skip
            continue
        if name == "counts_by_status" and big.dialect.name == "sqlite":
            timings = side_by_side(
                {
                    "queue": lambda call=call: timed(call)[0] * 1000,
                    "raw": lambda: _raw_counts_ms(big),
                },
                config.reps,
            )
            result = compare(
                NAME,
                f"stats {name} at {rows:,} ({label})",
                timings["queue"],
                "raw sqlite3, same SQL",
                timings["raw"],
                "ms",
                higher_is_better=False,
                target_text=f"< {STATS_TARGET_MS:.0f} ms",
            )
        else:
            samples = [timed(call)[0] * 1000 for _ in range(config.reps)]
            result = Result(NAME, f"stats {name} at {rows:,} ({label})", median(samples), "ms",
                            target=f"< {STATS_TARGET_MS:.0f} ms", samples=samples)  # fmt: skip
        if name.startswith("collect_stats"):
            # The whole report runs every query above in one read: informational.
            result.target, result.met = None, None
        else:
            result.met = result.value < STATS_TARGET_MS
        results.append(result)
    return results


def run(config: Config) -> list[Result]:
    rows = config.size(full=1_000_000, quick=200_000, smoke=2_000)
    results: list[Result] = []

    _, big = fresh_sqlite(config, "scaling_big")
    started = time.perf_counter()
    fill_finished_history(big, rows)
    fill_seconds = time.perf_counter() - started
    try:
        results += _cases(
            config, "sqlite", big, lambda: fresh_sqlite(config, "scaling_empty")[1], rows
        )
    finally:
        big.dispose()
    results[0].note = f"history filled by raw INSERT ... SELECT in {fill_seconds:.1f} s"

    why_not = postgres_reachable(config.pg_url)
    if why_not is None and config.pg_url:
        with (
            postgres_database(config.pg_url) as big_url,
            postgres_database(config.pg_url) as empty_url,
        ):
            big = reset_postgres(big_url)
            fill_finished_history(big, rows)
            try:
                results += _cases(
                    config, "postgresql", big, lambda: reset_postgres(empty_url), rows
                )
            finally:
                big.dispose()
    return results
