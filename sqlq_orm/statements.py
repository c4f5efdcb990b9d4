"""The queue's SQL, built once per :class:`~sqlq_orm.service.Queue` and reused.

Hot paths (claim, start, heartbeat, finish) run these prebuilt Core statements with
bound parameters; nothing here goes through an ORM flush. Every write made on behalf
of a lease is guarded by ``id``, ``lease_token`` and the expected status, and callers
check the row count (or the ``RETURNING`` rows) to learn whether it took.

Bound parameter names start with ``p_`` so they never collide with column names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    null,
    or_,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.dialects import DialectSupport, row_number
from sqlq_orm.states import ACTIVE, HELD, AttemptStatus, JobStatus

HELD_VALUES = sorted(s.value for s in HELD)
ACTIVE_VALUES = sorted(s.value for s in ACTIVE)


@dataclass(frozen=True)
class Tables:
    """The four tables the queue works on (the library's, or a host app's)."""

    jobs: Table
    attempts: Table
    events: Table
    workers: Table


def _lease_cleared() -> dict[str, Any]:
    return {"lease_token": None, "lease_expires_at": None, "deadline_at": None}


class Statements:
    """Every statement the queue runs, prebuilt for one set of tables and one clock."""

    def __init__(self, tables: Tables, dialect: DialectSupport, now: ColumnElement[int]) -> None:
        self.tables = tables
        self.dialect = dialect
        self.now = now
        jobs, attempts, events = tables.jobs, tables.attempts, tables.events
        j = jobs.c

        # -- enqueue ---------------------------------------------------------------
        self.job_columns = frozenset(jobs.c.keys())
        self.dedupe_where = and_(j.dedupe_key.is_not(None), j.status.in_(ACTIVE_VALUES))
        self.find_active_by_dedupe_key = select(j.id).where(
            j.dedupe_key == bindparam("p_dedupe_key"), j.status.in_(ACTIVE_VALUES)
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
        self.insert_job_unless_duplicate = (
            dialect.insert(jobs)
            .values(job_values)
            .on_conflict_do_nothing(index_elements=[j.dedupe_key], index_where=self.dedupe_where)
            .returning(j.id)
        )
        self.insert_event = insert(events).values(
            job_id=bindparam("p_job_id"),
            ts=now,
            event=bindparam("p_event"),
            actor=bindparam("p_actor"),
            detail=bindparam("p_detail"),
        )

        # -- claim -----------------------------------------------------------------
        self.claim = self._build_claim(start=False)
        self.claim_and_start = self._build_claim(start=True)
        # Claims that merge one pick per queue, built on first use per queue count.
        self._merged_claims: dict[tuple[int, bool], Any] = {}

        guard = and_(j.id == bindparam("p_id"), j.lease_token == bindparam("p_token"))
        deadline_from_now = case(
            (j.max_runtime_seconds.is_(None), null()), else_=now + j.max_runtime_seconds
        )

        # -- start -----------------------------------------------------------------
        self.start = (
            update(jobs)
            .where(guard, j.status == JobStatus.CLAIMED.value)
            .values(
                status=JobStatus.RUNNING.value,
                started_at=now,
                attempt_count=j.attempt_count + 1,
                deadline_at=deadline_from_now,
            )
            .returning(j.attempt_count, j.deadline_at)
        )
        self.open_attempt = insert(attempts).values(
            job_id=bindparam("p_job_id"),
            attempt=bindparam("p_attempt"),
            worker_id=bindparam("p_worker"),
            started_at=now,
            status=AttemptStatus.RUNNING.value,
        )

        # -- heartbeat -------------------------------------------------------------
        self.heartbeat = (
            update(jobs)
            .where(
                guard,
                j.status.in_(HELD_VALUES),
                or_(j.deadline_at.is_(None), j.deadline_at > now),
            )
            .values(heartbeat_at=now, lease_expires_at=now + bindparam("p_lease_seconds"))
            .returning(j.lease_expires_at)
        )
        self.lease_state = select(
            j.status,
            j.lease_token == bindparam("p_token"),
            and_(j.deadline_at.is_not(None), j.deadline_at <= now),
        ).where(j.id == bindparam("p_id"))

        # -- finish (each guarded by token and the status the caller saw) ------------
        seen = j.status == bindparam("p_status")
        self.succeed = (
            update(jobs)
            .where(guard, j.status == JobStatus.RUNNING.value)
            .values(
                status=JobStatus.SUCCEEDED.value,
                finished_at=now,
                result_ref=bindparam("p_result_ref"),
                error_code=None,
                error_detail=None,
                **_lease_cleared(),
            )
        )
        # succeed_many: the same guard for a whole batch, one (id, token) pair per
        # lease; RETURNING names the jobs whose guard still matched. "id IN" as well,
        # so SQLite looks the rows up by primary key instead of scanning RUNNING jobs.
        self.succeed_batch = (
            update(jobs)
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
                **_lease_cleared(),
            )
            .returning(j.id)
        )
        self.requeue_for_retry = (
            update(jobs)
            .where(guard, seen)
            .values(
                status=JobStatus.QUEUED.value,
                retry_count=j.retry_count + 1,
                run_at=now + bindparam("p_delay"),
                error_code=bindparam("p_code"),
                error_detail=bindparam("p_detail"),
                **_lease_cleared(),
            )
            .returning(j.run_at)
        )
        self.fail = (
            update(jobs)
            .where(guard, seen)
            .values(
                status=JobStatus.FAILED.value,
                finished_at=now,
                error_code=bindparam("p_code"),
                error_detail=bindparam("p_detail"),
                **_lease_cleared(),
            )
        )
        self.release = (
            update(jobs)
            .where(guard, j.status.in_(HELD_VALUES))
            .values(status=JobStatus.QUEUED.value, run_at=now, **_lease_cleared())
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
            set_={
                "finished_at": now,
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

        # -- sweep -----------------------------------------------------------------
        sweep_columns = (
            j.id,
            j.status,
            j.lease_token,
            j.claimed_by,
            j.attempt_count,
            j.retry_count,
            j.max_retries,
            j.max_runtime_seconds,
            j.lease_expires_at,
        )
        limit = bindparam("p_limit", type_=Integer)
        self.expired_leases = (
            select(*sweep_columns)
            .where(j.status.in_(HELD_VALUES), j.lease_expires_at <= now)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        # Only runs whose lease is still live: expired ones are the query above's, and
        # picking them here too would crowd timed-out runs out of a short batch, ending
        # the sweep before it reached them.
        self.past_deadline = (
            select(*sweep_columns)
            .where(
                j.status == JobStatus.RUNNING.value,
                j.deadline_at <= now,
                j.lease_expires_at > now,
            )
            .limit(limit)
            .with_for_update(skip_locked=True)
        )

        # -- cancel / retry (by id, for people and apps) -----------------------------
        self.lock_job = (
            select(j.status, j.attempt_count, j.claimed_by)
            .where(j.id == bindparam("p_id"))
            .with_for_update()
        )
        self.cancel = (
            update(jobs)
            .where(j.id == bindparam("p_id"), seen)
            .values(status=JobStatus.CANCELLED.value, finished_at=now, **_lease_cleared())
        )
        self.manual_retry = (
            update(jobs)
            .where(j.id == bindparam("p_id"), seen)
            .values(
                status=JobStatus.QUEUED.value,
                run_at=now,
                retry_count=0,
                finished_at=None,
                **_lease_cleared(),
            )
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
                "last_seen_at": now,
            },
        )
        self.delete_worker = delete(workers).where(w.id == bindparam("p_worker"))

        # -- small reads -----------------------------------------------------------
        self.count_by_status = select(j.status, func.count()).group_by(j.status)

    def claim_for(self, queues: Sequence[str], *, start: bool) -> tuple[Any, dict[str, Any]]:
        """The claim statement for these (distinct) queues and the parameters naming them."""
        if len(queues) > 1:
            key = (len(queues), start)
            statement = self._merged_claims.get(key)
            if statement is None:
                # A race here only builds the same statement twice.
                statement = self._build_claim(start=start, merged_queues=len(queues))
                self._merged_claims[key] = statement
            return statement, {f"p_queue_{i}": name for i, name in enumerate(queues)}
        return (self.claim_and_start if start else self.claim), {"p_queues": list(queues)}

    def _ready_jobs(self, queue_filter: ColumnElement[bool], *columns: Any) -> Any:
        """Ready jobs in claim order, at most ``p_limit`` of them."""
        j = self.tables.jobs.c
        # Matches ix_*_claim (queue, status, priority DESC, run_at, id): no sort.
        return (
            select(j.id, *columns)
            .where(queue_filter, j.status == JobStatus.QUEUED.value, j.run_at <= self.now)
            .order_by(j.priority.desc(), j.run_at, j.id)
            .limit(bindparam("p_limit", type_=Integer))
        )

    def _build_claim(self, *, start: bool, merged_queues: int = 0) -> Any:
        jobs = self.tables.jobs
        j = jobs.c
        now = self.now
        lock = self.dialect.lock_rows
        if merged_queues:
            # "queue IN (a, b) ORDER BY priority DESC, run_at, id" cannot follow the claim
            # index past its first column: PostgreSQL sorts every ready job of those
            # queues, then locks. Instead take the first p_limit of each queue in index
            # order (each locked as read), and the first p_limit of those: the same rows,
            # sorting at most queues * p_limit. On PostgreSQL the rows read but not
            # picked stay locked (skipped by other claimers) until this claim commits.
            branches = [
                lock(
                    self._ready_jobs(j.queue == bindparam(f"p_queue_{i}"), j.priority, j.run_at),
                    True,
                ).subquery(f"ready_{i}")
                for i in range(merged_queues)
            ]
            ready = union_all(*(select(b.c.id, b.c.priority, b.c.run_at) for b in branches))
            merged = ready.subquery("ready")
            candidates = (
                select(merged.c.id)
                .order_by(merged.c.priority.desc(), merged.c.run_at, merged.c.id)
                .limit(bindparam("p_limit", type_=Integer))
            )
        else:
            candidates = lock(
                self._ready_jobs(j.queue.in_(bindparam("p_queues", expanding=True))), True
            )
        picked = self.dialect.pick(candidates, "picked")
        # Number the picked rows so each gets its own token from the bound list.
        numbered = select(picked.c.id, row_number().label("rn")).subquery("numbered")
        values: dict[str, Any] = {
            "status": JobStatus.CLAIMED.value,
            "lease_token": self.dialect.token_for_row(numbered.c.rn),
            "claimed_by": bindparam("p_worker"),
            "claimed_at": now,
            "heartbeat_at": now,
            "lease_expires_at": now + bindparam("p_lease_seconds"),
        }
        if start:
            values.update(
                status=JobStatus.RUNNING.value,
                started_at=now,
                attempt_count=j.attempt_count + 1,
                deadline_at=case(
                    (j.max_runtime_seconds.is_(None), null()),
                    else_=now + j.max_runtime_seconds,
                ),
            )
        return (
            update(jobs)
            .where(j.id == numbered.c.id)
            .values(**values)
            .returning(
                j.id,
                j.lease_token,
                j.type,
                j.queue,
                j.payload,
                j.payload_ref,
                j.attempt_count,
                j.retry_count,
                j.max_retries,
                j.max_runtime_seconds,
                j.lease_expires_at,
                j.deadline_at,
            )
        )
