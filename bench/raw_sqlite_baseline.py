"""The baseline: sqlq_orm's own statements, run by hand with the standard ``sqlite3``.

Same schema (created from the models), same connection settings (WAL,
``synchronous=NORMAL``, ``foreign_keys=ON``, ``busy_timeout``), same SQL text (compiled
once, at start-up, from the ``Statements`` of a :class:`sqlq_orm.Queue` on the same
file), same transactions (``BEGIN IMMEDIATE`` ... ``COMMIT``), and the same per-call
work a careful hand-written queue must do (a ``secrets`` token per claim, JSON for
payloads and event details). Left out is everything SQLAlchemy and the service layer
add per call: that difference is what the lifecycle ratio measures.

``tests/acceptance/test_bench_smoke.py`` checks that this module and :class:`sqlq_orm.Queue`
send SQLite the same statements, in the same order, for one job's life.
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Dialect

import sqlq_orm

_POSTCOMPILE = re.compile(r"\(__\[POSTCOMPILE_(\w+)\]\)")


class Prepared:
    """One statement compiled for SQLite: its SQL text and how to order its parameters."""

    def __init__(self, statement: Any, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.template = compiled.string
        self.expanding = set(_POSTCOMPILE.findall(compiled.string))
        # With one value per expanding IN list (the usual case): the SQL as run.
        self.sql = _POSTCOMPILE.sub("(?)", compiled.string)
        self.names: list[str] = list(compiled.positiontup or [])
        self.defaults = {
            name: compiled.binds[name].effective_value
            for name in self.names
            if name in compiled.binds
        }

    def params(self, values: dict[str, Any]) -> tuple[Any, ...]:
        out: list[Any] = []
        for name in self.names:
            value = values[name] if name in values else self.defaults.get(name)
            if name in self.expanding:
                out.extend(value)
            else:
                out.append(value)
        return tuple(out)

    def render(self, values: dict[str, Any]) -> str:
        """The SQL for these values: each expanding IN list with as many ``?`` as values."""
        if not self.expanding:
            return self.sql
        return _POSTCOMPILE.sub(
            lambda match: "(" + ", ".join("?" * len(values[match.group(1)])) + ")", self.template
        )


def _detail(detail: dict[str, Any]) -> str:
    return json.dumps(detail, separators=(",", ":"))


@dataclass
class RawLease:
    job_id: int
    token: str
    attempt: int
    type: str
    payload: str | None


class RawSqliteQueue:
    """A minimal queue on the same tables, written straight against ``sqlite3``."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 30_000) -> None:
        engine = sqlq_orm.create_engine(f"sqlite:///{path}")
        sql = sqlq_orm.Queue(engine).sql
        dialect = engine.dialect

        def prepare(statement: Any) -> Prepared:
            return Prepared(statement, dialect)

        self.insert_job = prepare(sql.insert_job)
        self.insert_event = prepare(sql.insert_event)
        claim_for = getattr(sql, "claim_for", None)
        if claim_for is not None:
            self.claim_sql = prepare(claim_for(["default"], start=False)[0])
            self.claim_and_start_sql = prepare(claim_for(["default"], start=True)[0])
        else:  # pragma: no cover - older Statements
            self.claim_sql = prepare(sql.claim)
            self.claim_and_start_sql = prepare(sql.claim_and_start)
        self.start_sql = prepare(sql.start)
        self.open_attempt = prepare(sql.open_attempt)
        self.open_attempts_of_batch = prepare(sql.open_attempts_of_batch)
        self.claim_events_of_batch = prepare(sql.claim_events_of_batch)
        # A claim that found fewer jobs than its limit looks for rate-limited queues.
        self.select_rate_limited = prepare(sql.select_rate_limited)
        self.succeed_sql = prepare(sql.succeed)
        self.close_attempt = prepare(sql.close_attempt_upsert)
        self.succeeded_events_of_batch = prepare(sql.succeeded_events_of_batch)
        self.default_max_retries = sql.default_max_retries
        engine.dispose()

        self.connection = sqlite3.connect(str(path), isolation_level=None)
        self.statements: list[str] = []
        """Every statement run while ``record`` is on, in order."""
        self.record = False
        for pragma in (
            f"PRAGMA busy_timeout = {int(busy_timeout_ms)}",
            "PRAGMA foreign_keys = ON",
            "PRAGMA journal_mode = WAL",
            "PRAGMA synchronous = NORMAL",
        ):
            self.connection.execute(pragma)

    def close(self) -> None:
        self.connection.close()

    # Recording is off while timing, so it costs nothing then.
    def _run(self, prepared: Prepared, values: dict[str, Any]) -> sqlite3.Cursor:
        sql = prepared.render(values)
        if self.record:
            self.statements.append(sql)
        return self.connection.execute(sql, prepared.params(values))

    def _run_many(self, prepared: Prepared, rows: list[dict[str, Any]]) -> None:
        if self.record:
            self.statements.append(prepared.sql)
        self.connection.executemany(prepared.sql, [prepared.params(row) for row in rows])

    def _plain(self, sql: str) -> sqlite3.Cursor:
        if self.record:
            self.statements.append(sql)
        return self.connection.execute(sql)

    def _job(self, type: str, payload: Any, queue: str) -> dict[str, Any]:
        return {
            "p_queue": queue,
            "p_type": type,
            "p_priority": 0,
            "p_payload": json.dumps(payload, separators=(",", ":")),
            "p_payload_ref": None,
            "p_dedupe_key": None,
            "p_run_at": None,
            "p_delay": 0,
            "p_max_retries": self.default_max_retries,
            "p_max_runtime_seconds": None,
        }

    def _event(self, job_id: int, event: str, actor: str, detail: dict[str, Any]) -> dict[str, Any]:
        return {"p_job_id": job_id, "p_event": event, "p_actor": actor, "p_detail": _detail(detail)}

    def enqueue(self, type: str, payload: Any = None, queue: str = "default") -> int:
        self._plain("BEGIN IMMEDIATE")
        try:
            job_id = self._run(self.insert_job, self._job(type, payload, queue)).fetchone()[0]
            self._run(
                self.insert_event,
                self._event(job_id, "ENQUEUED", "system", {"queue": queue, "type": type}),
            )
            self._plain("COMMIT")
        except BaseException:
            self.connection.rollback()
            raise
        return int(job_id)

    def enqueue_many(self, jobs: list[tuple[str, Any]], queue: str = "default") -> list[int]:
        """The raw bulk path: ``executemany`` for the jobs, then for their events."""
        self._plain("BEGIN IMMEDIATE")
        try:
            before = self._plain("SELECT coalesce(max(id), 0) FROM sqlq_jobs").fetchone()[0]
            insert = self.insert_job.sql.removesuffix(" RETURNING id")
            rows = [
                self.insert_job.params(self._job(type, payload, queue)) for type, payload in jobs
            ]
            self.connection.executemany(insert, rows)
            # One writer (BEGIN IMMEDIATE) and an INTEGER PRIMARY KEY: the new rows got
            # the next ids, in order.
            ids = list(range(before + 1, before + 1 + len(jobs)))
            self._run_many(
                self.insert_event,
                [
                    self._event(job_id, "ENQUEUED", "system", {"queue": queue, "type": type})
                    for job_id, (type, _) in zip(ids, jobs, strict=True)
                ],
            )
            self._plain("COMMIT")
        except BaseException:
            self.connection.rollback()
            raise
        return ids

    def claim(
        self, worker_id: str, *, limit: int = 1, lease_seconds: int = 30, start: bool = False
    ) -> list[RawLease]:
        values = {
            "p_queues": ["default"],
            "p_limit": limit,
            "p_worker": worker_id,
            "p_lease_seconds": lease_seconds,
            "tokens": json.dumps([secrets.token_urlsafe(24) for _ in range(limit)]),
        }
        self._plain("BEGIN IMMEDIATE")
        try:
            statement = self.claim_and_start_sql if start else self.claim_sql
            cursor = self._run(statement, values)
            rows = cursor.fetchall()
            leases: list[RawLease] = []
            if rows:
                # The same check the service makes: every changed row was returned
                # (the cursor counts the changes once its rows are read).
                changed = cursor.rowcount
                assert changed == len(rows), (changed, len(rows))
            if len(rows) < limit:
                # Short of the limit, the service looks for rate-limited queues (there
                # are none here, so it finds none).
                self._run(self.select_rate_limited, {"p_queues": values["p_queues"]}).fetchall()
            if rows:
                leases = [
                    RawLease(
                        job_id=row[0],
                        token=row[1],
                        attempt=row[6] if start else row[6] + 1,
                        type=row[2],
                        payload=row[4],
                    )
                    for row in rows
                ]
                # Attempt rows and events in SQL from the claimed rows, as the service.
                history = {
                    "p_ids": [lease.job_id for lease in leases],
                    "p_lease_seconds": lease_seconds,
                }
                if start:
                    self._run(self.open_attempts_of_batch, history)  # stands for the events
                else:
                    self._run(self.claim_events_of_batch, history)
            self._plain("COMMIT")
        except BaseException:
            self.connection.rollback()
            raise
        return leases

    def start(self, lease: RawLease, worker_id: str) -> None:
        self._plain("BEGIN IMMEDIATE")
        try:
            row = self._run(
                self.start_sql, {"p_id": lease.job_id, "p_token": lease.token}
            ).fetchone()
            if row is None:
                raise LookupError(f"lease lost on job {lease.job_id}")
            lease.attempt = row[0]
            self._run(
                self.open_attempt,
                {"p_job_id": lease.job_id, "p_attempt": lease.attempt, "p_worker": worker_id},
            )
            self._run(
                self.insert_event,
                self._event(lease.job_id, "STARTED", worker_id, {"attempt": lease.attempt}),
            )
            self._plain("COMMIT")
        except BaseException:
            self.connection.rollback()
            raise

    def succeed(self, lease: RawLease, worker_id: str) -> None:
        self._plain("BEGIN IMMEDIATE")
        try:
            cursor = self._run(
                self.succeed_sql,
                {"p_id": lease.job_id, "p_token": lease.token, "p_result_ref": None},
            )
            # RETURNING id, has_dependents: one row when the guard matched (the flag
            # is 0 here, as no job has children, so the queue looks no further either).
            if len(cursor.fetchall()) != 1:
                raise LookupError(f"lease lost on job {lease.job_id}")
            self._run(
                self.close_attempt,
                {
                    "p_job_id": lease.job_id,
                    "p_attempt": lease.attempt,
                    "p_worker": worker_id,
                    "p_attempt_status": "SUCCEEDED",
                    "p_code": None,
                    "p_detail": None,
                },
            )
            # SUCCEEDED unless the attempt row stands for it (sqlq_orm.ops.stand_ins).
            self._run(self.succeeded_events_of_batch, {"p_ids": [lease.job_id]})
            self._plain("COMMIT")
        except BaseException:
            self.connection.rollback()
            raise
