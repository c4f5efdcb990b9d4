"""Chaos soak: worker processes drain jobs while a driver kills, freezes and restarts them.

Run it directly (``make chaos`` does, for ten minutes)::

    PYTHONPATH=. python -m tests.support.chaos --minutes 10            # SQLite file in a temp dir
    PYTHONPATH=. python -m tests.support.chaos --seconds 60 --seed 42  # replay a run
    PYTHONPATH=. python -m tests.support.chaos --db postgresql://postgres@127.0.0.1/chaos

or through :func:`run_soak` (``tests/worker/test_chaos.py`` runs a short one in the suite).

Worker processes (the real ``sqlq worker`` CLI, handlers from :data:`registry`) drain
a mix of quick, slow, flaky, fatal and poison jobs (poison ``os._exit()``\\ s its whole
worker). Meanwhile the driver, from a seeded RNG, SIGKILLs workers, SIGSTOPs them for
up to three leases and SIGCONTs them, SIGTERMs them, restarts the dead, and runs two
sweepers of its own beside the workers' in-process ones. Then it calms down, lets the
queue drain, and verifies:

- every job is terminal (nothing lost, nothing stuck) and every enqueued id is there;
- :func:`sqlq_orm.ops.invariants.check` finds nothing;
- no zombie write was accepted: each SUCCEEDED attempt is one whose handler run
  completed under that attempt on that worker (handlers log ``job attempt worker``
  when they complete), at most one attempt per job succeeded, and jobs that can never
  succeed (fatal, always-poison) did not.

Handler runs that completed without becoming the success are counted as
``unrecorded_finishes``, outcomes the workers refused to report (lease lost or
self-fenced) as ``outcomes_discarded``, extra runs of one job as ``duplicate_runs``
(the at-least-once part). The seed is printed first so any run can be replayed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import make_url, select
from sqlalchemy.exc import ArgumentError

import sqlq_orm
from sqlq_orm import JobError, RetryPolicy
from sqlq_orm.ops.invariants import check
from sqlq_orm.schema.models import Base
from sqlq_orm.worker.handlers import AsyncJobContext, HandlerRegistry, JobContext
from tests.support.backends import engine_for

ROOT = Path(__file__).resolve().parents[2]
LOG_ENV = "SQLQ_CHAOS_LOG"
JOB_TYPE = "chaos"
ASYNC_JOB_TYPE = "chaos_async"
LEASE_SECONDS = 3
RETRY_BASE = 1.0

# --------------------------------------------------------------------- the handlers

registry = HandlerRegistry()


def _record(ctx: JobContext) -> None:
    """Append ``job attempt worker`` to the shared log (one small O_APPEND write)."""
    line = f"{ctx.job_id} {ctx.attempt} {ctx.worker_id}\n".encode()
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@registry.handler(JOB_TYPE)
def chaos_job(ctx: JobContext) -> None:
    """Do what the payload's ``kind`` says; log the run if it completes."""
    payload = ctx.payload
    kind = payload["kind"]
    if kind == "poison" and ctx.attempt <= payload["poison_attempts"]:
        os._exit(137)  # the whole worker dies mid-job, like a segfault
    if kind == "fatal":
        raise JobError("CHAOS:FATAL", "this job can never succeed", retryable=False)
    if kind == "flaky" and ctx.attempt <= payload["fail_attempts"]:
        raise JobError("CHAOS:FLAKY", f"failing attempt {ctx.attempt} on purpose")
    # Slow jobs ignore should_stop on purpose: a frozen or busy handler that comes
    # back later believing it succeeded is exactly the zombie the fencing must stop.
    time.sleep(payload["seconds"])
    _record(ctx)


@registry.handler(ASYNC_JOB_TYPE)
async def chaos_async_job(ctx: AsyncJobContext) -> None:
    """The same as :func:`chaos_job`, as a task on the worker's event loop.

    A lost lease cancels the task; a frozen worker's tasks still come back believing
    they succeeded, the zombies the fencing must stop.
    """
    payload = ctx.payload
    kind = payload["kind"]
    if kind == "poison" and ctx.attempt <= payload["poison_attempts"]:
        os._exit(137)
    if kind == "fatal":
        raise JobError("CHAOS:FATAL", "this job can never succeed", retryable=False)
    if kind == "flaky" and ctx.attempt <= payload["fail_attempts"]:
        raise JobError("CHAOS:FLAKY", f"failing attempt {ctx.attempt} on purpose")
    await asyncio.sleep(payload["seconds"])
    _record(ctx)


