"""Bench "pools": the process pool against the thread pool and its peers (issue 35).

Every worker here is a real ``sqlq worker`` process (``--burst``, concurrency 4 unless
said) on a fresh SQLite file, handlers from ``bench/pool_handlers.py``:

- **throughput**: no-op jobs drained by the process pool, the thread pool, Celery's
  prefork pool (Redis broker at ``$SQLQ_BENCH_REDIS``, default 127.0.0.1:6379) and
  huey's process consumer (``-k process``, SQLite storage), same concurrency, side by
  side. Each no-op adds one to a Redis counter; the rate is taken between the first
  and the last increment, so no side's start-up counts;
- **crash**: 80 short jobs and one segfault (``ctypes.string_at(0)``): the worker's exit
  status, first-attempt successes, and how the crasher ended (process and thread pool);
- **spin**: 400 CPU-light jobs (40 ms waits) with and without 2 pure-Python spinners
  past a 2 s max runtime: the run's time ratio, and whether any process of the worker
  outlived it (its session is scanned after it exits);
- **memory**: a 300 MB job among 20 short ones under ``--max-memory-per-child 200``;
- **cpu**: CPU-bound jobs on 2 children against 1;
- **start**: what starting one child costs: ``os.fork`` (what the pool does) against a
  ``multiprocessing`` fork server and spawn.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

import sqlalchemy

import sqlq_orm
from bench.core import Config, Result, fresh_sqlite, side_by_side, sqlite_url
from bench.worker_drain import drain_with_worker, enqueue_noops

NAME = "pools"
CONCURRENCY = 4
ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("SQLQ_BENCH_REDIS", "redis://127.0.0.1:6379/0")
LIMIT = 300.0  # no run waits longer than this


def _env(**extra: str) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else ""), **extra}


def _worker(url: str, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "sqlq_orm", "--db", url, "worker",
        "--handlers", "bench.pool_handlers:registry", "--poll", "0.05", "--no-sweep",
        "--burst", *args,
    ]  # fmt: skip


def _session_left(session: int) -> list[int]:
    """Processes still alive in the session ``session`` leads (none once all are gone)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            left.append(int(stat.parent.name))
    return left


