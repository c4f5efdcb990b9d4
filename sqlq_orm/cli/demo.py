"""``sqlq demo``: a few hundred jobs, real worker processes, real crashes, one report.

On a fresh SQLite file migrated with the packaged Alembic migrations, the demo enqueues
jobs of several kinds (fast, slow, failing with classified errors, one with a bug, and
one poison job that kills its worker every time), starts worker processes
(``python -m sqlq_orm worker``) under a small supervisor that restarts any that die,
SIGKILLs one of them in the middle of a job, and lets the workers' own sweepers bring
that job back. Leases are 3 s so recovery is quick. It ends with counts, failures by
error code, and the timelines of the recovered job and the poison job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sqlalchemy import func, select

from sqlq_orm.cli import demo_handlers as tasks
from sqlq_orm.cli.connect import CommandError, migrate_schema, open_engine, shown_url
from sqlq_orm.db.engine import require_shared_database
from sqlq_orm.ops import render as report
from sqlq_orm.ops.stats import collect_stats
from sqlq_orm.ops.timeline import job_timeline
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import JobSpec
from sqlq_orm.schema.states import ACTIVE, JobStatus

DEMO_HANDLERS = "sqlq_orm.cli.demo_handlers:registry"
DEMO_WORKER_ARGS = (
    "--lease", "3", "--heartbeat", "1", "--poll", "0.2",
    "--sweep-interval", "1-2", "--retry-base", "1", "--grace", "3",
)  # fmt: skip
"""Short leases and frequent sweeps, so a lost worker's jobs come back within seconds."""
MEDIA_QUEUE = "media"
"""The poison job's queue, served by a worker of its own whose process pool runs each job in
a child: a job that crashes takes down only its child, never the worker."""


def demo_slots(workers: int) -> dict[str, list[str]]:
    """``workers`` general workers (4 jobs at a time) and one worker for the media queue."""
    slots = {f"w{n}": [*DEMO_WORKER_ARGS, "--concurrency", "4"] for n in range(1, workers + 1)}
    slots[MEDIA_QUEUE] = [
        *DEMO_WORKER_ARGS, "--queue", MEDIA_QUEUE, "--concurrency", "1", "--pool", "process",
    ]  # fmt: skip
    return slots


TIME_LIMIT = 55.0
"""The demo stops waiting for jobs after this many seconds and reports what it has."""


# -------------------------------------------------------------------- supervisor


@dataclass(frozen=True)
class Death:
    """A worker process that exited without being asked to."""

    worker_id: str
    pid: int
    returncode: int

    @property
    def cause(self) -> str:
        if self.returncode < 0:
            return signal.Signals(-self.returncode).name
        return f"exit status {self.returncode}"


class WorkerPool:
    """Keeps one worker process per named slot running, restarting any that die.

    ``slots`` maps a slot name to that slot's extra ``sqlq worker`` arguments. Worker
    ids are ``<slot>.<generation>``: ``w2.3`` is the third process in slot ``w2``.
    Each process logs to ``<log_dir>/<worker id>.log``.
    """

    def __init__(
        self,
        db_url: str,
        handlers: str,
        slots: Mapping[str, Sequence[str]],
        *,
        log_dir: Path,
    ) -> None:
        self.db_url = db_url
        self.handlers = handlers
        self.slot_args = {name: list(args) for name, args in slots.items()}
        self.log_dir = Path(log_dir)
        self.slots: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
        self.generations: dict[str, int] = {}
        self.deaths: list[Death] = []

    def _spawn(self, slot: str) -> tuple[str, subprocess.Popen[bytes]]:
        generation = self.generations.get(slot, 0) + 1
        self.generations[slot] = generation
        worker_id = f"{slot}.{generation}"
        command = [
            sys.executable, "-m", "sqlq_orm", "--db", self.db_url, "worker",
            "--handlers", self.handlers, "--worker-id", worker_id, *self.slot_args[slot],
        ]  # fmt: skip
        with open(self.log_dir / f"{worker_id}.log", "wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=_child_env()
            )
        self.slots[slot] = (worker_id, process)
        return worker_id, process

    def start(self) -> list[tuple[str, int]]:
        """Start every slot's first process; return (worker id, pid) pairs."""
        started = [self._spawn(slot) for slot in self.slot_args]
        return [(worker_id, process.pid) for worker_id, process in started]

    def restart_dead(self) -> list[tuple[Death, str]]:
        """Restart processes that exited; return each death with its replacement's id."""
        restarted = []
        for slot, (worker_id, process) in list(self.slots.items()):
            code = process.poll()
            if code is None:
                continue
            death = Death(worker_id, process.pid, code)
            self.deaths.append(death)
            replacement, _ = self._spawn(slot)
            restarted.append((death, replacement))
        return restarted

    def pid_of(self, worker_id: str) -> int | None:
        for current_id, process in self.slots.values():
            if current_id == worker_id and process.poll() is None:
                return process.pid
        return None

    def kill(self, worker_id: str) -> int | None:
        """SIGKILL a worker by id; return its pid (None if it is not running)."""
        pid = self.pid_of(worker_id)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self, grace: float) -> None:
        """SIGTERM every worker, wait up to ``grace`` (+ a little), then SIGKILL the rest."""
        processes = [process for _, process in self.slots.values()]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace + 5
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _child_env() -> dict[str, str]:
    """This process's environment, with this copy of sqlq_orm importable first."""
    package_parent = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": package_parent + (os.pathsep + path if path else "")}


