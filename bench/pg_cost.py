"""Bench: what one job costs the PostgreSQL server, enqueue -> claim -> finish.

Needs ``--pg``. On a throw-away database, N jobs go through the queue phase by phase,
full history kept (one attempt row, four events per job), on two paths:

- **one at a time**: ``enqueue`` each, then ``claim(limit=1, start=True)`` + ``succeed``
  per job (3 transactions per job);
- **worker path**: ``enqueue_many`` in batches of 100, then ``claim(limit=64,
  start=True)`` + ``succeed_many`` per batch (what ``Worker`` does).

Per job and per phase it reports what the server did for this database only:

- statements and transactions, counted on the client (SQLAlchemy events);
- rows inserted / updated / deleted (``pg_stat_user_tables``, all sqlq tables) and
  the share of HOT updates;
- shared buffers hit and read (``pg_stat_database``);
- WAL bytes written for this database: every WAL record between the phase's start
  and end LSNs (``pg_walinspect``, PostgreSQL 15+) whose block references name this
  database's OID, plus the commit records of the transactions that wrote them; on a
  server shared with other work this still counts only this database.

Statistics are flushed by ending the backends (the engine is disposed at each phase's
end) and read after ``pg_stat_clear_snapshot()``. No baseline is timed beside these:
they are counts, not speeds. pg_stat_statements is not used (it must be preloaded,
which needs a server restart); server CPU is not measured here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import Engine

import sqlq_orm
from bench.core import Config, Result, postgres_database, postgres_reachable, reset_postgres

NAME = "pg_cost"
BATCH = 64
ENQUEUE_BATCH = 100
TABLES = ("sqlq_jobs", "sqlq_job_attempts", "sqlq_job_events", "sqlq_job_dependencies")


@dataclass
class Counters:
    statements: int = 0
    transactions: int = 0
    inserted: int = 0
    updated: int = 0
    hot_updated: int = 0
    deleted: int = 0
    blocks_hit: int = 0
    blocks_read: int = 0
    wal_bytes: int = 0
    wal_records: int = 0


def _server_counters(admin: Engine) -> dict[str, int]:
    with admin.connect() as connection:
        connection.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
        rows = connection.execute(
            sqlalchemy.text(
                "SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), "
                "coalesce(sum(n_tup_hot_upd), 0), coalesce(sum(n_tup_del), 0) "
                "FROM pg_stat_user_tables WHERE relname = ANY(:tables)"
            ),
            {"tables": list(TABLES)},
        ).one()
        blocks = connection.exec_driver_sql(
            "SELECT blks_hit, blks_read FROM pg_stat_database WHERE datname = current_database()"
        ).one()
    return {
        "inserted": int(rows[0]),
        "updated": int(rows[1]),
        "hot_updated": int(rows[2]),
        "deleted": int(rows[3]),
        "blocks_hit": int(blocks[0]),
        "blocks_read": int(blocks[1]),
    }


def _lsn(admin: Engine) -> str:
    with admin.connect() as connection:
        return str(connection.exec_driver_sql("SELECT pg_current_wal_flush_lsn()").scalar())


def _wal_of_this_database(admin: Engine, start: str, end: str) -> tuple[int, int]:
    """(bytes, records) of the WAL between two LSNs that belongs to this database."""
    with admin.connect() as connection:
        oid = connection.exec_driver_sql(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).scalar()
        rows = connection.execute(
            sqlalchemy.text(
                "SELECT xid, resource_manager, record_type, record_length, block_ref "
                "FROM walinspect.pg_get_wal_records_info(CAST(:s AS pg_lsn), CAST(:e AS pg_lsn))"
            ),
            {"s": start, "e": end},
        ).all()
    ours = re.compile(rf"rel \d+/{oid}/\d+")
    xids = {row.xid for row in rows if row.block_ref and ours.search(row.block_ref)}
    xids.discard(0)
    total = count = 0
    for row in rows:
        if (row.block_ref and ours.search(row.block_ref)) or (
            row.resource_manager == "Transaction" and row.xid in xids
        ):
            total += int(row.record_length)
            count += 1
    return total, count


def _measure(url: str, admin: Engine, phase: Callable[[sqlq_orm.Queue], None]) -> Counters:
    engine = sqlq_orm.create_engine(url)
    counted = Counters()

    def on_statement(*_: Any) -> None:
        counted.statements += 1

    def on_commit(*_: Any) -> None:
        counted.transactions += 1

    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine, "commit", on_commit)
    queue = sqlq_orm.Queue(engine)
    before = _server_counters(admin)
    with admin.connect() as holder:
        # A temporary slot keeps the phase's WAL from being recycled by a checkpoint
        # (a busy shared server) until it is read; it goes with this session.
        holder.exec_driver_sql(
            "SELECT pg_create_physical_replication_slot(%s, true, true)",
            (f"sqlq_cost_{uuid.uuid4().hex[:12]}",),
        )
        start = _lsn(admin)
        counted.statements = counted.transactions = 0  # not the queue's schema check
        phase(queue)
        engine.dispose()  # the backends end: their statistics are flushed
        end = _lsn(admin)
        counted.wal_bytes, counted.wal_records = _wal_of_this_database(admin, start, end)
    after = _server_counters(admin)
    for name, value in after.items():
        setattr(counted, name, value - before[name])
    return counted


def _paths(jobs: int) -> dict[str, list[tuple[str, Callable[[sqlq_orm.Queue], None]]]]:
    def enqueue_each(queue: sqlq_orm.Queue) -> None:
        for n in range(jobs):
            queue.enqueue("noop", {"n": n})

    def finish_each(queue: sqlq_orm.Queue) -> None:
        while leases := queue.claim("cost", limit=1, start=True):
            queue.succeed(leases[0])

    def enqueue_batches(queue: sqlq_orm.Queue) -> None:
        for start in range(0, jobs, ENQUEUE_BATCH):
            count = min(ENQUEUE_BATCH, jobs - start)
            specs = [{"type": "noop", "payload": {"n": start + i}} for i in range(count)]
            queue.enqueue_many(specs)

    def finish_batches(queue: sqlq_orm.Queue) -> None:
        while leases := queue.claim("cost", limit=BATCH, start=True):
            assert queue.succeed_many(leases) == []

    return {
        "one at a time": [("enqueue", enqueue_each), ("claim+succeed", finish_each)],
        f"worker path (batches of {ENQUEUE_BATCH} / {BATCH})": [
            ("enqueue_many", enqueue_batches),
            ("claim+succeed_many", finish_batches),
        ],
    }


def run(config: Config) -> list[Result]:
    why = postgres_reachable(config.pg_url)
    if why is not None or config.pg_url is None:
        print(f"   skipped: {why}")
        return []
    jobs = config.size(full=5_000, quick=2_000, smoke=50)
    results: list[Result] = []
    with postgres_database(config.pg_url) as url:
        admin = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            # In a schema of its own: resetting the database drops "public".
            connection.exec_driver_sql("CREATE SCHEMA IF NOT EXISTS walinspect")
            connection.exec_driver_sql(
                "CREATE EXTENSION IF NOT EXISTS pg_walinspect WITH SCHEMA walinspect"
            )
        try:
            for path, phases in _paths(jobs).items():
                reset_postgres(url).dispose()
                totals = Counters()
                for label, phase in phases:
                    counted = _measure(url, admin, phase)
                    results += _report(f"{path}: {label}", counted, jobs)
                    for name in vars(totals):
                        setattr(totals, name, getattr(totals, name) + getattr(counted, name))
                results += _report(f"{path}: whole job", totals, jobs)
        finally:
            admin.dispose()
    return results


def _report(case: str, counted: Counters, jobs: int) -> list[Result]:
    per_job = {name: value / jobs for name, value in vars(counted).items()}
    hot = counted.hot_updated / counted.updated * 100 if counted.updated else 0.0
    note = (
        f"per job: {per_job['statements']:.2f} statements, {per_job['transactions']:.2f} "
        f"transactions, rows +{per_job['inserted']:.2f} ~{per_job['updated']:.2f} "
        f"(HOT {hot:.0f} %) -{per_job['deleted']:.2f}, buffers hit {per_job['blocks_hit']:.1f} "
        f"read {per_job['blocks_read']:.2f}, WAL {per_job['wal_records']:.1f} records"
    )
    return [
        Result(NAME, f"{case}: WAL bytes per job ({jobs:,} jobs)", per_job["wal_bytes"], "B",
               note=note),
    ]  # fmt: skip
