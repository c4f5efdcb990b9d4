"""Adding jobs and writing events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from sqlq_orm.db.statements.base import ACTIVE_VALUES, StatementGroup, status_in
from sqlq_orm.schema.states import JobStatus

CHANNEL_MAX = 63
"""PostgreSQL truncates longer channel names (NAMEDATALEN - 1)."""


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
        self.insert_event = insert(events).values(
            job_id=bindparam("p_job_id"),
            ts=now,
            event=bindparam("p_event"),
            actor=bindparam("p_actor"),
            detail=bindparam("p_detail"),
        )
        # -- wake-ups: tell other processes' workers that a queue got jobs -----------
        # One channel per job table, so two apps' queues in one database stay apart.
        self.wake_channel = f"sqlq_jobs:{jobs.fullname}"[:CHANNEL_MAX]
        self.notify_jobs = None if dialect.notify_sql is None else text(dialect.notify_sql)

    def insert_unless_duplicate(
        self, connection: Connection, statement: Any, params: Mapping[str, Any]
    ) -> int | None:
        """Run a dedupe insert: the new job's id, or None when a live job holds its key."""
        is_duplicate_key = self.dialect.is_duplicate_key
        if is_duplicate_key is None:
            job_id = connection.execute(statement, params).scalar_one_or_none()
            return None if job_id is None else int(job_id)
        try:
            with connection.begin_nested():
                return int(connection.execute(statement, params).scalar_one())
        except IntegrityError as exc:
            if is_duplicate_key(exc):
                return None
            raise
