"""Bench 7: how soon an idle ``Worker`` starts a new job, and what waiting costs it.

One real ``Worker`` (its defaults: concurrency 1, the sweeper on; signal handlers
off) runs in its own spawned process on a SQLite file and, with ``--pg`` /
``--mariadb``, on PostgreSQL and MariaDB. This process enqueues one job at a time with
``Queue.enqueue``, waits until the handler has run, sleeps a random gap (0.05 s plus
up to one poll interval, so that jobs arrive at every phase of the worker's poll
cycle), and enqueues the next: every job finds the worker idle. Latency is enqueue to
handler start: ``time.time()`` just before ``enqueue`` here against ``time.time()`` as
the handler begins there (same machine clock). The worker is woken across processes
(PostgreSQL ``NOTIFY``, SQLite ``PRAGMA data_version``); MariaDB has no such signal,
so there the figure follows ``poll_interval``. Measured at the default poll (1 s)
and at 0.1 s.

Idle CPU: before the jobs, the worker's process (all its threads) is left waiting
for ``IDLE_SECONDS``; its user + system time over that span (``/proc/<pid>/stat``)
as a percentage of one core. The database server's own work for the polls is not
counted.

No baseline is timed beside these: they are absolute figures, each the pooled
samples of one run per setting.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlq_orm
from bench.core import (
    Config,
    Result,
    on_every_database,
    percentile,
)

NAME = "latency"
POLL_INTERVALS = (1.0, 0.1)
GAP_SECONDS = 0.05
"""The least pause between one job's handling and the next enqueue."""
HANDLED_TIMEOUT = 30.0

_stamps: Any = None
"""In the worker's process: where the handler reports (seq, time it started)."""


def _stamp(context: Any) -> None:
    _stamps.put((context.payload["seq"], time.time()))


def _idle_worker(url: str, poll_interval: float, stop: Any, stamps: Any) -> None:
    from sqlq_orm.worker.runtime import Worker

    global _stamps
    _stamps = stamps
    engine = sqlq_orm.create_engine(url)
    worker = Worker(
        sqlq_orm.Queue(engine),
        {"stamp": _stamp},
        poll_interval=poll_interval,
        install_signal_handlers=False,
        worker_id="bench-latency",
    )

    def stop_when_asked() -> None:
        stop.wait()
        worker.request_stop()

    threading.Thread(target=stop_when_asked, daemon=True).start()
    worker.run()
    engine.dispose()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all threads); None without /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # utime and stime are fields 14 and 15 of the line; 12 and 13 after "(comm) ".
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, poll_interval: float, jobs: int, idle: float) -> tuple[list[float], float]:
    """Start an idle worker on ``url``; return (latencies in seconds, idle CPU % of a core)."""
    context = multiprocessing.get_context("spawn")
    stop, stamps = context.Event(), context.Queue()
    child = context.Process(target=_idle_worker, args=(url, poll_interval, stop, stamps))
    engine = sqlq_orm.create_engine(url)
    queue = sqlq_orm.Queue(engine)
    child.start()
    try:

        def handled(seq: int) -> float:
            found, started = stamps.get(timeout=HANDLED_TIMEOUT)
            assert found == seq, (found, seq)
            return float(started)

        # A first job proves the worker is up; then it is left alone, waiting.
        queue.enqueue("stamp", {"seq": -1})
        handled(-1)
        time.sleep(min(1.0, idle))
        before = cpu_seconds(child.pid or 0)
        time.sleep(idle)
        after = cpu_seconds(child.pid or 0)
        cpu = float("nan") if before is None or after is None else (after - before) / idle * 100

        gaps = random.Random(13)
        latencies = []
        for seq in range(jobs):
            time.sleep(GAP_SECONDS + gaps.uniform(0, poll_interval))
            enqueued_at = time.time()
            queue.enqueue("stamp", {"seq": seq})
            latencies.append(handled(seq) - enqueued_at)
    finally:
        stop.set()
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join()
        engine.dispose()
    return latencies, cpu


def _cases(config: Config, label: str, fresh: Callable[[], str]) -> list[Result]:
    jobs = config.size(full=50, quick=20, smoke=3)
    idle = config.size(full=100, quick=50, smoke=5) / 10
    results = []
    # The smoke run (CI) checks the mechanics once, at the short interval.
    for poll_interval in POLL_INTERVALS[-1:] if config.mode == "smoke" else POLL_INTERVALS:
        latencies: list[float] = []
        cpus: list[float] = []
        for _ in range(config.repeats or 1):
            found, cpu = measure(fresh(), poll_interval, jobs, idle)
            latencies += found
            cpus.append(cpu)
        in_ms = [value * 1000 for value in latencies]
        results.append(
            Result(
                NAME,
                f"enqueue -> handler start, idle Worker, poll {poll_interval:g} s ({label})",
                percentile(in_ms, 0.5),
                "ms",
                note=f"p50; p99 {percentile(in_ms, 0.99):.1f} ms, max {max(in_ms):.1f} ms"
                f" over {len(in_ms)} jobs enqueued one at a time",
                samples=in_ms,
            )
        )
        results.append(
            Result(
                NAME,
                f"idle Worker CPU over {idle:g} s, poll {poll_interval:g} s ({label})",
                max(cpus),
                "% of a core",
                note="worker process only (user + system), highest of the runs",
                samples=cpus,
            )
        )
    return results


def run(config: Config) -> list[Result]:
    return on_every_database(config, "latency", _cases)