def _run_worker(url: str, *args: str) -> tuple[float, int, list[int], str]:
    """Run a burst worker; return (seconds, exit status, processes left behind, log)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        _worker(url, *args), env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    _, log = process.communicate(timeout=LIMIT)
    elapsed = time.perf_counter() - started
    time.sleep(0.2)
    # start_new_session: the worker led a session of its own, named by its pid.
    left = _session_left(process.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return elapsed, process.returncode, left, log.decode(errors="replace")


# ------------------------------------------------------------------ throughput


def _redis() -> Any:
    import redis

    return redis.Redis.from_url(REDIS_URL)


def _rate(key: str, jobs: int, process: subprocess.Popen[bytes]) -> float:
    """Jobs per second between the first and the last increment of ``key``."""
    r = _redis()
    first = None
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        done = int(r.get(key) or 0)
        now = time.perf_counter()
        if done and first is None:
            first = (now, done)
        if done >= jobs:
            assert first is not None
            return (done - first[1]) / max(now - first[0], 1e-9)
        if process.poll() is not None and done < jobs:
            raise AssertionError(f"exited with {process.returncode} after {done} of {jobs}")
        time.sleep(0.005)
    raise AssertionError(f"only {r.get(key)} of {jobs} done in {LIMIT:.0f}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _sqlq_noops(config: Config, jobs: int, pool: str) -> float:
    path, engine = fresh_sqlite(config, f"pools_{pool}")
    key = f"sqlq-bench-{uuid.uuid4().hex}"
    sqlq_orm.Queue(engine).enqueue_many(
        [{"type": "noop", "payload": {"key": key}} for _ in range(jobs)]
    )
    engine.dispose()
    process = subprocess.Popen(
        _worker(sqlite_url(path), "--pool", pool, "--concurrency", str(CONCURRENCY)),
        env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        return _rate(key, jobs, process)
    finally:
        _stop(process)
        _redis().delete(key)


def _celery(config: Config, jobs: int) -> float:
    from bench.pool_handlers import celery_noop

    key = f"celery-bench-{uuid.uuid4().hex}"
    queue = f"bench-pool-{uuid.uuid4().hex[:8]}"
    for _ in range(jobs):
        celery_noop.apply_async(args=[key], queue=queue)
    celery = shutil.which("celery", path=str(Path(sys.executable).parent)) or "celery"
    process = subprocess.Popen(
        [celery, "-A", "bench.pool_handlers:celery_app", "worker", "-P", "prefork",
         "-c", str(CONCURRENCY), "-Q", queue, "--without-heartbeat", "--without-gossip",
         "--without-mingle", "-l", "WARNING", "-n", f"{queue}@%h"],
        env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        return _rate(key, jobs, process)
    finally:
        _stop(process)
        r = _redis()
        r.delete(key, queue)


def _huey(config: Config, jobs: int) -> float:
    from bench.pool_handlers import huey, huey_noop

    key = f"huey-bench-{uuid.uuid4().hex}"
    huey.flush()
    for _ in range(jobs):
        huey_noop(key)  # a huey task call enqueues
    consumer = shutil.which("huey_consumer", path=str(Path(sys.executable).parent))
    process = subprocess.Popen(
        [consumer or "huey_consumer", "bench.pool_handlers.huey", "-k", "process",
         "-w", str(CONCURRENCY), "-d", "0.01", "-m", "0.05", "-q"],
        env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        return _rate(key, jobs, process)
    finally:
        _stop(process)
        _redis().delete(key)


def _throughput(config: Config) -> list[Result]:
    jobs = config.size(full=4000, quick=1500, smoke=40)
    runs = {
        "process": lambda: _sqlq_noops(config, jobs, "process"),
        "thread": lambda: _sqlq_noops(config, jobs, "thread"),
        "celery": lambda: _celery(config, jobs),
        "huey": lambda: _huey(config, jobs),
    }
    samples = side_by_side(runs, config.heavy_reps)  # type: ignore[arg-type]
    ours = median(samples["process"])
    results = []
    for other, label, target in (
        ("celery", "Celery prefork (Redis broker)", 1.0),
        ("huey", "huey -k process (SQLite)", 1.0),
        ("thread", "sqlq thread pool", None),
    ):
        theirs = median(samples[other])
        ratio = ours / theirs
        results.append(
            Result(
                NAME, f"no-op x{jobs:,}, c{CONCURRENCY}: process pool vs {label}", ours, "jobs/s",
                baseline=label, baseline_value=theirs, ratio=ratio,
                target=None if target is None else f">= {target}x",
                met=None if target is None else ratio >= target,
                note="each no-op INCRs a Redis counter; rate between first and last INCR",
                samples=samples["process"], baseline_samples=samples[other],
            )
        )  # fmt: skip
    return results


# ------------------------------------------------------------------ mishaps


def _jobs_of(engine: sqlalchemy.Engine) -> dict[str, Any]:
    with engine.connect() as connection:
        rows = connection.execute(
            sqlalchemy.text(
                "SELECT type, status, attempt_count, error_code, error_detail FROM sqlq_jobs"
            )
        ).all()
    return {"rows": rows}


def _crash(config: Config, pool: str) -> Result:
    path, engine = fresh_sqlite(config, f"pools_crash_{pool}")
    queue = sqlq_orm.Queue(engine)
    queue.enqueue_many([{"type": "short"} for _ in range(40)])
    queue.enqueue("segfault", max_retries=0)
    queue.enqueue_many([{"type": "short"} for _ in range(40)])
    seconds, status, left, _ = _run_worker(
        sqlite_url(path), "--pool", pool, "--concurrency", str(CONCURRENCY), "--lease", "5"
    )
    rows = _jobs_of(engine)["rows"]
    engine.dispose()
    first_time = sum(
        1 for r in rows if r.type == "short" and r.status == "SUCCEEDED" and r.attempt_count == 1
    )
    stuck = sum(1 for r in rows if r.type == "short" and r.status == "RUNNING")
    (crasher,) = [r for r in rows if r.type == "segfault"]
    how = f"{crasher.status} {crasher.error_code or ''} ({crasher.error_detail or 'no detail'})"
    met = (
        status == 0
        and first_time == 80
        and crasher.error_code == "WORKER:CRASHED"
        and "SIGSEGV" in (crasher.error_detail or "")
    )
    return Result(
        NAME, f"crash: 80 short + 1 segfault, c{CONCURRENCY}, {pool} pool", first_time,
        "first-attempt successes of 80", target="exit 0, 80, WORKER:CRASHED naming SIGSEGV",
        met=met if pool == "process" else None,
        note=f"worker exit {status}; {stuck} left RUNNING; crasher {how}; "
        f"{len(left)} processes left; {seconds:.1f}s",
    )  # fmt: skip


def _spin(config: Config, pool: str, limit: float) -> Result:
    times = {}
    notes = []
    for spinners in (0, 2):
        path, engine = fresh_sqlite(config, f"pools_spin_{pool}_{spinners}")
        queue = sqlq_orm.Queue(engine)
        queue.enqueue_many([{"type": "light"} for _ in range(200)])
        for _ in range(spinners):
            queue.enqueue("spin", max_runtime_seconds=2, max_retries=0)
        queue.enqueue_many([{"type": "light"} for _ in range(200)])
        engine.dispose()
        seconds, status, left, _ = _run_worker(
            sqlite_url(path), "--pool", pool, "--concurrency", str(CONCURRENCY)
        )
        times[spinners] = seconds
        notes.append(
            f"{spinners} spinners: {seconds:.1f}s exit {status}, {len(left)} processes left"
        )
    ratio = times[2] / times[0]
    return Result(
        NAME, f"spin: 400 light jobs + 2 spinners past 2s max runtime, {pool} pool", times[2], "s",
        baseline="without the spinners", baseline_value=times[0], ratio=ratio,
        target=f"<= {limit}x", met=ratio <= limit, note="; ".join(notes),
    )  # fmt: skip


def _memory(config: Config) -> Result:
    path, engine = fresh_sqlite(config, "pools_memory")
    queue = sqlq_orm.Queue(engine)
    queue.enqueue_many([{"type": "short"} for _ in range(10)])
    queue.enqueue("allocate", {"mb": 300})
    queue.enqueue_many([{"type": "short"} for _ in range(10)])
    seconds, status, left, log = _run_worker(
        sqlite_url(path), "--pool", "process", "--concurrency", "2",
        "--max-memory-per-child", "200",
    )  # fmt: skip
    rows = _jobs_of(engine)["rows"]
    engine.dispose()
    succeeded = sum(1 for r in rows if r.status == "SUCCEEDED" and r.attempt_count == 1)
    recycled = log.count("replacing child")
    return Result(
        NAME, "memory: a 300 MB job among 20 under --max-memory-per-child 200", succeeded,
        "first-attempt successes of 21", target="exit 0, 21, 1 child replaced",
        met=status == 0 and succeeded == 21 and recycled == 1,
        note=f"worker exit {status}; {recycled} child(ren) replaced; {len(left)} left; "
        f"{seconds:.1f}s",
    )  # fmt: skip


def _cpu(config: Config) -> Result:
    n = config.size(full=3_000_000, quick=1_500_000, smoke=10_000)
    times = {}
    for children in (1, 2):
        path, engine = fresh_sqlite(config, f"pools_cpu_{children}")
        sqlq_orm.Queue(engine).enqueue_many(
            [{"type": "cpu", "payload": {"n": n}} for _ in range(8)]
        )
        engine.dispose()
        times[children] = _run_worker(
            sqlite_url(path), "--pool", "process", "--concurrency", str(children)
        )[0]
    ratio = times[1] / times[2]
    return Result(
        NAME, "cpu: 8 CPU-bound jobs, 2 children vs 1", ratio, "x speed-up",
        target=">= 1.7x", met=ratio >= 1.7,
        note=f"1 child {times[1]:.1f}s, 2 children {times[2]:.1f}s; "
        f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
    )  # fmt: skip


# ------------------------------------------------------------------ start methods


def _answer(conn: Any) -> None:
    conn.send(b"ok")


def _fork_once() -> float:
    started = time.perf_counter()
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        theirs.sendall(b"ok")
        os._exit(0)
    theirs.close()
    ours.recv(2)
    elapsed = time.perf_counter() - started
    os.waitpid(pid, 0)
    ours.close()
    return elapsed


def _mp_once(method: str) -> float:
    context = multiprocessing.get_context(method)
    started = time.perf_counter()
    ours, theirs = context.Pipe()
    process = context.Process(target=_answer, args=(theirs,))
    process.start()
    ours.recv_bytes()
    elapsed = time.perf_counter() - started
    process.join()
    return elapsed


def _start_methods(config: Config) -> list[Result]:
    reps = config.size(full=30, quick=10, smoke=2)
    fork = median(_fork_once() for _ in range(reps)) * 1000
    _mp_once("forkserver")  # the server itself starts once
    results = []
    for method in ("forkserver", "spawn"):
        other = median(_mp_once(method) for _ in range(reps)) * 1000
        results.append(
            Result(
                NAME, f"start one child: os.fork vs multiprocessing {method}", fork, "ms",
                baseline=method, baseline_value=other, ratio=other / fork,
                note="to the child's first answer over a socket/pipe; higher ratio: fork cheaper",
            )
        )  # fmt: skip
    return results


def _pure_noops(config: Config) -> Result:
    """The real Worker draining plain no-ops (no Redis): the pools' own cost per job."""
    jobs = config.size(full=5000, quick=2000, smoke=40)

    def drain(pool: str) -> float:
        url = sqlite_url(fresh_sqlite(config, f"pools_drain_{pool}")[0])
        enqueue_noops(url, jobs)
        return drain_with_worker(url, jobs, CONCURRENCY, pool=pool)

    samples = side_by_side(
        {"process": lambda: drain("process"), "thread": lambda: drain("thread")},
        config.heavy_reps,
    )
    ours, theirs = median(samples["process"]), median(samples["thread"])
    return Result(
        NAME, f"plain no-op x{jobs:,}, c{CONCURRENCY}, Worker drain: process vs thread pool",
        ours, "jobs/s", baseline="thread pool", baseline_value=theirs, ratio=ours / theirs,
        note="the workers bench's drain (spawned Worker, burst, full history)",
        samples=samples["process"], baseline_samples=samples["thread"],
    )  # fmt: skip


def run(config: Config) -> list[Result]:
    results = [_pure_noops(config)]
    results += _start_methods(config)
    results += [_crash(config, "process"), _crash(config, "thread")]
    results += [_spin(config, "process", 1.5), _spin(config, "thread", 2.0)]
    results += [_memory(config), _cpu(config)]
    try:
        import celery  # noqa: F401
        import huey  # noqa: F401
        import redis  # noqa: F401
    except ImportError as exc:
        results.append(Result(NAME, "throughput vs peers", float("nan"), "jobs/s",
                              note=f"skipped: {exc.name} is not installed"))  # fmt: skip
        return results
    return results + _throughput(config)
