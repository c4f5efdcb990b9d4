"""Spinning jobs in the thread pool (issue 35, item 5): do they slow everyone else down?

``python -m bench.spin_threads [--jobs 400] [--spinners 2] [--max-runtime 2]
[--concurrency 4] [--work-ms 5] [--rounds 3]``

Each run is its own process on a fresh SQLite file: a burst ``Worker`` (thread pool,
``--concurrency`` threads) drains ``--jobs`` CPU-light jobs (each ``--work-ms`` of
Python arithmetic), **without** and **with** ``--spinners`` jobs that spin in pure
Python (``while True``, never looking at their context) and have a max runtime of
``--max-runtime`` seconds, enqueued first so that they hold threads from the start.
The figure is the wall time of the whole run (worker start to its burst exit), with /
without, runs alternating (target: ≤ 2.0). After the run the process counts the
threads still alive: a spinner the worker could not stop is still spinning then.

Before issue 35 a spinner past its max runtime was abandoned but kept its thread and
the GIL: the CPU-light jobs then took 3.8× to 17× as long. Now the spinner's thread gets
:class:`~sqlq_orm.errors.MaxRuntimeInterrupt` raised inside it at its deadline
(:mod:`sqlq_orm.worker.interrupt`) and returns.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.core import create_schema, median, sqlite_url


def light(ctx: object, work_ms: float) -> None:
    """About ``work_ms`` of pure-Python CPU work."""
    end = time.perf_counter() + work_ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += sum(range(100))


def spin(ctx: object) -> None:
    """Spins until stopped from outside; never checks its context."""
    n = 0
    while True:
        n += 1


def one_run(args: argparse.Namespace, spinners: int) -> dict[str, float]:
    """One drain in this process: seconds from the worker's start to its exit."""
    import sqlq_orm

    with tempfile.TemporaryDirectory(prefix="sqlq-spin-") as tmp:
        engine = create_schema(sqlite_url(Path(tmp) / "spin.db"))
        queue = sqlq_orm.Queue(engine)
        for _ in range(spinners):
            queue.enqueue("spin", max_runtime_seconds=args.max_runtime, max_retries=0, priority=1)
        queue.enqueue_many([{"type": "light"}] * args.jobs)
        registry = sqlq_orm.HandlerRegistry(
            {"spin": spin, "light": lambda ctx: light(ctx, args.work_ms)}
        )
        worker = sqlq_orm.Worker(
            queue,
            registry,
            concurrency=args.concurrency,
            burst=True,
            poll_interval=0.05,
            install_signal_handlers=False,
        )
        began = time.perf_counter()
        stats = worker.run()
        elapsed = time.perf_counter() - began
        time.sleep(1.5)  # past the interrupt's 1 s grace: a stopped spinner has returned
        alive = sum(1 for t in threading.enumerate() if t.name.startswith("sqlq-handler"))
        engine.dispose()
    return {"seconds": elapsed, "succeeded": stats.succeeded, "handler_threads_left": alive}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spin_threads", description=__doc__)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--spinners", type=int, default=2)
    parser.add_argument("--max-runtime", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--work-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", choices=("with", "without"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        result = one_run(args, args.spinners if args.one == "with" else 0)
        print(json.dumps(result))
        os._exit(0)  # a spinner nobody stopped must not hold the process at exit
    passed = list(argv if argv is not None else sys.argv[1:])
    samples: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for round_ in range(args.rounds):
        order = ("without", "with") if round_ % 2 == 0 else ("with", "without")
        for side in order:
            out = subprocess.run(
                [sys.executable, "-m", "bench.spin_threads", *passed, "--one", side],
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            samples[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    without = median([s["seconds"] for s in samples["without"]])
    with_ = median([s["seconds"] for s in samples["with"]])
    print(
        f"{args.jobs} jobs of {args.work_ms:g} ms, concurrency {args.concurrency}, "
        f"{args.spinners} spinners past a {args.max_runtime}s max runtime, "
        f"{args.rounds} rounds (load {os.getloadavg()[0]:.1f})"
    )
    for side in ("without", "with"):
        runs = ", ".join(f"{s['seconds']:.2f}" for s in samples[side])
        left = max(s["handler_threads_left"] for s in samples[side])
        print(f"  {side:>7} spinners: {runs} s; handler threads alive after: {left}")
    print(f"  ratio with / without (medians): {with_ / without:.2f} (target <= 2.0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
