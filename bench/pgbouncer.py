"""Bench: PostgreSQL through PgBouncer in transaction pooling mode, beside direct.

Needs ``--pg`` and Debian's ``pgbouncer`` (started here on a free port in front of the
``--pg`` server, ``pool_mode = transaction``, the configuration of the test suite's
PgBouncer flavour: ``tests/support/pgbouncer.py``), or ``$SQLQ_BENCH_PGBOUNCER_URL``
naming one already running in front of the same server.

- **Drain.** N pre-enqueued no-op jobs (20,000; quick 5,000) drained by one real
  ``Worker`` process (``burst=True``, concurrency 64, full history), its engine made
  with ``create_engine(pooled_url, transaction_pooling=True)``; beside it, side by
  side and interleaved, the same drain on a direct engine. Target: through PgBouncer
  >= 0.8x direct.
- **Idle latency.** An idle ``Worker`` (poll 1 s) whose engine goes through PgBouncer
  and whose ``LISTEN`` goes to a direct ``listen_url``; this process enqueues one job
  at a time (also through PgBouncer) and times enqueue -> handler start (as the
  ``latency`` bench); beside it the same with everything direct. Target: p50 <= 10 ms.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    percentile,
    postgres_database,
    postgres_reachable,
    reset_postgres,
    run_children,
    side_by_side,
)

NAME = "pgbouncer"
CONCURRENCY = 64
TARGET_RATIO = 0.8
TARGET_P50_MS = 10.0
POLL_INTERVAL = 1.0
HANDLED_TIMEOUT = 30.0


def _noop(context: Any) -> None:
    return None


def _drain_worker(url: str, options: dict[str, Any], go: Any, out: Any) -> None:
    from sqlq_orm.worker.runtime import Worker

    engine = sqlq_orm.create_engine(url, **options)
    worker = Worker(
        sqlq_orm.Queue(engine),
        {"noop": _noop},
        concurrency=CONCURRENCY,
        poll_interval=0.05,
        sweep_interval=None,
        burst=True,
        install_signal_handlers=False,
        worker_id="bench-pgbouncer",
    )
    go.wait()
    stats = worker.run()
    engine.dispose()
    out.put(stats.succeeded)


def _drain(direct_url: str, url: str, options: dict[str, Any], jobs: int) -> float:
    """Fill a fresh database with ``jobs`` no-op jobs; jobs/s of one worker draining it."""
    engine = reset_postgres(direct_url)
    queue = sqlq_orm.Queue(engine)
    for start in range(0, jobs, 10_000):
        queue.enqueue_many([{"type": "noop"} for _ in range(min(10_000, jobs - start))])
    engine.dispose()
    elapsed, reports, _ = run_children(_drain_worker, [(url, options)], 1.0)
    assert reports == [jobs], f"drained {reports} of {jobs}"
    return jobs / elapsed


_stamps: Any = None


def _stamp(context: Any) -> None:
    _stamps.put((context.payload["seq"], time.time()))


def _idle_worker(url: str, options: dict[str, Any], stop: Any, stamps: Any) -> None:
    from sqlq_orm.worker.runtime import Worker

    global _stamps
    _stamps = stamps
    engine = sqlq_orm.create_engine(url, **options)
    worker = Worker(
        sqlq_orm.Queue(engine),
        {"stamp": _stamp},
        poll_interval=POLL_INTERVAL,
        install_signal_handlers=False,
        worker_id="bench-pgbouncer-latency",
    )
    threading.Thread(target=lambda: (stop.wait(), worker.request_stop()), daemon=True).start()
    worker.run()
    engine.dispose()


def _latencies(url: str, options: dict[str, Any], jobs: int) -> list[float]:
    """Enqueue -> handler start (seconds) of ``jobs`` jobs, each finding the worker idle."""
    context = multiprocessing.get_context("spawn")
    stop, stamps = context.Event(), context.Queue()
    child = context.Process(target=_idle_worker, args=(url, options, stop, stamps))
    engine = sqlq_orm.create_engine(url, **options)
    queue = sqlq_orm.Queue(engine)
    child.start()
    found: list[float] = []
    try:

        def handled(seq: int) -> float:
            got, started = stamps.get(timeout=HANDLED_TIMEOUT)
            assert got == seq, (got, seq)
            return float(started)

        queue.enqueue("stamp", {"seq": -1})  # the worker is up and listening
        handled(-1)
        gaps = random.Random(13)
        for seq in range(jobs):
            time.sleep(0.05 + gaps.uniform(0, POLL_INTERVAL))
            enqueued_at = time.time()
            queue.enqueue("stamp", {"seq": seq})
            found.append(handled(seq) - enqueued_at)
    finally:
        stop.set()
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join()
        engine.dispose()
    return found


@contextmanager
def _pooler(admin_url: str) -> Iterator[tuple[str, int] | None]:
    """(host, port) of a PgBouncer in front of ``admin_url``'s server; None: none."""
    given = os.environ.get("SQLQ_BENCH_PGBOUNCER_URL")
    if given:
        url = sqlalchemy.make_url(given)
        yield (url.host or "127.0.0.1", url.port or 6432)
        return
    from tests.support.pgbouncer import find_pgbouncer, start_pgbouncer

    executable = find_pgbouncer()
    if executable is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="sqlq-bench-pgbouncer-") as directory:
        pooler = start_pgbouncer(executable, sqlalchemy.make_url(admin_url), Path(directory))
        try:
            yield (pooler.host, pooler.port)
        finally:
            pooler.stop()