def job_mix(rng: random.Random, count: int, async_share: float = 0.0) -> list[dict[str, Any]]:
    """``count`` job specs: mostly quick, some slow, flaky, fatal and poison; of them
    ``async_share`` (drawn per job) for the ``async def`` handler."""
    jobs = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.70:
            payload = {"kind": "quick", "seconds": rng.uniform(0, 0.02)}
            retries = 8
        elif roll < 0.80:
            payload = {"kind": "slow", "seconds": rng.uniform(0.3, 2.5)}
            retries = 8
        elif roll < 0.90:
            payload = {"kind": "flaky", "fail_attempts": rng.randint(1, 2), "seconds": 0.005}
            retries = 8
        elif roll < 0.99:
            payload = {"kind": "fatal"}
            retries = 8
        else:
            # Half recover on their second attempt; half poison every attempt they get.
            always = rng.random() < 0.5
            payload = {"kind": "poison", "poison_attempts": 99 if always else 1, "seconds": 0.005}
            retries = 1 if always else 8
        job_type = ASYNC_JOB_TYPE if async_share and rng.random() < async_share else JOB_TYPE
        jobs.append({"type": job_type, "payload": payload, "max_retries": retries})
    return jobs


def can_succeed(payload: dict[str, Any]) -> bool:
    return payload["kind"] not in ("fatal",) and not (
        payload["kind"] == "poison" and payload["poison_attempts"] > 50
    )


# ------------------------------------------------------------------------ the driver


@dataclass
class Settings:
    db_url: str
    seconds: float = 40.0
    """How long the chaos lasts (the drain afterwards is extra)."""
    jobs: int = 1500
    """Jobs enqueued at the start."""
    top_up: int = 0
    """With a long run: when fewer than half this many are unfinished, refill to it."""
    workers: int = 3
    concurrency: int = 4
    seed: int = 0
    drain_seconds: float = 240.0
    """How long the calm phase may take before unfinished jobs count as stuck."""
    workdir: Path | None = None
    verbose: bool = False
    async_share: float = 0.0
    """The share of jobs whose handler is ``async def`` (a mix of tasks and threads)."""


@dataclass
class Report:
    seed: int
    db: str
    seconds: float = 0.0
    jobs: int = 0
    succeeded: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    kills: int = 0
    stops: int = 0
    terms: int = 0
    restarts: int = 0
    worker_deaths_by_poison: int = 0
    swept_by_driver: int = 0
    handler_runs: int = 0
    duplicate_runs: int = 0
    unrecorded_finishes: int = 0
    """Handler runs that completed but did not become the success (killed before
    reporting, or the report was refused because the lease had moved on)."""
    outcomes_discarded: int = 0
    """Worker log lines saying an outcome was refused (LeaseLost) or self-fenced."""
    stuck: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.stuck

    def summary(self) -> str:
        failed = sum(self.failed.values())
        return (
            f"chaos seed={self.seed}: {self.jobs} jobs in {self.seconds:.0f}s "
            f"({self.succeeded} succeeded, {failed} failed {dict(self.failed)}, "
            f"{self.cancelled} cancelled); kills={self.kills} stops={self.stops} "
            f"terms={self.terms} restarts={self.restarts} "
            f"poison_deaths={self.worker_deaths_by_poison} swept_by_driver={self.swept_by_driver} "
            f"handler_runs={self.handler_runs} duplicate_runs={self.duplicate_runs} "
            f"unrecorded_finishes={self.unrecorded_finishes} "
            f"outcomes_discarded={self.outcomes_discarded} stuck={len(self.stuck)} "
            f"violations={len(self.violations)}"
        )