# ------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class DemoJobs:
    """The ids the report looks at."""

    victim: int
    poison: int
    total: int


def job_specs(count: int) -> list[JobSpec]:
    """The demo's mix of jobs after the victim and the poison job, deterministically:
    calls of its tasks, each checked against the task's signature."""
    specs = []
    for n in range(count):
        if n % 25 == 3:
            specs.append(tasks.generate_report.spec(steps=10 + n % 5))
        elif n % 13 == 5:
            specs.append(tasks.charge_card.spec(order=1000 + n, declined=n % 2 == 1))
        elif n % 20 == 7:
            specs.append(tasks.sync_inventory.spec(warehouse=n % 4))
        elif n % 50 == 11:
            specs.append(tasks.import_csv.spec(f"upload-{n}.csv"))
        else:
            specs.append(tasks.resize_image.spec(f"photo-{n}.jpg", ms=5 + n % 25))
    return specs


def enqueue_demo_jobs(queue: Queue, count: int) -> DemoJobs:
    tasks.registry.bind(queue)
    # The victim goes first, with priority (the task's), so the story starts at once.
    victim = tasks.export_archive.enqueue(seconds=2.0).id
    poison = tasks.render_video.options(queue=MEDIA_QUEUE).enqueue("holiday.mov").id
    rest = queue.enqueue_many(job_specs(max(0, count - 2)))
    return DemoJobs(victim=victim, poison=poison, total=2 + len(rest))


# ----------------------------------------------------------------------- report


def failed_attempts_by_code(queue: Queue) -> list[tuple[str, int]]:
    """Failed attempts (including ones retried later) by error code, most frequent first."""
    attempt = queue.models.attempt
    with queue.session() as session:
        rows = session.execute(
            select(attempt.error_code, func.count())
            .where(attempt.status == "FAILED")
            .group_by(attempt.error_code)
            .order_by(func.count().desc(), attempt.error_code)
        ).all()
    return [(code, int(n)) for code, n in rows]


def recovered_count(queue: Queue) -> int:
    event = queue.models.event
    with queue.session() as session:
        return int(
            session.scalar(
                select(func.count(func.distinct(event.job_id))).where(event.event == "RECOVERED")
            )
            or 0
        )


class _Narrator:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str = "") -> None:
        self.out.write(f"[{self.elapsed():5.1f}s] {text}\n" if text else "\n")
        self.out.flush()

    def section(self, title: str, body: str) -> None:
        self.out.write(f"\n== {title}\n{body}\n")
        self.out.flush()


def _progress(counts: dict[str, int]) -> str:
    shown = [
        f"{counts.get(s.value, 0)} {s.value.lower()}" for s in JobStatus if counts.get(s.value)
    ]
    return ", ".join(shown) or "no jobs"


