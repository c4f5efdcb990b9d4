"""Calls under a lease: start, heartbeat, finish, fail, release; attempt rows."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    and_,
    bindparam,
    case,
    func,
    insert,
    or_,
    select,
    true,
    tuple_,
    update,
)

from sqlq_orm.db.statements.base import HELD_VALUES, lease_cleared, status_in
from sqlq_orm.db.statements.dependencies import DependencyStatements
from sqlq_orm.db.statements.history import HistoryStatements
from sqlq_orm.db.statements.returning import LOCKED_IDS
from sqlq_orm.schema.states import AttemptStatus, JobStatus


class LeasesStatements(HistoryStatements, DependencyStatements):
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
        # start_many: the same for a batch, fenced per (id, token) pair; RETURNING names
        # the jobs started ("id IN" as well, for the primary-key lookup).
        self.start_batch = self.returning_update(
            self.update_by_id(jobs)
            .where(
                j.id.in_(bindparam("p_ids", expanding=True)),
                tuple_(j.id, j.lease_token).in_(bindparam("p_pairs", expanding=True)),
                j.status == JobStatus.CLAIMED.value,
            )
            .values(
                status=JobStatus.RUNNING.value,
                started_at=now,
                attempt_count=j.attempt_count + 1,
                deadline_at=deadline_from_now,
            ),
            [j.id, j.attempt_count, j.deadline_at],
        )
        self.open_attempt = insert(attempts).values(
            job_id=bindparam("p_job_id"),
            attempt=bindparam("p_attempt"),
            worker_id=bindparam("p_worker"),
            started_at=now,
            status=AttemptStatus.RUNNING.value,
        )

        # -- heartbeat (one lease or many) ------------------------------------------
        # The lease guard for every lease at once, (id, token) pairs; RETURNING names
        # the leases renewed. "id IN" as well, for the primary-key lookup (as below).
        renewable = and_(
            j.id.in_(bindparam("p_ids", expanding=True)),
            tuple_(j.id, j.lease_token).in_(bindparam("p_pairs", expanding=True)),
            status_in(j.status, HELD_VALUES),
            or_(j.deadline_at.is_(None), j.deadline_at > now),
        )
        renewal = {
            "heartbeat_at": now,
            "lease_expires_at": self.later(bindparam("p_lease_seconds")),
        }
        # Waits for a row another transaction holds (heartbeat of one lease: only that
        # job's renewal waits).
        self.heartbeat_batch = self.returning_update(
            self.update_by_id(jobs).where(renewable).values(**renewal),
            [j.id, j.lease_expires_at],
        )
        # A claim's own leases of job types with a lease length of their own (a task's
        # lease=), in the claim's transaction: renewed as a heartbeat would, no more.
        self.set_leases = self.returning_update(
            self.update_by_id(jobs)
            .where(renewable)
            .values(lease_expires_at=self.later(bindparam("p_lease_seconds"))),
            [j.id, j.lease_expires_at],
        )
        # Passes over the rows another transaction holds locked (an app transaction
        # that enqueued a child of one of them, say) and renews the rest: one locked
        # row must not hold up every lease of the worker until they all expire. A
        # skipped lease is renewed at the next round. FOR NO KEY UPDATE on PostgreSQL
        # (key_share): what the UPDATE takes anyway, and no conflict with the key-share
        # locks of rows inserted that reference the job (its events, a child's edge).
        unlocked = (
            select(j.id)
            .where(renewable)
            .order_by(j.id)
            .with_for_update(skip_locked=True, key_share=True)
        )
        self.heartbeat_unlocked = self.returning_update(
            self.update_by_id(jobs).where(renewable, j.id.in_(unlocked)).values(**renewal),
            [j.id, j.lease_expires_at],
            lock=unlocked,
            locked_update=self.update_by_id(jobs)
            .where(renewable, j.id.in_(bindparam(LOCKED_IDS, expanding=True)))
            .values(**renewal),
        )
        # Why a renewal was refused, for the leases the renewal did not return: still
        # ours (then skipped as locked, or past its max runtime), or lost.
        self.lease_states = select(
            j.id,
            and_(
                status_in(j.status, HELD_VALUES),
                tuple_(j.id, j.lease_token).in_(bindparam("p_pairs", expanding=True)),
            ).label("ours"),
            and_(
                j.deadline_at.is_not(None),
                j.deadline_at <= now,
            ).label("past_deadline"),
        ).where(j.id.in_(bindparam("p_ids", expanding=True)))

        # -- finish (each guarded by token and the status the caller saw) ------------
        seen = j.status == bindparam("p_status")
        # RETURNING id (and has_dependents): a row back means the guard matched.
        self.succeed = self.returning_update(
            self.update_by_id(jobs)
            .where(guard, j.status == JobStatus.RUNNING.value)
            .values(
                status=JobStatus.SUCCEEDED.value,
                finished_at=now,
                result_ref=bindparam("p_result_ref"),
                result=bindparam("p_result"),
                error_code=None,
                error_detail=None,
                **lease_cleared(),
            ),
            [j.id, *self.dependents_flag()],
            by_id=True,
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
            # has_dependents (where the models have dependencies): whether any job
            # waits for this one, so only a batch with children looks for them.
            [j.id, j.attempt_count, j.claimed_by, *self.dependents_flag()],
        )
        # The same with the attempt closes and events in the statement, where allowed.
        self.succeed_batch_with_history = (
            self.with_history(self.succeed_batch, self.success_history)
            if self.dialect.history_in_one_statement
            else None
        )
        # ... and for a batch whose attempt rows all stand for their SUCCEEDED events
        # (every lease claimed with start=True): the attempt closes alone.
        self.succeed_stand_ins_with_history = (
            self.with_history(self.succeed_batch, lambda rows: self.success_history(rows)[:1])
            if self.dialect.history_in_one_statement
            else None
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
        # A batch of failed runs (fail_many, a sweep) as one guarded UPDATE over arrays,
        # where the backend takes rows as arrays: each row requeued with its delay
        # (a_retry) or failed, if its id, token and seen status still match.
        self.end_runs_from_arrays = None
        if dialect.rows_from_arrays is not None:
            r = dialect.rows_from_arrays(
                [
                    ("id", j.id.type),
                    ("token", j.lease_token.type),
                    ("seen", j.status.type),
                    ("retry", Boolean()),
                    ("delay", BigInteger()),
                    ("code", j.error_code.type),
                    ("detail", j.error_detail.type),
                ]
            ).c
            retry = r.retry.is_(true())
            self.end_runs_from_arrays = (
                update(jobs)
                .where(j.id == r.id, j.lease_token == r.token, j.status == r.seen)
                .values(
                    status=case((retry, JobStatus.QUEUED.value), else_=JobStatus.FAILED.value),
                    retry_count=case((retry, j.retry_count + 1), else_=j.retry_count),
                    run_at=case((retry, now + r.delay), else_=j.run_at),
                    finished_at=case((retry, j.finished_at), else_=now),
                    error_code=r.code,
                    error_detail=r.detail,
                    **lease_cleared(),
                )
                .returning(j.id, j.run_at)
            )
        self.release = (
            self.update_by_id(jobs)
            .where(guard, status_in(j.status, HELD_VALUES))
            .values(status=JobStatus.QUEUED.value, run_at=now, **lease_cleared())
        )
        # snooze: like release, with run_at pushed out and the snoozes counted.
        self.snooze = (
            self.update_by_id(jobs)
            .where(guard, status_in(j.status, HELD_VALUES))
            .values(
                status=JobStatus.QUEUED.value,
                run_at=now + bindparam("p_delay"),
                **lease_cleared(),
            )
        )
        self.count_snoozes = (
            select(func.count())
            .select_from(attempts)
            .where(
                attempts.c.job_id == bindparam("p_job_id"),
                attempts.c.status == AttemptStatus.SNOOZED.value,
            )
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