class WorkerProcess:
    """One ``sqlq worker`` child; restarted under a new generation id."""

    def __init__(self, slot: int, settings: Settings, log_path: Path, workdir: Path) -> None:
        self.slot = slot
        self.settings = settings
        self.log_path = log_path
        self.workdir = workdir
        self.generation = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = False

    def start(self) -> None:
        self.generation += 1
        worker_id = f"chaos-w{self.slot}-g{self.generation}"
        command = [
            sys.executable, "-m", "sqlq_orm", "--db", self.settings.db_url, "worker",
            "--handlers", "tests.support.chaos:registry", "--worker-id", worker_id,
            "--concurrency", str(self.settings.concurrency), "--lease", str(LEASE_SECONDS),
            "--heartbeat", str(LEASE_SECONDS / 4), "--poll", "0.05", "--grace", "1",
            "--sweep-interval", "1-3", "--retry-base", str(RETRY_BASE),
        ]  # fmt: skip
        path = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            LOG_ENV: str(self.log_path),
            "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else ""),
        }
        output = open(self.workdir / f"worker-{self.slot}.log", "ab")  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=ROOT
            )
        finally:
            output.close()
        self.stopped = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signum)

    def kill(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.kill()  # SIGKILL ends a stopped process too
            self.process.wait()
        self.stopped = False


class Sweeper(threading.Thread):
    """A sweeper beside the workers' own: random batch sizes, random pauses."""

    def __init__(self, db_url: str, rng: random.Random, stop: threading.Event) -> None:
        super().__init__(daemon=True, name="chaos-sweeper")
        self.engine = engine_for(db_url)
        self.queue = sqlq_orm.Queue(
            self.engine, retry_policy=RetryPolicy(base_seconds=RETRY_BASE, max_seconds=8)
        )
        self.rng = random.Random(rng.random())
        self.stop = stop
        self.recovered = 0
        self.errors = 0

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(0.2, 1.0)):
            try:
                result = self.queue.sweep(batch_size=self.rng.randint(1, 50), actor="chaos-sweeper")
            except Exception:  # noqa: BLE001 - a sweep may fail under a frozen writer; retry
                self.errors += 1
            else:
                self.recovered += result.total
        self.engine.dispose()


def _say(settings: Settings, message: str) -> None:
    if settings.verbose:
        print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_soak(settings: Settings) -> Report:
    """Run one soak as configured and return what was found (``report.ok`` when clean)."""
    rng = random.Random(settings.seed)
    report = Report(seed=settings.seed, db=_shown(settings.db_url))
    workdir = Path(settings.workdir or tempfile.mkdtemp(prefix="sqlq-chaos-"))
    log_path = workdir / "handler-runs.log"
    log_path.write_bytes(b"")
    engine = sqlq_orm.create_engine(settings.db_url)
    Base.metadata.create_all(engine)
    queue = sqlq_orm.Queue(engine, retry_policy=RetryPolicy(base_seconds=RETRY_BASE, max_seconds=8))
    payloads: dict[int, dict[str, Any]] = {}

    def enqueue(count: int) -> None:
        specs = job_mix(rng, count, settings.async_share)
        ids = queue.enqueue_many(specs)
        payloads.update({job_id: spec["payload"] for job_id, spec in zip(ids, specs, strict=True)})

    enqueue(settings.jobs)
    workers = [WorkerProcess(i, settings, log_path, workdir) for i in range(settings.workers)]
    for worker in workers:
        worker.start()
    stop_sweepers = threading.Event()
    sweepers = [Sweeper(settings.db_url, rng, stop_sweepers) for _ in range(2)]
    for sweeper in sweepers:
        sweeper.start()
    began = time.monotonic()
    resume_at: dict[int, float] = {}  # slot -> when to SIGCONT
    restart_at: dict[int, float] = {}  # slot -> when to start again
    try:
        chaos_until = began + settings.seconds
        last_note = began
        while time.monotonic() < chaos_until:
            now = time.monotonic()
            _tend(workers, report, resume_at, restart_at, now, rng)
            roll = rng.random()
            live = [w for w in workers if w.alive and not w.stopped and w.slot not in restart_at]
            if live and roll < 0.20:
                victim = rng.choice(live)
                victim.kill()
                report.kills += 1
                restart_at[victim.slot] = now + rng.uniform(0, 1.5)
            elif live and roll < 0.40:
                victim = rng.choice(live)
                victim.signal(signal.SIGSTOP)
                victim.stopped = True
                report.stops += 1
                resume_at[victim.slot] = now + rng.uniform(0.2, 3 * LEASE_SECONDS)
            elif live and roll < 0.45:
                victim = rng.choice(live)
                victim.signal(signal.SIGTERM)
                report.terms += 1
                restart_at[victim.slot] = now + rng.uniform(0.5, 2.0)
            if now - last_note > 10:
                unfinished = _unfinished(queue)
                if settings.top_up and unfinished < settings.top_up // 2:
                    enqueue(settings.top_up - unfinished)
                last_note = now
                _say(
                    settings,
                    f"{len(payloads)} jobs enqueued, {unfinished} unfinished; {_pace(report)}",
                )
            # One chaos action every ~0.9 s on average, spread over the workers: each
            # gets time to start, claim and finish work between hits.
            time.sleep(rng.uniform(0.3, 1.5))
        _say(settings, "chaos over; draining")
        _calm_and_drain(workers, report, resume_at, restart_at, queue, settings, rng)
    finally:
        stop_sweepers.set()
        for worker in workers:
            if worker.stopped:
                worker.signal(signal.SIGCONT)
            worker.signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for worker in workers:
            if worker.process is not None:
                try:
                    worker.process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    worker.kill()
        for sweeper in sweepers:
            sweeper.join(10)
    report.seconds = time.monotonic() - began
    report.swept_by_driver = sum(s.recovered for s in sweepers)
    _verify(queue, payloads, log_path, report)
    engine.dispose()
    return report


