"""Bench 5: four processes claiming from one SQLite file at once.

N pre-enqueued jobs are drained by 4 processes (``claim(start=True)`` then
``succeed``, one job at a time: the most lock traffic per job), against the same N
drained by 1 process. SQLite lets one writer in at a time, so 4 processes cannot go
faster than 1; what matters is that they do not go much slower and that nothing
fails: every exception raised in a child is counted by message, and the bench proves
that no call failed with "database is locked", that every job ran exactly once
(one attempt each) and that none is left behind.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    count_rows,
    fresh_sqlite,
    run_children,
    side_by_side,
    sqlite_url,
)

NAME = "contention"


def _child(url: str, worker_id: str, batch: int, go: Any, out: Any) -> None:
    """Drain until empty; report (done, {error message: count})."""
    engine = sqlq_orm.create_engine(url)
    queue = sqlq_orm.Queue(engine)
    done, errors = 0, Counter[str]()
    go.wait()
    while True:
        try:
            leases = queue.claim(worker_id, limit=batch, start=True)
        except Exception as exc:  # noqa: BLE001 - counted, and the run goes on
            errors[f"claim: {type(exc).__name__}: {str(exc).splitlines()[0]}"] += 1
            continue
        if not leases:
            break
        for lease in leases:
            try:
                queue.succeed(lease)
                done += 1
            except Exception as exc:  # noqa: BLE001
                errors[f"succeed: {type(exc).__name__}: {str(exc).splitlines()[0]}"] += 1
    engine.dispose()
    out.put((done, dict(errors)))


def drain_with_processes(
    path: Path, processes: int, batch: int = 1
) -> tuple[float, int, Counter[str]]:
    """Run ``processes`` children on the file; return (seconds, jobs done, errors)."""
    # Half a second lets every child import and connect before the clock starts.
    elapsed, reports, children = run_children(
        _child, [(sqlite_url(path), f"bench-{n}", batch) for n in range(processes)], 0.5
    )
    errors: Counter[str] = Counter()
    for _, found in reports:
        errors.update(found)
    for child in children:
        if child.exitcode != 0:
            errors[f"child exited with {child.exitcode}"] += 1
    return elapsed, sum(done for done, _ in reports), errors


def _prepare(config: Config, name: str, jobs: int) -> Path:
    path, engine = fresh_sqlite(config, name)
    sqlq_orm.Queue(engine).enqueue_many(
        [{"type": "noop", "payload": {"n": n}} for n in range(jobs)]
    )
    engine.dispose()
    return path


def run(config: Config) -> list[Result]:
    jobs = config.size(full=5_000, quick=2_000, smoke=60)
    processes = 4
    all_errors: Counter[str] = Counter()
    checks: list[str] = []

    def measure(count: int) -> float:
        path = _prepare(config, f"contention_{count}p", jobs)
        elapsed, done, errors = drain_with_processes(path, count)
        all_errors.update(errors)
        engine = sqlq_orm.create_engine(sqlite_url(path))
        succeeded = count_rows(engine, "sqlq_jobs", "status = 'SUCCEEDED'")
        attempts = count_rows(engine, "sqlq_job_attempts")
        engine.dispose()
        if not (done == succeeded == attempts == jobs):
            checks.append(
                f"{count}p: done={done} succeeded={succeeded} attempts={attempts} jobs={jobs}"
            )
        return jobs / elapsed

    samples = side_by_side(
        {f"{processes}p": lambda: measure(processes), "1p": lambda: measure(1)}, config.heavy_reps
    )
    locked = sum(n for message, n in all_errors.items() if "database is locked" in message)
    other = sum(all_errors.values()) - locked
    throughput = compare(
        NAME,
        f"{processes} processes draining {jobs:,} from one sqlite file",
        samples[f"{processes}p"],
        "1 process, same jobs",
        samples["1p"],
        "jobs/s",
        note="SQLite admits one writer at a time: the ratio shows the cost of contention",
    )
    errors = Result(
        NAME,
        f"calls that raised in {processes}p and 1p runs",
        float(locked + other),
        "errors",
        target="0 'database is locked'",
        met=locked == 0 and other == 0 and not checks,
        note="; ".join(
            [f"{n} x {message}" for message, n in all_errors.most_common(5)]
            + checks
            + ["every job SUCCEEDED with exactly one attempt" if not checks else ""]
        ).strip("; "),
    )
    return [throughput, errors]
