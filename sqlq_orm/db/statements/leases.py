"""Calls under a lease: start, heartbeat, finish, fail, release; attempt rows."""

from __future__ import annotations

from sqlalchemy import (
    and_,
    bindparam,
    insert,
    or_,
    select,
    tuple_,
    update,
)

from sqlq_orm.db.statements.base import HELD_VALUES, StatementGroup, lease_cleared, status_in
from sqlq_orm.schema.states import AttemptStatus, JobStatus


class LeasesStatements(StatementGroup):
    """Calls under a lease: start, heartbeat, finish, fail, release; attempt rows."""

    def _build_leases(self) -> None:
        jobs = self.tables.jobs
        attempts = self.tables.attempts
        j = self.tables.jobs.c
        now = self.now
        dialect = self.dialect
        guard = self.lease_guard()
        deadline_from_now = self.deadline_from_now()
        # -- start -----------------------------------------------------------------
        self.start = self.returning_update(
            self.update_by_id(jobs)
            .where(guard, j.status == JobStatus.CLAIMED.value)
            .values(
                status=JobStatus.RUNNING.value,
                started_at=now,
                attempt_count=j.attempt_count + 1,
                deadline_at=deadline_from_now,
            ),
            [j.attempt_count, j.deadline_at],
            by_id=True,
        )
        self.open_attempt = insert(attempts).values(
            job_id=bindparam("p_job_id"),
            attempt=bindparam("p_attempt"),
            worker_id=bindparam("p_worker"),
            started_at=now,
            status=AttemptStatus.RUNNING.value,
        )

        # -- heartbeat -------------------------------------------------------------
        self.heartbeat = self.returning_update(
            self.update_by_id(jobs)
            .where(
                guard,
                status_in(j.status, HELD_VALUES),
                or_(j.deadline_at.is_(None), j.deadline_at > now),
            )
            .values(heartbeat_at=now, lease_expires_at=now + bindparam("p_lease_seconds")),
            [j.lease_expires_at],
            by_id=True,
        )
        self.lease_state = select(
            j.status,
            j.lease_token == bindparam("p_token"),
            and_(j.deadline_at.is_not(None), j.deadline_at <= now),
        ).where(j.id == bindparam("p_id"))

        # -- finish (each guarded by token and the status the caller saw) ------------
        seen = j.status == bindparam("p_status")
        self.succeed = (
            self.update_by_id(jobs)
            .where(guard, j.status == JobStatus.RUNNING.value)
            .values(
                status=JobStatus.SUCCEEDED.value,
                finished_at=now,
                result_ref=bindparam("p_result_ref"),
                error_code=None,
                error_detail=None,
                **lease_cleared(),
            )
        )
        # succeed_many: the same guard for a whole batch, one (id, token) pair per
        # lease; RETURNING names the jobs whose guard still matched. "id IN" as well,
        # so SQLite looks the rows up by primary key instead of scanning RUNNING jobs.
        self.succeed_batch = self.returning_update(
            self.update_by_id(jobs)
            .where(
                j.id.in_(bindparam("p_ids", expanding=True)),
                tuple_(j.id, j.lease_token).in_(bindparam("p_pairs", expanding=True)),
                j.status == JobStatus.RUNNING.value,
            )
            .values(
                status=JobStatus.SUCCEEDED.value,
                finished_at=now,
                result_ref=None,
                error_code=None,
                error_detail=None,
                **lease_cleared(),
            ),
            [j.id],
        )
        self.requeue_for_retry = self.returning_update(
            self.update_by_id(jobs)
            .where(guard, seen)
            .values(
                status=JobStatus.QUEUED.value,
                retry_count=j.retry_count + 1,
                run_at=now + bindparam("p_delay"),
                error_code=bindparam("p_code"),
                error_detail=bindparam("p_detail"),
                **lease_cleared(),
            ),
            [j.run_at],
            by_id=True,
        )
        self.fail = (
            self.update_by_id(jobs)
            .where(guard, seen)
            .values(
                status=JobStatus.FAILED.value,
                finished_at=now,
                error_code=bindparam("p_code"),
                error_detail=bindparam("p_detail"),
                **lease_cleared(),
            )
        )
        self.release = (
            self.update_by_id(jobs)
            .where(guard, status_in(j.status, HELD_VALUES))
            .values(status=JobStatus.QUEUED.value, run_at=now, **lease_cleared())
        )
        a = attempts.c
        upsert = dialect.insert(attempts).values(
            job_id=bindparam("p_job_id"),
            attempt=bindparam("p_attempt"),
            worker_id=bindparam("p_worker"),
            started_at=now,
            finished_at=now,
            status=bindparam("p_attempt_status"),
            error_code=bindparam("p_code"),
            error_detail=bindparam("p_detail"),
        )
        self.close_attempt_upsert = upsert.on_conflict_do_update(
            index_elements=[a.job_id, a.attempt],
            # The proposed row's finished_at is "now" too; naming it keeps the clock's
            # bound parameter out of the conflict clause (PyMySQL's executemany cannot
            # batch an ON DUPLICATE KEY UPDATE that has parameters).
            set_={
                "finished_at": upsert.excluded.finished_at,
                "status": upsert.excluded.status,
                "error_code": upsert.excluded.error_code,
                "error_detail": upsert.excluded.error_detail,
            },
        )
        self.close_open_attempt = (
            update(attempts)
            .where(
                a.job_id == bindparam("p_job_id"),
                a.attempt == bindparam("p_attempt"),
                a.status == AttemptStatus.RUNNING.value,
            )
            .values(
                status=bindparam("p_attempt_status"),
                finished_at=now,
                error_code=bindparam("p_code"),
                error_detail=bindparam("p_detail"),
            )
        )