def _tend(
    workers: list[WorkerProcess],
    report: Report,
    resume_at: dict[int, float],
    restart_at: dict[int, float],
    now: float,
    rng: random.Random,
) -> None:
    """Resume frozen workers that are due, restart dead ones (killed, poisoned, ended)."""
    for worker in workers:
        if worker.slot in resume_at and now >= resume_at[worker.slot]:
            del resume_at[worker.slot]
            worker.signal(signal.SIGCONT)
            worker.stopped = False
        if worker.slot in restart_at:
            if now >= restart_at[worker.slot] and not worker.alive:
                del restart_at[worker.slot]
                worker.start()
                report.restarts += 1
            elif now >= restart_at[worker.slot] + 10 and worker.alive:
                worker.kill()  # a SIGTERMed worker that would not stop
        elif not worker.alive and worker.process is not None:
            if worker.process.returncode == 137:
                report.worker_deaths_by_poison += 1
            restart_at[worker.slot] = now + rng.uniform(0, 0.5)


def _pace(report: Report) -> str:
    return (
        f"kills={report.kills} stops={report.stops} terms={report.terms} "
        f"restarts={report.restarts} poison_deaths={report.worker_deaths_by_poison}"
    )


def _unfinished(queue: sqlq_orm.Queue) -> int:
    counts = queue.counts_by_status()
    return counts["QUEUED"] + counts["CLAIMED"] + counts["RUNNING"]


def _calm_and_drain(
    workers: list[WorkerProcess],
    report: Report,
    resume_at: dict[int, float],
    restart_at: dict[int, float],
    queue: sqlq_orm.Queue,
    settings: Settings,
    rng: random.Random,
) -> None:
    for worker in workers:
        if worker.stopped:
            worker.signal(signal.SIGCONT)
            worker.stopped = False
    resume_at.clear()
    deadline = time.monotonic() + settings.drain_seconds
    while time.monotonic() < deadline:
        _tend(workers, report, resume_at, restart_at, time.monotonic(), rng)
        if _unfinished(queue) == 0:
            return
        time.sleep(0.25)


