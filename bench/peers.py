"""Bench 6: other SQLite-backed Python queues draining the same number of jobs.

- huey's ``SqliteStorage`` (``dequeue`` = select + delete under ``BEGIN EXCLUSIVE``),
- persist-queue's ``SQLiteAckQueue`` (``get`` marks the row unacked, ``ack`` marks it
  done),

each on its own SQLite file in WAL mode at ``synchronous=NORMAL`` (the setting
sqlq_orm uses), against sqlq_orm draining the same number of jobs one at a time
(``claim(start=True)`` then ``succeed``), interleaved. Only the drain is timed; the
jobs are enqueued first.

Neither peer keeps a lease, a fencing token, an attempt row or an event: a huey task
is gone once dequeued (a crash loses it), and persist-queue's ack row has no owner or
expiry. sqlq_orm writes a job row update, an attempt row and two events per job.
The ratio is sqlq_orm / peer: below 1 means the peer moves more jobs per second.

huey's *task path* is measured too: a ``@huey.task()`` call enqueues (not timed) and
a consumer-equivalent loop (``huey.execute(huey.dequeue())`` until empty, as one huey
worker thread does) dequeues and runs each task, against sqlq_orm's real ``Worker``
(one process, ``burst=True``, concurrency 10 and 64, full history) draining the same
number of jobs on a SQLite file.

With ``--pg``, the PostgreSQL peers (pgqueuer, procrastinate) run too: see
``bench/pg_peers.py``.

The peers come from the optional ``bench`` extra (``pip install -e '.[bench]'``);
when one is missing its case is skipped with a note.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import sqlq_orm
from bench import pg_peers
from bench.core import (
    Config,
    Result,
    compare,
    drain,
    fresh_sqlite,
    fresh_sqlite_path,
    side_by_side,
    sqlite_url,
)
from bench.worker_drain import drain_with_worker, enqueue_noops

NAME = "peers"
GUARANTEES = "peer keeps no lease, token, attempt or event history"


def _sqlq(config: Config, jobs: int) -> float:
    _, engine = fresh_sqlite(config, "peers_sqlq")
    queue = sqlq_orm.Queue(engine)
    queue.enqueue_many([{"type": "noop", "payload": {"n": n}} for n in range(jobs)])
    started = time.perf_counter()
    done = drain(queue, "bench-worker", batch=1)
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def _normal_sync_storage() -> type:
    from huey.storage import SqliteStorage

    class NormalSyncStorage(SqliteStorage):  # type: ignore[misc]
        """huey offers synchronous OFF or FULL; set NORMAL, as sqlq_orm does."""

        def _create_connection(self) -> sqlite3.Connection:
            connection = super()._create_connection()
            connection.execute("pragma synchronous=1")
            return connection

    return NormalSyncStorage


def _huey(config: Config, jobs: int) -> float:
    path = fresh_sqlite_path(config, "peers_huey")
    storage = _normal_sync_storage()(name="bench", filename=str(path))
    for n in range(jobs):
        storage.enqueue(f'{{"n":{n}}}'.encode())
    started = time.perf_counter()
    done = 0
    while storage.dequeue() is not None:
        done += 1
    elapsed = time.perf_counter() - started
    storage.close()
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def _huey_tasks(config: Config, jobs: int) -> float:
    """huey's task path: ``@huey.task()`` calls enqueue, a consumer-like loop executes."""
    from huey import Huey

    path = fresh_sqlite_path(config, "peers_huey_tasks")
    huey = Huey("bench", storage_class=_normal_sync_storage(), filename=str(path))
    done = 0

    @huey.task()
    def noop(n: int) -> None:
        nonlocal done
        done += 1

    for n in range(jobs):
        noop(n)
    started = time.perf_counter()
    while (task := huey.dequeue()) is not None:
        huey.execute(task)
    elapsed = time.perf_counter() - started
    huey.storage.close()
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def _sqlq_worker(config: Config, jobs: int, concurrency: int) -> float:
    url = sqlite_url(fresh_sqlite(config, f"peers_worker_c{concurrency}")[0])
    enqueue_noops(url, jobs)
    return drain_with_worker(url, jobs, concurrency)


def _persist_queue(config: Config, jobs: int) -> float:
    from persistqueue import SQLiteAckQueue
    from persistqueue.exceptions import Empty

    directory = fresh_sqlite_path(config, "peers_persistqueue").with_suffix("")
    if directory.exists():
        for child in directory.iterdir():
            child.unlink()
    queue: Any = SQLiteAckQueue(str(directory), auto_commit=True)
    for connection in {id(queue._conn): queue._conn, id(queue._putter): queue._putter}.values():
        connection.execute("PRAGMA synchronous=NORMAL")
    for n in range(jobs):
        queue.put({"n": n})
    started = time.perf_counter()
    done = 0
    while True:
        try:
            item = queue.get(block=False)
        except Empty:
            break
        queue.ack(item)
        done += 1
    elapsed = time.perf_counter() - started
    queue.close()
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def run(config: Config) -> list[Result]:
    jobs = config.size(full=5_000, quick=2_000, smoke=40)
    peers = {
        "huey SqliteStorage": ("huey", _huey),
        "persist-queue SQLiteAckQueue": ("persistqueue", _persist_queue),
    }
    results: list[Result] = []
    for label, (module, measure) in peers.items():
        if not _installed(module):
            results.append(
                Result(NAME, f"{label} x{jobs:,}", float("nan"), "jobs/s",
                       note=f"skipped: {module} is not installed (pip install -e '.[bench]')")
            )  # fmt: skip
            continue
        samples = side_by_side(
            {"sqlq": lambda: _sqlq(config, jobs), "peer": lambda m=measure: m(config, jobs)},  # type: ignore[misc]
            config.heavy_reps,
        )
        results.append(
            compare(
                NAME,
                f"drain x{jobs:,}: sqlq_orm vs {label}",
                samples["sqlq"],
                label,
                samples["peer"],
                "jobs/s",
                note=GUARANTEES,
            )
        )
    results += _huey_task_path(config, jobs)
    return results + pg_peers.run(config)


def _huey_task_path(config: Config, jobs: int) -> list[Result]:
    label = "huey task path (@huey.task, dequeue + execute)"
    if not _installed("huey"):
        return [
            Result(NAME, f"{label} x{jobs:,}", float("nan"), "jobs/s",
                   note="skipped: huey is not installed (pip install -e '.[bench]')")
        ]  # fmt: skip
    runs = {f"c{c}": (lambda c=c: _sqlq_worker(config, jobs, c)) for c in pg_peers.CONCURRENCIES}
    runs["huey"] = lambda: _huey_tasks(config, jobs)
    samples = side_by_side(runs, config.heavy_reps)  # type: ignore[arg-type]
    return [
        compare(
            NAME,
            f"drain x{jobs:,}: Worker c{c} (1 process) vs {label} (sqlite)",
            samples[f"c{c}"],
            label,
            samples["huey"],
            "jobs/s",
            note=GUARANTEES + "; huey runs the tasks in its own thread, no worker threads",
        )
        for c in pg_peers.CONCURRENCIES
    ]