def run_demo(
    *,
    db: str | None = None,
    path: str | os.PathLike[str] | None = None,
    jobs: int = 300,
    workers: int = 3,
    out: TextIO | None = None,
) -> int:
    """Run the demo; print its story and report to ``out``; return 0 if it all happened.

    On a fresh SQLite file in ``path``, or on the database ``db`` (any supported
    database; migrated first), whose queue must then be empty: the report counts
    every job in it.
    """
    out = out or sys.stdout
    say = _Narrator(out)
    if jobs < 2 or workers < 1:
        raise ValueError(f"the demo needs at least 2 jobs and 1 worker, got {jobs} and {workers}")
    directory = Path(path) if path else Path(tempfile.mkdtemp(prefix="sqlq-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    if db is None:
        db_file = directory / "demo.db"
        for stale in (db_file, Path(f"{db_file}-wal"), Path(f"{db_file}-shm")):
            stale.unlink(missing_ok=True)
        url = f"sqlite:///{db_file}"
        where = f"fresh SQLite database {db_file}"
    else:
        url = db
        where = f"database {shown_url(url)}"
    engine = open_engine(url)
    require_shared_database(engine, "the demo's worker processes")
    migrated = migrate_schema(engine)
    queue = Queue(engine)
    already = sum(queue.counts_by_status().values())
    if already:
        raise CommandError(
            f"the demo needs an empty queue, but {shown_url(url)} holds {already} job(s); "
            "give it a database of its own (or leave out --db for a SQLite file)"
        )

    say.say(f"{where}: {migrated}")
    pool = WorkerPool(url, DEMO_HANDLERS, demo_slots(workers), log_dir=directory)
    started = pool.start()
    say.say(
        "started workers "
        + ", ".join(f"{w} (pid {p})" for w, p in started)
        + f" [lease 3s; {MEDIA_QUEUE} serves only the {MEDIA_QUEUE} queue, in a process pool]"
    )
    plan = enqueue_demo_jobs(queue, jobs)
    say.say(
        f"enqueued {plan.total} jobs: fast, slow, failing, buggy, job {plan.victim} "
        f"(export_archive, its worker will be killed mid-run) and job {plan.poison} "
        f"(render_video on the {MEDIA_QUEUE} queue: poison, it kills whatever process runs it)"
    )
    killed: tuple[str, int] | None = None
    seen_running_at: float | None = None
    next_progress = say.elapsed() + 3
    try:
        while say.elapsed() < TIME_LIMIT:
            for death, replacement in pool.restart_dead():
                blame = " (the demo did that)" if killed and death.worker_id == killed[0] else ""
                say.say(
                    f"worker {death.worker_id} (pid {death.pid}) died: {death.cause}{blame}; "
                    f"supervisor started {replacement}"
                )
            victim = queue.get_job(plan.victim)
            if killed is None and victim.status == JobStatus.RUNNING.value:
                seen_running_at = seen_running_at or time.monotonic()
                if time.monotonic() - seen_running_at >= 0.8 and victim.claimed_by:
                    pid = pool.kill(victim.claimed_by)
                    if pid is not None:
                        killed = (victim.claimed_by, pid)
                        say.say(
                            f"SIGKILL -> worker {victim.claimed_by} (pid {pid}) in the middle of "
                            f"job {plan.victim} (export_archive); its lease will lapse in ≤3s"
                        )
            counts = queue.counts_by_status()
            if say.elapsed() >= next_progress:
                say.say(f"progress: {_progress(counts)}")
                next_progress = say.elapsed() + 3
            if killed and not any(counts.get(s.value) for s in ACTIVE):
                break
            time.sleep(0.2)
        else:
            say.say(f"time limit of {TIME_LIMIT:.0f}s reached; reporting what happened so far")
    finally:
        say.say("stopping workers (SIGTERM: finish or release, then deregister)")
        pool.stop(grace=3)

    counts = queue.counts_by_status()
    stats = collect_stats(queue, top_n=10)
    say.section(
        "Jobs by status",
        report.table(
            ("STATUS", "JOBS"), [*counts.items(), ("total", sum(counts.values()))], right=(1,)
        ),
    )
    say.section(
        "Failures by error code",
        report.table(
            ("ERROR CODE", "FAILED JOBS", "RETRYING"),
            [(e.error_code, e.failed, e.retrying) for e in stats.errors],
            right=(1, 2),
        )
        + "\n\n  failed attempts, including the ones retried later:\n"
        + report.table(("ERROR CODE", "ATTEMPTS"), failed_attempts_by_code(queue), right=(1,)),
    )
    victim = queue.get_job(plan.victim)
    say.section(
        f"Job {victim.id} ({victim.type}): its worker was SIGKILLed mid-run; the sweeper "
        f"recovered it (now {victim.status})",
        report.render_timeline_text(job_timeline(queue, victim.id)),
    )
    poison = queue.get_job(plan.poison)
    poison_view = report.render_timeline_text(job_timeline(queue, poison.id))
    say.section(
        f"Job {poison.id} ({poison.type}): the poison job crashed {poison.attempt_count} "
        f"child process(es) of the {MEDIA_QUEUE} worker's process pool, no worker, and ended "
        f"{poison.status} ({poison.error_code})",
        poison_view.split("\n\ntimeline")[0],  # its attempts say it all
    )
    recovered = recovered_count(queue)
    poison_deaths = sum(1 for d in pool.deaths if d.worker_id.startswith(MEDIA_QUEUE))
    deaths = ", ".join(f"{d.worker_id} ({d.cause})" for d in pool.deaths) or "none"
    say.section(
        "Summary",
        f"  worker processes lost: {len(pool.deaths)} [{deaths}], each replaced by the supervisor\n"
        f"  jobs recovered by the sweepers after a lost lease: {recovered}\n"
        f"  workers lost to the poison job: {poison_deaths} (its {poison.attempt_count} "
        f"crash(es) ended only children of the {MEDIA_QUEUE} worker's process pool)\n"
        f"  nothing left behind: {counts.get('RUNNING', 0)} running, "
        f"{counts.get('CLAIMED', 0)} claimed\n"
        f"  database and worker logs: {directory}\n"
        f"  look closer: sqlq --db {url} show {victim.id}\n"
        f"  or in a browser: sqlq --db {url} dashboard",
    )
    say.say(f"demo finished in {say.elapsed():.1f}s")
    engine.dispose()
    recovered_and_done = victim.status == JobStatus.SUCCEEDED.value and recovered >= 1
    poison_failed = poison.status == JobStatus.FAILED.value
    return 0 if recovered_and_done and poison_failed else 1
