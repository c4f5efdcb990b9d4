"""Administration by id (cancel, manual retry), the worker registry, small reads."""

from __future__ import annotations

from sqlalchemy import (
    bindparam,
    delete,
    func,
    select,
)

from sqlq_orm.db.statements.base import StatementGroup, lease_cleared
from sqlq_orm.schema.states import JobStatus


class AdminStatements(StatementGroup):
    """Administration by id (cancel, manual retry), the worker registry, small reads."""

    def _build_admin(self) -> None:
        jobs = self.tables.jobs
        j = self.tables.jobs.c
        now = self.now
        dialect = self.dialect
        tables = self.tables
        seen = j.status == bindparam("p_status")
        # -- cancel / retry (by id, for people and apps) -----------------------------
        self.lock_job = (
            select(j.status, j.attempt_count, j.claimed_by)
            .where(j.id == bindparam("p_id"))
            .with_for_update()
        )
        # Queue.result / wait: one job's outcome, by primary key.
        self.job_outcome = select(j.status, j.result, j.error_code, j.error_detail).where(
            j.id == bindparam("p_id")
        )
        self.cancel = (
            self.update_by_id(jobs)
            .where(j.id == bindparam("p_id"), seen)
            .values(status=JobStatus.CANCELLED.value, finished_at=now, **lease_cleared())
        )
        self.manual_retry = self.returning_update(
            self.update_by_id(jobs)
            .where(j.id == bindparam("p_id"), seen)
            .values(
                status=JobStatus.QUEUED.value,
                run_at=now,
                retry_count=0,
                finished_at=None,
                **lease_cleared(),
            ),
            [j.queue],  # whose workers to wake
            by_id=True,
        )

        # -- worker registry -------------------------------------------------------
        workers = tables.workers
        w = workers.c
        register = dialect.insert(workers).values(
            id=bindparam("p_worker"),
            hostname=bindparam("p_hostname"),
            pid=bindparam("p_pid"),
            queues=bindparam("p_queues"),
            concurrency=bindparam("p_concurrency"),
            pool=bindparam("p_pool"),
            started_at=now,
            last_seen_at=now,
        )
        self.upsert_worker = register.on_conflict_do_update(
            index_elements=[w.id],
            set_={
                "hostname": register.excluded.hostname,
                "pid": register.excluded.pid,
                "queues": register.excluded.queues,
                "concurrency": register.excluded.concurrency,
                "pool": register.excluded.pool,
                "last_seen_at": register.excluded.last_seen_at,  # now, as proposed
            },
        )
        self.delete_worker = delete(workers).where(w.id == bindparam("p_worker"))

        # -- small reads -----------------------------------------------------------
        self.count_by_status = select(j.status, func.count()).group_by(j.status)
