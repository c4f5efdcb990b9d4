"""Adding jobs and writing events."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError

from sqlq_orm.db.statements.base import ACTIVE_VALUES, StatementGroup, status_in
from sqlq_orm.schema.states import Event, JobStatus

CHANNEL_MAX = 63
"""PostgreSQL truncates longer channel names (NAMEDATALEN - 1)."""
WAITERS_LOCK_CLASS = 0x5351_5751  # "SQQW": the first key of the finish listeners' lock


class EnqueueStatements(StatementGroup):
    """Adding jobs and writing events."""

    def _build_enqueue(self) -> None:
        jobs = self.tables.jobs
        events = self.tables.events
        j = self.tables.jobs.c
        now = self.now
        dialect = self.dialect
        # -- enqueue ---------------------------------------------------------------
        self.job_columns = frozenset(jobs.c.keys())
        self.dedupe_where = and_(j.dedupe_key.is_not(None), status_in(j.status, ACTIVE_VALUES))
        self.find_active_by_dedupe_key = select(j.id, j.type, j.queue).where(
            j.dedupe_key == bindparam("p_dedupe_key"), status_in(j.status, ACTIVE_VALUES)
        )
        # A finished job still holding its key (dedupe_period): SUCCEEDED or FAILED
        # less than dedupe_period seconds ago; the latest one if several.
        self.find_held_by_dedupe_key = (
            select(j.id, j.type, j.queue)
            .where(
                j.dedupe_key == bindparam("p_dedupe_key"),
                j.dedupe_period.is_not(None),
                status_in(j.status, [JobStatus.SUCCEEDED.value, JobStatus.FAILED.value]),
                j.finished_at > now - j.dedupe_period,
            )
            .order_by(j.finished_at.desc(), j.id.desc())
            .limit(1)
        )
        # Taking back the row an enqueue just inserted, when the key turned out held
        # after all (its holder finished while the insert waited for it).
        self.delete_new_job = delete(jobs).where(j.id == bindparam("p_job_id"))
        self.default_max_retries = j.max_retries.default.arg  # type: ignore[union-attr]
        job_values = {
            "queue": bindparam("p_queue"),
            "type": bindparam("p_type"),
            "status": JobStatus.QUEUED.value,
            "priority": bindparam("p_priority"),
            "payload": bindparam("p_payload"),
            "payload_ref": bindparam("p_payload_ref"),
            "dedupe_key": bindparam("p_dedupe_key"),
            "created_at": now,
            "run_at": func.coalesce(
                bindparam("p_run_at", type_=BigInteger), now + bindparam("p_delay")
            ),
            "attempt_count": 0,
            "retry_count": 0,
            "max_retries": bindparam("p_max_retries"),
            "max_runtime_seconds": bindparam("p_max_runtime_seconds"),
            "concurrency_key": bindparam("p_concurrency_key"),
            "concurrency_limit": bindparam("p_concurrency_limit"),
            "rate_key": bindparam("p_rate_key"),
            "dedupe_period": bindparam("p_dedupe_period"),
        }
        self.insert_job = insert(jobs).values(job_values).returning(j.id)
        if dialect.is_duplicate_key is None:
            self.insert_job_unless_duplicate = (
                dialect.insert(jobs)
                .values(job_values)
                .on_conflict_do_nothing(
                    index_elements=[j.dedupe_key], index_where=self.dedupe_where
                )
                .returning(j.id)
            )
        else:
            # No conflict clause that reports a skipped row here: the plain insert runs
            # in a savepoint and a duplicate key means "taken" (see insert_unless_duplicate).
            self.insert_job_unless_duplicate = self.insert_job
        # enqueue_many on a backend that takes rows as arrays: the same values, one
        # bound array per column (a_<column>), for jobs without dedupe key or app columns.
        self.insert_jobs_from_arrays: Any = None
        self.bulk_insert_writes_events = False
        if dialect.rows_from_arrays is not None:
            rows = dialect.rows_from_arrays(
                [
                    ("queue", j.queue.type),
                    ("type", j.type.type),
                    ("priority", j.priority.type),
                    ("payload", j.payload.type),
                    ("payload_ref", j.payload_ref.type),
                    ("run_at", BigInteger()),
                    ("delay", BigInteger()),
                    ("max_retries", j.max_retries.type),
                    ("max_runtime_seconds", j.max_runtime_seconds.type),
                    ("concurrency_key", j.concurrency_key.type),
                    ("concurrency_limit", j.concurrency_limit.type),
                    ("rate_key", j.rate_key.type),
                ]
            )
            r = rows.c
            from_arrays = {
                "queue": r.queue,
                "type": r.type,
                "status": literal(JobStatus.QUEUED.value),
                "priority": r.priority,
                "payload": r.payload,
                "payload_ref": r.payload_ref,
                "created_at": now,
                "run_at": func.coalesce(r.run_at, now + r.delay),
                "attempt_count": literal(0),
                "retry_count": literal(0),
                "max_retries": r.max_retries,
                "max_runtime_seconds": r.max_runtime_seconds,
                "concurrency_key": r.concurrency_key,
                "concurrency_limit": r.concurrency_limit,
                "rate_key": r.rate_key,
            }
            self.insert_jobs_from_arrays = (
                insert(jobs)
                .from_select(list(from_arrays), select(*from_arrays.values()).order_by(r.ord))
                .returning(j.id, j.queue, j.type)
            )
            if dialect.history_in_one_statement and dialect.json_string is not None:
                # Their ENQUEUED events in the same statement ({"queue":..,"type":..},
                # actor :p_actor): one round trip for the whole batch.
                inserted = self.insert_jobs_from_arrays.cte("inserted")
                c = inserted.c
                detail = (
                    literal('{"queue":')
                    + dialect.json_string(c.queue)
                    + literal(',"type":')
                    + dialect.json_string(c.type)
                    + literal("}")
                )
                logged = (
                    insert(events)
                    .from_select(
                        ["job_id", "ts", "event", "actor", "detail"],
                        select(
                            c.id, now, literal(Event.ENQUEUED.value), bindparam("p_actor"), detail
                        ).order_by(c.id),
                    )
                    .cte("logged")
                )
                self.insert_jobs_from_arrays = select(c.id, c.queue, c.type).add_cte(logged)
                self.bulk_insert_writes_events = True
        self.insert_event = insert(events).values(
            job_id=bindparam("p_job_id"),
            ts=now,
            event=bindparam("p_event"),
            actor=bindparam("p_actor"),
            detail=bindparam("p_detail"),
        )
        # Many events at once as arrays (a_job_id, a_event, a_actor, a_detail), where
        # the backend takes rows as arrays.
        self.insert_events_from_arrays = None
        if dialect.rows_from_arrays is not None:
            e = events.c
            rows = dialect.rows_from_arrays(
                [
                    ("job_id", e.job_id.type),
                    ("event", e.event.type),
                    ("actor", e.actor.type),
                    ("detail", e.detail.type),
                ]
            )
            self.insert_events_from_arrays = insert(events).from_select(
                ["job_id", "ts", "event", "actor", "detail"],
                select(rows.c.job_id, now, rows.c.event, rows.c.actor, rows.c.detail).order_by(
                    rows.c.ord
                ),
            )
        # -- wake-ups: tell other processes' workers that a queue got jobs -----------
        # One channel per job table, so two apps' queues in one database stay apart.
        self.wake_channel = f"sqlq_jobs:{jobs.fullname}"[:CHANNEL_MAX]
        self.notify_jobs = None if dialect.notify_sql is None else text(dialect.notify_sql)
        # Finishes get a channel of their own (payload: the job ids), so a process
        # waiting for results is not woken by every enqueue, nor a worker by finishes.
        self.finish_channel = f"sqlq_done:{jobs.fullname}"[:CHANNEL_MAX]
        # The shared advisory lock a finish listener holds while it listens, so that
        # finishing transactions can tell whether anyone would hear a NOTIFY.
        self.finish_listener_mark = (
            WAITERS_LOCK_CLASS,
            zlib.crc32(self.finish_channel.encode()) & 0x7FFF_FFFF,
        )
        self.finish_waiters = None if dialect.waiters_sql is None else text(dialect.waiters_sql)

    def insert_unless_duplicate(
        self, connection: Connection, statement: Any, params: Mapping[str, Any]
    ) -> int | None:
        """Run a dedupe insert: the new job's id, or None when a live job holds its key."""
        is_duplicate_key = self.dialect.is_duplicate_key
        if is_duplicate_key is None:
            if statement is self.insert_job or statement is self.insert_job_unless_duplicate:
                # Prebuilt (not extended with a host app's columns for this call).
                result = self.execute(connection, statement, params)
            else:
                result = connection.execute(statement, params)
            job_id = result.scalar_one_or_none()
            return None if job_id is None else int(job_id)
        savepoint = connection.begin_nested()
        try:
            job_id = int(connection.execute(statement, params).scalar_one())
        except DBAPIError as exc:
            if self.dialect.rolls_back_transaction(exc):
                # A deadlock victim: the database rolled the whole transaction back,
                # the savepoint with it. Rolling back to it would fail ("SAVEPOINT ...
                # does not exist") and hide the error that says to run it again.
                raise
            savepoint.rollback()
            if isinstance(exc, IntegrityError) and is_duplicate_key(exc):
                return None
            raise
        savepoint.commit()
        return job_id