def run(config: Config) -> list[Result]:
    why = postgres_reachable(config.pg_url)
    if why is not None or config.pg_url is None:
        print(f"   skipped: {why}")
        return []
    jobs = config.size(full=20_000, quick=5_000, smoke=200)
    samples = config.size(full=50, quick=20, smoke=3)
    with _pooler(config.pg_url) as address, postgres_database(config.pg_url) as direct:
        if address is None:
            print("   skipped: pgbouncer is not installed (apt-get install pgbouncer)")
            return []
        host, port = address
        pooled = sqlalchemy.make_url(direct).set(host=host, port=port)
        pooled_url = pooled.render_as_string(hide_password=False)
        pooling = {"transaction_pooling": True}
        runs = side_by_side(
            {
                "pgbouncer": lambda: _drain(direct, pooled_url, pooling, jobs),
                "direct": lambda: _drain(direct, direct, {}, jobs),
                # What the pooler's hop costs, apart from preparing nothing on the server.
                "direct, unprepared": lambda: _drain(
                    direct, direct, {"connect_args": {"prepare_threshold": None}}, jobs
                ),
            },
            config.heavy_reps,
        )
        results = [
            compare(
                NAME,
                f"Worker drain of {jobs:,} jobs, 1 process, concurrency {CONCURRENCY}, "
                "through PgBouncer (transaction mode)",
                runs["pgbouncer"],
                "the same drain, direct",
                runs["direct"],
                "jobs/s",
                target_ratio=TARGET_RATIO,
            ),
            compare(
                NAME,
                f"Worker drain of {jobs:,} jobs through PgBouncer, against direct without "
                "server-side prepared statements",
                runs["pgbouncer"],
                "direct, prepare_threshold=None",
                runs["direct, unprepared"],
                "jobs/s",
                note="the pooler's hop alone",
            ),
        ]
        listening = {"transaction_pooling": True, "listen_url": direct}
        reset_postgres(direct).dispose()
        pooled_ms = [value * 1000 for value in _latencies(pooled_url, listening, samples)]
        reset_postgres(direct).dispose()
        direct_ms = [value * 1000 for value in _latencies(direct, {}, samples)]
        latency = compare(
            NAME,
            f"enqueue -> handler start, idle Worker through PgBouncer, LISTEN direct, "
            f"poll {POLL_INTERVAL:g} s (p50)",
            pooled_ms,
            "the same, direct (p50)",
            direct_ms,
            "ms",
            higher_is_better=False,
            target_text=f"p50 <= {TARGET_P50_MS:g} ms",
            note=f"p99 {percentile(pooled_ms, 0.99):.1f} ms through PgBouncer, "
            f"{percentile(direct_ms, 0.99):.1f} ms direct, over {samples} jobs each, "
            "enqueued one at a time",
        )
        latency.met = latency.value <= TARGET_P50_MS
        results.append(latency)
    return results