def _verify(
    queue: sqlq_orm.Queue, payloads: dict[int, dict[str, Any]], log_path: Path, report: Report
) -> None:
    jobs, attempts = queue.tables.jobs.c, queue.tables.attempts.c
    with queue.read() as connection:
        rows = connection.execute(select(jobs.id, jobs.status, jobs.error_code)).all()
        successes = connection.execute(
            select(attempts.job_id, attempts.attempt, attempts.worker_id).where(
                attempts.status == "SUCCEEDED"
            )
        ).all()
    runs = [tuple(line.split()) for line in log_path.read_text().splitlines() if line.strip()]
    completed = {(int(job), int(attempt), worker) for job, attempt, worker in runs}
    report.jobs = len(rows)
    report.handler_runs = len(runs)
    report.duplicate_runs = len(runs) - len({job for job, _, _ in runs})

    found_ids = {row.id for row in rows}
    if found_ids != set(payloads):
        missing = sorted(set(payloads) - found_ids)[:10]
        extra = sorted(found_ids - set(payloads))[:10]
        report.violations.append(f"jobs not accounted for: missing {missing}, unexpected {extra}")
    failed: Counter[str] = Counter()
    for row in rows:
        if row.status == "SUCCEEDED":
            report.succeeded += 1
            if not can_succeed(payloads.get(row.id, {"kind": "?"})):
                report.violations.append(f"job {row.id} ({payloads[row.id]}) must never succeed")
        elif row.status == "FAILED":
            failed[row.error_code or "?"] += 1
        elif row.status == "CANCELLED":
            report.cancelled += 1
        else:
            report.stuck.append(row.id)
    report.failed = dict(sorted(failed.items()))
    succeeded_attempts = set()
    for job_id, attempt, worker in successes:
        succeeded_attempts.add((job_id, attempt))
        if (job_id, attempt, worker) not in completed:
            report.violations.append(
                f"job {job_id} attempt {attempt} is SUCCEEDED by {worker}, but no handler run "
                "of that attempt on that worker completed (an outcome was written for a run "
                "that never finished)"
            )
    report.unrecorded_finishes = sum(
        1 for job, attempt, _ in completed if (job, attempt) not in succeeded_attempts
    )
    report.outcomes_discarded = sum(
        log.read_text(errors="replace").count("outcome discarded")
        for log in log_path.parent.glob("worker-*.log")
    )
    report.violations.extend(str(v) for v in check(queue))


def _shown(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "?"


# --------------------------------------------------------------------------- the CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.chaos", description=__doc__.split("\n")[0]
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long the chaos lasts")
    length.add_argument("--seconds", type=float, help="how long the chaos lasts (default 60)")
    parser.add_argument("--seed", type=int, help="RNG seed (default: random, printed)")
    parser.add_argument("--db", help="database URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs enqueued at the start")
    parser.add_argument(
        "--top-up", type=int, help="refill to this many unfinished when half are done (--jobs)"
    )
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs per worker (default 4)")
    parser.add_argument(
        "--async-share", type=float, default=0.0,
        help="share of jobs with an async def handler (default 0: all on threads)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds through run_soak's cleanup: workers are stopped

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    seconds = args.minutes * 60 if args.minutes else args.seconds or 60.0
    workdir = Path(tempfile.mkdtemp(prefix="sqlq-chaos-"))
    db_url = args.db or f"sqlite:///{workdir / 'chaos.db'}"
    print(
        f"chaos: seed={seed} seconds={seconds:.0f} db={_shown(db_url)} logs={workdir}", flush=True
    )
    report = run_soak(
        Settings(
            db_url=db_url,
            seconds=seconds,
            jobs=args.jobs,
            top_up=args.jobs if args.top_up is None else args.top_up,
            workers=args.workers,
            concurrency=args.concurrency,
            seed=seed,
            workdir=workdir,
            verbose=True,
            async_share=args.async_share,
        )
    )
    print(json.dumps(asdict(report), indent=2) if args.json else report.summary(), flush=True)
    for line in report.violations[:50]:
        print(f"VIOLATION: {line}", flush=True)
    if report.stuck:
        print(f"STUCK (not terminal after the drain): {report.stuck[:50]}", flush=True)
    replay = f"python -m tests.support.chaos --seed {seed} --seconds {seconds:.0f}"
    print(f"replay with: {replay}", flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
