"""Issue 27's three SQLite ratios, measured side by side in one run.

1. the real ``Worker`` (1 process, ``burst=True``, concurrency 10 and 64, full history)
   draining no-op jobs vs huey's task path (``@huey.task()`` + ``dequeue``/``execute``);
2. ``Queue.enqueue`` one job at a time vs a huey task call (``noop(n)``: one enqueue);
3. ``enqueue`` -> ``claim`` -> ``start`` -> ``succeed`` one job at a time vs the raw
   ``sqlite3`` baseline running the same SQL in the same transactions.

Every side starts from its own fresh SQLite file in WAL mode at ``synchronous=NORMAL``;
the runs are interleaved (:func:`bench.core.side_by_side`). ``bench/README.md`` keeps a
table of these ratios per release (issue 27's regression guard).
"""

from __future__ import annotations

import time

import sqlq_orm
from bench import lifecycle, peers
from bench.core import Config, Result, compare, fresh_sqlite, fresh_sqlite_path, side_by_side

NAME = "ratios"


def enqueue_one_at_a_time(config: Config, jobs: int) -> float:
    """jobs/s for ``Queue.enqueue`` called once per job on a fresh SQLite file."""
    _, engine = fresh_sqlite(config, "ratios_enqueue")
    queue = sqlq_orm.Queue(engine)
    try:
        started = time.perf_counter()
        for number in range(jobs):
            queue.enqueue("noop", {"n": number})
        elapsed = time.perf_counter() - started
        assert queue.counts_by_status()["QUEUED"] == jobs
    finally:
        engine.dispose()
    return jobs / elapsed


def huey_task_calls(config: Config, jobs: int) -> float:
    """jobs/s for calling a ``@huey.task()`` once per job (each call enqueues)."""
    from huey import Huey

    path = fresh_sqlite_path(config, "ratios_huey_calls")
    huey = Huey("bench", storage_class=peers._normal_sync_storage(), filename=str(path))

    @huey.task()
    def noop(n: int) -> None:
        return None

    started = time.perf_counter()
    for number in range(jobs):
        noop(number)
    elapsed = time.perf_counter() - started
    assert huey.pending_count() == jobs
    huey.storage.close()
    return jobs / elapsed


def run(config: Config) -> list[Result]:
    if not peers._installed("huey"):
        return [Result(NAME, "huey", float("nan"), "jobs/s", note="skipped: huey not installed")]
    drain_jobs = config.size(full=10_000, quick=5_000, smoke=40)
    call_jobs = config.size(full=5_000, quick=2_000, smoke=20)
    runs = {
        "c10": lambda: peers._sqlq_worker(config, drain_jobs, 10),
        "c64": lambda: peers._sqlq_worker(config, drain_jobs, 64),
        "huey_drain": lambda: peers._huey_tasks(config, drain_jobs),
        "enqueue": lambda: enqueue_one_at_a_time(config, call_jobs),
        "huey_call": lambda: huey_task_calls(config, call_jobs),
        "lifecycle": lambda: lifecycle.run_queue(config, call_jobs // 2),
        "raw": lambda: lifecycle.run_raw(config, call_jobs // 2),
    }
    samples = side_by_side(runs, config.reps)  # type: ignore[arg-type]
    huey_drain = "huey task path (@huey.task, dequeue + execute)"
    return [
        compare(NAME, f"Worker c10 drain x{drain_jobs:,}", samples["c10"], huey_drain,
                samples["huey_drain"], "jobs/s", target_ratio=1.0),
        compare(NAME, f"Worker c64 drain x{drain_jobs:,}", samples["c64"], huey_drain,
                samples["huey_drain"], "jobs/s", target_ratio=1.0),
        compare(NAME, f"enqueue one at a time x{call_jobs:,}", samples["enqueue"],
                "huey task call", samples["huey_call"], "jobs/s", target_ratio=0.5),
        compare(NAME, f"enqueue+claim+start+succeed x{call_jobs // 2:,}", samples["lifecycle"],
                "raw sqlite3, same SQL", samples["raw"], "jobs/s", target_ratio=0.6),
    ]  # fmt: skip
