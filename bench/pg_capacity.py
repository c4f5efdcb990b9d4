"""Capacity on PostgreSQL: 1, 2 and 4 worker processes draining the same backlog, and
what each job costs the server's CPU.

For each process count (interleaved, ``--repeats`` rounds, on a throw-away database
emptied between runs): ``--jobs`` no-op jobs are enqueued (not timed), then P spawned
processes each run ``Worker(concurrency=--concurrency, burst=True)`` until nothing is
left; the clock runs from "go" to the last report. Every job must end SUCCEEDED with its
full history (four events, as the timeline reads them).

Server CPU: while the workers run, the parent samples every 0.1 s which server
backends serve this database (``pg_stat_activity``) and reads their CPU time (utime +
stime in ``/proc/<pid>/stat``; the server must run on this machine). A backend's last
sample counts whole (it was forked for the run); what a backend spends after its last
sample (< 0.1 s before it exits) is missed, so the figure is a slight underestimate.
pg_stat_statements would give per-statement times but must be preloaded (a server
restart); this needs nothing.

    nice -n 5 .venv/bin/python -m bench.pg_capacity \\
        --pg postgresql+psycopg://postgres@127.0.0.1:5432/test --jobs 4000 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
from typing import Any

import sqlalchemy

import sqlq_orm
from bench.core import count_events, count_rows, postgres_database, run_children
from sqlq_orm.schema.models import Base

TICKS = os.sysconf("SC_CLK_TCK")
SETTLE = 8.0
"""Seconds between starting the worker processes and "go": spawned children import
sqlq_orm and connect first (slow on a loaded machine), which must not be timed."""


def _noop(context: Any) -> None:
    return None


def _worker_process(url: str, index: int, concurrency: int, go: Any, out: Any) -> None:
    from sqlq_orm.worker.runtime import Worker

    engine = sqlq_orm.create_engine(url)
    worker = Worker(
        sqlq_orm.Queue(engine),
        {"noop": _noop},
        concurrency=concurrency,
        poll_interval=0.05,
        sweep_interval=None,
        burst=True,
        install_signal_handlers=False,
        run_schedules=False,
        worker_id=f"bench-capacity-{index}",
    )
    go.wait()
    stats = worker.run()
    engine.dispose()
    out.put(stats.succeeded)


def _cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


class BackendCpu:
    """Samples the CPU time of the server backends serving one database."""

    def __init__(self, admin: sqlalchemy.Engine, database: str) -> None:
        self.admin = admin
        self.database = database
        self.seen: dict[int, int] = {}
        self.before: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> list[int]:
        with self.admin.connect() as connection:
            return list(
                connection.execute(
                    sqlalchemy.text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = :d "
                        "AND pid <> pg_backend_pid()"
                    ),
                    {"d": self.database},
                ).scalars()
            )

    def _sample(self) -> None:
        for pid in self._pids():
            ticks = _cpu_ticks(pid)
            if ticks is not None:
                self.seen[pid] = max(ticks, self.seen.get(pid, 0))

    def start(self) -> None:
        # Backends already there (none expected) count from here.
        for pid in self._pids():
            self.before[pid] = _cpu_ticks(pid) or 0
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def stop(self) -> float:
        """Seconds of server CPU spent by the database's backends since :meth:`start`."""
        self._stop.set()
        self._thread.join()
        total = sum(ticks - self.before.get(pid, 0) for pid, ticks in self.seen.items())
        return total / TICKS


def _reset(url: str, jobs: int) -> None:
    engine = sqlq_orm.create_engine(url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    queue = sqlq_orm.Queue(engine)
    for start in range(0, jobs, 1000):
        queue.enqueue_many(
            [{"type": "noop", "payload": {"n": n}} for n in range(start, min(jobs, start + 1000))]
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("VACUUM ANALYZE sqlq_jobs")
    engine.dispose()


def drain(
    url: str, admin: sqlalchemy.Engine, processes: int, concurrency: int, jobs: int
) -> tuple[float, float]:
    """Drain ``jobs`` with ``processes`` worker processes: (jobs/s, server CPU ms per job)."""
    _reset(url, jobs)
    database = sqlalchemy.make_url(url).database or ""
    cpu = BackendCpu(admin, database)
    cpu.start()
    elapsed, reports, _ = run_children(
        _worker_process, [(url, i, concurrency) for i in range(processes)], SETTLE
    )
    server_seconds = cpu.stop()
    engine = sqlq_orm.create_engine(url)
    succeeded = count_rows(engine, "sqlq_jobs", "status = 'SUCCEEDED'")
    events = count_events(engine)
    engine.dispose()
    if not (sum(reports) == succeeded == jobs and events == 4 * jobs):
        raise AssertionError(f"drain: done={sum(reports)} succeeded={succeeded} events={events}")
    return jobs / elapsed, 1000 * server_seconds / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", required=True, help="admin URL of the PostgreSQL server")
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=4, help="threads per worker process")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    counts = [int(p) for p in args.processes.split(",")]
    results: dict[int, list[tuple[float, float]]] = {p: [] for p in counts}
    with postgres_database(args.pg) as url:
        admin = sqlalchemy.create_engine(url)
        for round_ in range(args.repeats):
            for processes in counts:
                rate, cpu_ms = drain(url, admin, processes, args.concurrency, args.jobs)
                results[processes].append((rate, cpu_ms))
                print(
                    f"round {round_ + 1} processes {processes}: {rate:7.0f} jobs/s, "
                    f"server CPU {cpu_ms:.3f} ms/job",
                    flush=True,
                )
        admin.dispose()
    base = statistics.median(rate for rate, _ in results[counts[0]])
    print(f"\n{args.jobs} jobs, {args.concurrency} threads per process, medians of {args.repeats}:")
    print("processes  jobs/s  vs first  server CPU ms/job")
    for processes in counts:
        rate = statistics.median(r for r, _ in results[processes])
        cpu_ms = statistics.median(c for _, c in results[processes])
        print(f"{processes:9d} {rate:7.0f} {rate / base:8.2f}x {cpu_ms:18.3f}")


if __name__ == "__main__":
    main()
