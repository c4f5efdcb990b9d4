"""The task layer's cost (issue 24), side by side in one run, on SQLite and PostgreSQL.

``python -m bench.task_overhead [--pg URL] [--jobs N] [--rounds R]``:

- **enqueue**: ``send_email.enqueue(to=..., subject=...)`` against
  ``queue.enqueue("send_email", {"to": ..., "subject": ...})`` of the same job, N jobs
  per round, one transaction each (jobs per second, median of the rounds);
- **drain**: a burst ``Worker`` running N task jobs (the task function gets its typed
  arguments) against N plain-handler jobs (``ctx.payload[...]``), concurrency 1
  (jobs per second, median);
- **wait**: ``queue.wait(job_id)`` for a job a running worker picks up, from the
  enqueue to the return (milliseconds, p50 and p90).

Rounds alternate A,B / B,A (``bench.core.side_by_side``); ratios are task / raw.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlq_orm
from bench.core import create_schema, median, percentile, postgres_database, reset_postgres

SUBJECT = "Your receipt"
SINK: list[object] = []


def build(engine: sqlq_orm.Engine) -> tuple[sqlq_orm.Queue, sqlq_orm.TaskRegistry, sqlq_orm.Task]:  # type: ignore[name-defined,type-arg]
    queue = sqlq_orm.Queue(engine)
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(name="bench.send_email_task")
    def send_email(to: str, subject: str = "Hello") -> None:
        SINK.append(to)

    def send_email_handler(ctx: sqlq_orm.JobContext) -> None:
        SINK.append(ctx.payload["to"])

    registry.register("bench.send_email_raw", send_email_handler)
    return queue, registry, send_email


def truncate(queue: sqlq_orm.Queue) -> None:
    models = queue.models
    with queue.engine.begin() as connection:
        for model in (models.event, models.attempt, models.job):
            connection.execute(model.__table__.delete())


CPU: dict[str, list[float]] = {}
"""This process's CPU seconds per run, by label: on a loaded machine (and a database
server's fsyncs in the wall time) the CPU cost is the steadier measure of overhead."""


def rate(action: Callable[[], None], jobs: int, label: str = "") -> float:
    started, cpu = time.perf_counter(), time.process_time()
    action()
    if label:
        CPU.setdefault(label, []).append(time.process_time() - cpu)
    return jobs / (time.perf_counter() - started)


def enqueue_runs(queue, send_email, jobs: int) -> dict[str, Callable[[], float]]:  # type: ignore[no-untyped-def]
    def raw() -> float:
        truncate(queue)
        return rate(
            lambda: [
                queue.enqueue(
                    "bench.send_email_raw", {"to": f"u{i}@example.com", "subject": SUBJECT}
                )
                for i in range(jobs)
            ],
            jobs,
            "enqueue raw",
        )

    def task() -> float:
        truncate(queue)
        return rate(
            lambda: [
                send_email.enqueue(to=f"u{i}@example.com", subject=SUBJECT) for i in range(jobs)
            ],
            jobs,
            "enqueue task",
        )

    return {"raw": raw, "task": task}


def drain_runs(queue, registry, send_email, jobs: int) -> dict[str, Callable[[], float]]:  # type: ignore[no-untyped-def]
    def drain() -> None:
        sqlq_orm.Worker(
            queue, registry, burst=True, install_signal_handlers=False, sweep_interval=None,
            run_schedules=False,
        ).run()  # fmt: skip

    def raw() -> float:
        truncate(queue)
        queue.enqueue_many(
            [
                sqlq_orm.JobSpec("bench.send_email_raw", {"to": f"u{i}", "subject": SUBJECT})
                for i in range(jobs)
            ]
        )
        return rate(drain, jobs, "drain raw")

    def task() -> float:
        truncate(queue)
        send_email.enqueue_many([{"to": f"u{i}", "subject": SUBJECT} for i in range(jobs)])
        return rate(drain, jobs, "drain task")

    return {"raw": raw, "task": task}


def wait_latencies(queue, registry, send_email, count: int) -> list[float]:  # type: ignore[no-untyped-def]
    truncate(queue)
    worker = sqlq_orm.Worker(
        queue, registry, install_signal_handlers=False, sweep_interval=None,
        poll_interval=0.5, run_schedules=False,
    )  # fmt: skip
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        send_email.wait(send_email.enqueue(to="warm-up"), timeout=30)
        latencies = []
        for i in range(count):
            started = time.perf_counter()
            send_email.wait(send_email.enqueue(to=f"w{i}"), timeout=30)
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(0.02)  # the worker idles between jobs, as the target says
        return latencies
    finally:
        worker.request_stop(immediate=True)
        thread.join(30)


def side_by_side(runs: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for number in range(rounds):
        for name in names if number % 2 == 0 else names[::-1]:
            samples[name].append(runs[name]())
    return samples


def report(database: str, what: str, samples: dict[str, list[float]]) -> None:
    raw, task = median(samples["raw"]), median(samples["task"])
    cpu = ""
    if f"{what} raw" in CPU:
        cpu_raw, cpu_task = median(CPU.pop(f"{what} raw")), median(CPU.pop(f"{what} task"))
        cpu = f"   CPU ratio task/raw {cpu_task / cpu_raw:.3f}"
    print(
        f"{database:10} {what:8} raw {raw:9.0f} jobs/s   task {task:9.0f} jobs/s   "
        f"time ratio task/raw {raw / task:.3f}{cpu}"
    )


@contextmanager
def databases(pg: str | None) -> Iterator[list[tuple[str, sqlq_orm.Engine]]]:  # type: ignore[name-defined]
    with tempfile.TemporaryDirectory() as directory:
        engines = [("sqlite", create_schema(f"sqlite:///{Path(directory) / 'tasks.db'}"))]
        if pg is None:
            yield engines
            return
        with postgres_database(pg) as url:
            engines.append(("postgresql", reset_postgres(url)))
            yield engines
            for _, engine in engines:
                engine.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.task_overhead", description=__doc__)
    parser.add_argument("--pg", default=os.environ.get("SQLQ_BENCH_POSTGRES_URL"))
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--waits", type=int, default=50)
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    with databases(args.pg) as engines:
        for database, engine in engines:
            queue, registry, send_email = build(engine)
            report(
                database,
                "enqueue",
                side_by_side(enqueue_runs(queue, send_email, args.jobs), args.rounds),
            )
            report(
                database,
                "drain",
                side_by_side(drain_runs(queue, registry, send_email, args.jobs), args.rounds),
            )
            waits = wait_latencies(queue, registry, send_email, args.waits)
            p50, p90 = percentile(waits, 0.5), percentile(waits, 0.9)
            print(
                f"{database:10} wait     p50 {p50:6.1f} ms   p90 {p90:6.1f} ms  (enqueue to result)"
            )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
