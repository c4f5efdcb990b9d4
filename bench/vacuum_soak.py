"""Soak: does the job table stop growing once pruning runs? (PostgreSQL)

A steady enqueue + drain at ``--rate`` jobs/s for ``--minutes`` on a throw-away
database, full history kept, with ``Queue.prune`` (finished jobs of any age) every
``--prune-every`` seconds. Every ``--sample-every`` seconds it prints one line: the
size (``pg_total_relation_size``, heap + indexes + TOAST) of ``sqlq_jobs`` and of its
indexes alone, of the events and attempts tables, live and dead tuples of
``sqlq_jobs`` and how many times autovacuum has run on it. Growth that levels off
after the first prune rounds is the expected shape; a line that keeps climbing is bloat.

The schema is built by ``sqlq_orm.migrate.upgrade``; the soak then sets the per-table
autovacuum settings docs/howto/postgresql-production.md recommends (:data:`RECOMMENDED`,
what sqlq_0010 sets on PostgreSQL), or with ``--server-defaults`` resets them, to compare.

    nice -n 10 .venv/bin/python -m bench.vacuum_soak \
        --pg postgresql+psycopg://postgres@127.0.0.1:5432/test --rate 50 --minutes 30

Low rates on purpose: the point is the shape of the curve over time, not throughput.

A server with ``autovacuum = off`` (the test server, for speed) never vacuums: then
``--emulate-autovacuum`` (on by default when the server's autovacuum is off) does what
its launcher would, from the soak: every ``autovacuum_naptime`` it runs ``VACUUM
(ANALYZE)`` on each table whose dead rows exceed ``threshold + scale_factor x rows``,
with the table's own settings (``sqlq_jobs``: :data:`RECOMMENDED`) or the server's.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import sqlalchemy

import sqlq_orm
from bench.core import postgres_database
from sqlq_orm.ops.retention import RetentionPolicy

RECOMMENDED = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
}
"""Per-table storage parameters for ``sqlq_jobs`` (docs/howto/postgresql-production.md says why)."""
TABLES = ("sqlq_jobs", "sqlq_job_events", "sqlq_job_attempts")
PRUNE_ALL_FINISHED = RetentionPolicy(succeeded_days=0, failed_days=0, cancelled_days=0)
"""Zero days: every finished job goes at the next prune (the soak's retention is the
prune interval itself, so the table's steady size is about rate x interval)."""


def _noop(context: Any) -> None:
    return None


def _produce(queue: sqlq_orm.Queue, rate: float, stop: threading.Event) -> None:
    """Enqueue ``rate`` jobs/s in ten batches a second, catching up after a slow batch."""
    tick = 0.1
    per_tick = max(1, round(rate * tick))
    started = time.monotonic()
    sent = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        if due > sent:
            batch = min(due - sent, per_tick * 10)
            queue.enqueue_many(
                [
                    {"type": "noop", "payload": {"n": sent + i, "tenant": "acme"}}
                    for i in range(batch)
                ]
            )
            sent += batch
        stop.wait(tick)


def _prune(queue: sqlq_orm.Queue, every: float, stop: threading.Event, pruned: list[int]) -> None:
    while not stop.wait(every):
        result = queue.prune(PRUNE_ALL_FINISHED)
        pruned.append(result.total_jobs)


def _vacuum_due(engine: sqlalchemy.Engine) -> list[str]:
    """The tables autovacuum would pick now: dead rows above threshold + scale x rows,
    with the table's own storage parameters where set, else the server's."""
    due = []
    with engine.connect() as connection:
        connection.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
        for table in TABLES:
            row = connection.execute(
                sqlalchemy.text(
                    "SELECT s.n_dead_tup, c.reltuples, coalesce(c.reloptions, '{}') "
                    "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
                    "WHERE s.relid = CAST(:t AS regclass)"
                ),
                {"t": table},
            ).one()
            options = dict(option.split("=", 1) for option in row[2])
            threshold = float(
                options.get("autovacuum_vacuum_threshold")
                or connection.exec_driver_sql("SHOW autovacuum_vacuum_threshold").scalar_one()
            )
            scale = float(
                options.get("autovacuum_vacuum_scale_factor")
                or connection.exec_driver_sql("SHOW autovacuum_vacuum_scale_factor").scalar_one()
            )
            if row[0] > threshold + scale * max(0.0, float(row[1])):
                due.append(table)
    return due


def _emulate_autovacuum(
    engine: sqlalchemy.Engine, naptime: float, stop: threading.Event, runs: list[str]
) -> None:
    while not stop.wait(naptime):
        for table in _vacuum_due(engine):
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.exec_driver_sql(f"VACUUM (ANALYZE) {table}")
            runs.append(table)


def _sample(engine: sqlalchemy.Engine) -> dict[str, int]:
    with engine.connect() as connection:
        connection.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
        sizes = {
            table: int(
                connection.execute(
                    sqlalchemy.text("SELECT pg_total_relation_size(CAST(:t AS regclass))"),
                    {"t": table},
                ).scalar_one()
            )
            for table in TABLES
        }
        index_bytes = int(
            connection.exec_driver_sql("SELECT pg_indexes_size('sqlq_jobs'::regclass)").scalar_one()
        )
        live, dead, autovacuums = connection.exec_driver_sql(
            "SELECT n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables "
            "WHERE relname = 'sqlq_jobs'"
        ).one()
    return {
        "jobs_kb": sizes["sqlq_jobs"] // 1024,
        "jobs_idx_kb": index_bytes // 1024,
        "events_kb": sizes["sqlq_job_events"] // 1024,
        "attempts_kb": sizes["sqlq_job_attempts"] // 1024,
        "live": int(live),
        "dead": int(dead),
        "autovacuums": int(autovacuums),
    }


def soak(
    url: str,
    *,
    rate: float,
    minutes: float,
    prune_every: float,
    sample_every: float,
    server_defaults: bool,
    emulate_autovacuum: bool | None = None,
) -> list[dict[str, Any]]:
    """Run the soak on the (empty) database at ``url``; print and return the samples."""
    from sqlq_orm.worker.runtime import Worker

    sqlq_orm.migrate.upgrade(url)
    engine = sqlq_orm.create_engine(url)
    with engine.begin() as connection:
        if server_defaults:
            connection.exec_driver_sql(f"ALTER TABLE sqlq_jobs RESET ({', '.join(RECOMMENDED)})")
        else:
            settings = ", ".join(f"{name} = {value}" for name, value in RECOMMENDED.items())
            connection.exec_driver_sql(f"ALTER TABLE sqlq_jobs SET ({settings})")
    queue = sqlq_orm.Queue(engine)
    worker = Worker(
        queue,
        {"noop": _noop},
        concurrency=4,
        poll_interval=0.2,
        sweep_interval=None,
        install_signal_handlers=False,
        run_schedules=False,
        worker_id="bench-vacuum-soak",
    )
    stop = threading.Event()
    pruned: list[int] = []
    with engine.connect() as connection:
        server_autovacuum = connection.exec_driver_sql("SHOW autovacuum").scalar_one() == "on"
        naptime = connection.exec_driver_sql(
            "SELECT setting::float FROM pg_settings WHERE name = 'autovacuum_naptime'"
        ).scalar_one()
    if emulate_autovacuum is None:
        emulate_autovacuum = not server_autovacuum
    vacuums: list[str] = []
    print(
        f"# rate {rate}/s, prune every {prune_every}s, server autovacuum "
        f"{'on' if server_autovacuum else 'off'}, emulated: {emulate_autovacuum} "
        f"(naptime {naptime}s), sqlq_jobs settings: "
        f"{'server defaults' if server_defaults else RECOMMENDED}",
        flush=True,
    )
    threads = [
        threading.Thread(target=worker.run, name="worker", daemon=True),
        threading.Thread(target=_produce, args=(queue, rate, stop), daemon=True),
        threading.Thread(target=_prune, args=(queue, prune_every, stop, pruned), daemon=True),
    ]
    if emulate_autovacuum:
        threads.append(
            threading.Thread(
                target=_emulate_autovacuum, args=(engine, naptime, stop, vacuums), daemon=True
            )
        )
    for thread in threads:
        thread.start()
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    header = (
        "minute  jobs_kb  jobs_idx_kb  events_kb  attempts_kb  live  dead  autovacuums  "
        "succeeded  pruned  vacuums"
    )
    print(header, flush=True)
    try:
        while True:
            elapsed = time.monotonic() - started
            sample = {"minute": round(elapsed / 60, 1), **_sample(engine)}
            sample["succeeded"] = worker_stats_succeeded(worker)
            sample["pruned"] = sum(pruned)
            sample["vacuums"] = len(vacuums)
            samples.append(sample)
            print(
                f"{sample['minute']:6.1f} {sample['jobs_kb']:8d} {sample['jobs_idx_kb']:12d} "
                f"{sample['events_kb']:10d} {sample['attempts_kb']:12d} {sample['live']:5d} "
                f"{sample['dead']:5d} {sample['autovacuums']:12d} {sample['succeeded']:10d} "
                f"{sample['pruned']:7d} {sample['vacuums']:8d}",
                flush=True,
            )
            if elapsed >= minutes * 60:
                break
            time.sleep(min(sample_every, max(0.0, minutes * 60 - elapsed)) or sample_every)
    finally:
        stop.set()
        worker.request_stop()
        for thread in threads:
            thread.join(timeout=30)
        engine.dispose()
    return samples


def worker_stats_succeeded(worker: Any) -> int:
    """Jobs the worker has finished so far (its live counters)."""
    stats = getattr(worker, "stats", None)
    return int(getattr(stats, "succeeded", 0) or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", required=True, help="admin URL of the PostgreSQL server")
    parser.add_argument("--rate", type=float, default=50.0, help="jobs per second (default 50)")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--prune-every", type=float, default=60.0, help="seconds between prunes")
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument(
        "--server-defaults",
        action="store_true",
        help="reset the per-table autovacuum settings sqlq_0010 sets, to compare",
    )
    parser.add_argument(
        "--emulate-autovacuum",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vacuum from the soak as autovacuum would (default: when the server's is off)",
    )
    args = parser.parse_args()
    with postgres_database(args.pg) as url:
        soak(
            url,
            rate=args.rate,
            minutes=args.minutes,
            prune_every=args.prune_every,
            sample_every=args.sample_every,
            server_defaults=args.server_defaults,
            emulate_autovacuum=args.emulate_autovacuum,
        )


if __name__ == "__main__":
    main()
