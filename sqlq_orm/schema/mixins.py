"""Declarative mixins: the schema, ready to bind to any SQLAlchemy declarative base.

A host app binds them to its own base and may add columns of its own::

    class Base(DeclarativeBase):
        pass

    class Job(JobMixin, Base):
        tenant_id: Mapped[int | None] = mapped_column(index=True)

    class JobAttempt(JobAttemptMixin, Base):
        pass

    class JobEvent(JobEventMixin, Base):
        pass

Anything that depends on the concrete class (table names, foreign keys, constraints,
indexes, relationships) comes from ``declared_attr`` so each binding gets its own.
A host that renames tables or classes sets the ``__sqlq_*__`` class variables below.

Every constraint and index, primary keys included, carries an explicit,
table-qualified name (``pk_sqlq_jobs``, as the migrations create it) wrapped in
``conv`` so it is the same whatever naming convention the host's metadata has:
Alembic's batch mode on SQLite drops unnamed CHECK constraints, and index names must
be unique per schema on PostgreSQL.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
    column,
    text,
)
from sqlalchemy.orm import Mapped, declared_attr, mapped_column, relationship
from sqlalchemy.sql.elements import conv

from sqlq_orm.schema.host_bases import DeclarativeOnly
from sqlq_orm.schema.json_text import JsonText
from sqlq_orm.schema.registry import remember_job_model
from sqlq_orm.schema.states import ACTIVE, HELD, TERMINAL, AttemptStatus, Event, JobStatus

# SQLite only makes INTEGER PRIMARY KEY an alias of the rowid (and so auto-increment);
# everywhere else the id is a 64-bit integer.
IdType = BigInteger().with_variant(Integer(), "sqlite")

TYPE_MAX = 200
QUEUE_MAX = 100
WORKER_ID_MAX = 200
ERROR_CODE_MAX = 100
ERROR_DETAIL_MAX = 500
REF_MAX = 1000
DEDUPE_KEY_MAX = 255
CONCURRENCY_KEY_MAX = 255
RATE_KEY_MAX = 255

HELD_LEASE = "lease_expires_at IS NOT NULL"
"""The partial ``ix_*_lease``'s predicate: exactly the held jobs (CLAIMED, RUNNING)."""
HAS_DEADLINE = "deadline_at IS NOT NULL"
"""The partial ``ix_*_deadline``'s predicate: running jobs with a max runtime."""
HAS_FINISHED = "finished_at IS NOT NULL"
"""The partial ``ix_*_finished``'s predicate: finished jobs (SUCCEEDED, FAILED, CANCELLED)."""
HAS_ERROR_CODE = "error_code IS NOT NULL"
"""The partial ``ix_*_failed_code``'s predicate: jobs whose last run failed (the code is
kept until a success clears it)."""


MYSQL_TABLE_OPTIONS: dict[str, str] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    # Binary collation: keys, queue names and lease tokens compare case- and
    # accent-sensitively, as on PostgreSQL and SQLite (the server default folds case).
    "mysql_collate": "utf8mb4_bin",
}
"""Table options on MySQL/MariaDB (other databases ignore ``mysql_*`` arguments)."""


def _in(column: str, values: Any) -> str:
    """Render ``column IN ('A', 'B')`` for a CHECK constraint (values are our enums)."""
    listed = ", ".join(f"'{v.value}'" for v in sorted(values, key=lambda v: v.value))
    return f"{column} IN ({listed})"


JOB_MIXIN_COLUMNS = frozenset(
    {
        "id", "queue", "type", "status", "priority", "payload", "payload_ref",
        "result_ref", "dedupe_key", "created_at", "run_at", "claimed_at", "started_at",
        "heartbeat_at", "lease_expires_at", "deadline_at", "finished_at", "claimed_by",
        "lease_token", "attempt_count", "retry_count", "max_retries",
        "max_runtime_seconds", "error_code", "error_detail", "pending_parents",
        "has_dependents", "concurrency_key", "concurrency_limit", "result",
        "rate_key", "rate_started_at", "dedupe_period",
    }
)  # fmt: skip
"""The columns :class:`JobMixin` defines; any other column of a job table is the app's."""


class JobMixin(DeclarativeOnly):
    """The current state of a job: one row per job (default table ``sqlq_jobs``)."""

    __sqlq_attempt_model__: ClassVar[str] = "JobAttempt"
    __sqlq_event_model__: ClassVar[str] = "JobEvent"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Known as a job table to the SQLite rebuild guard, whatever its name.
        super().__init_subclass__(**kwargs)
        remember_job_model(cls)

    @declared_attr.directive
    def __tablename__(cls) -> str:
        return "sqlq_jobs"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    queue: Mapped[str] = mapped_column(String(QUEUE_MAX), default="default")
    type: Mapped[str] = mapped_column(String(TYPE_MAX))
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED.value)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # JSON text written by the service, so the size cap is measured on what is
    # stored and a corrupted value can be detected and reported per job; held in the
    # database's JSON type (JSONB on PostgreSQL, since sqlq_0010) so it can be searched.
    payload: Mapped[str | None] = mapped_column(JsonText)
    payload_ref: Mapped[str | None] = mapped_column(String(REF_MAX))
    result_ref: Mapped[str | None] = mapped_column(String(REF_MAX))
    dedupe_key: Mapped[str | None] = mapped_column(String(DEDUPE_KEY_MAX))

    created_at: Mapped[int] = mapped_column(BigInteger)
    run_at: Mapped[int] = mapped_column(BigInteger)
    claimed_at: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[int | None] = mapped_column(BigInteger)
    heartbeat_at: Mapped[int | None] = mapped_column(BigInteger)
    lease_expires_at: Mapped[int | None] = mapped_column(BigInteger)
    # started_at + max_runtime_seconds, set at start so the sweeper's query is a
    # plain range on an index.
    deadline_at: Mapped[int | None] = mapped_column(BigInteger)
    finished_at: Mapped[int | None] = mapped_column(BigInteger)

    claimed_by: Mapped[str | None] = mapped_column(String(WORKER_ID_MAX))
    lease_token: Mapped[str | None] = mapped_column(String(64))

    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    retry_count: Mapped[int] = mapped_column(Integer, default=0)
    max_retries: Mapped[int] = mapped_column(Integer, default=3)
    max_runtime_seconds: Mapped[int | None] = mapped_column(Integer)

    error_code: Mapped[str | None] = mapped_column(String(ERROR_CODE_MAX))
    error_detail: Mapped[str | None] = mapped_column(String(ERROR_DETAIL_MAX))
    # Parents (depends_on) this job still waits for; WAITING while above 0. Each
    # parent's end recomputes it from the edges under the row lock, so two parents
    # ending at once cannot both miss the last one, and a parent that ends twice
    # (failed, retried, succeeded) is not counted twice (see JobDependencyMixin).
    # No Python-side default: inserts leave it out, so the queue's enqueue also works on
    # a schema older than the column (as long as no job depends on another).
    pending_parents: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # 1 once a job has a child: set under the parent's row lock by the child's enqueue,
    # and returned by the statement that finishes the job (on PostgreSQL from the row
    # version it waited for), so only a job with children looks for them.
    has_dependents: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # After sqlq_0003's, as sqlq_0004 added them (a rebuilt SQLite table keeps this order).
    # At most concurrency_limit jobs sharing concurrency_key are CLAIMED or RUNNING
    # at once (enforced by the claim; both NULL for a job without a limit).
    concurrency_key: Mapped[str | None] = mapped_column(String(CONCURRENCY_KEY_MAX))
    concurrency_limit: Mapped[int | None] = mapped_column(Integer)
    # After them, as sqlq_0007 added it. What a handler returned as a JobResult (a task's
    # return value): JSON text, capped like the payload; NULL when it returned none.
    # The database's JSON type like the payload (sqlq_0010): the same text, the same
    # guarantees, and a result is as worth searching as an argument.
    result: Mapped[str | None] = mapped_column(JsonText)
    # After it, as sqlq_0011 added them. In a queue with a rate limit, the limit
    # counts starts per rate_key (NULL: the queue's one shared bucket); rate_started_at
    # is when the claim last started the job under that limit (NULL elsewhere).
    rate_key: Mapped[str | None] = mapped_column(String(RATE_KEY_MAX))
    rate_started_at: Mapped[int | None] = mapped_column(BigInteger)
    # The dedupe_key also holds for this many seconds after the job SUCCEEDED or
    # FAILED (from finished_at); NULL: only while the job is unfinished.
    dedupe_period: Mapped[int | None] = mapped_column(Integer)

    @declared_attr
    def attempts(cls) -> Mapped[list[Any]]:
        return relationship(
            cls.__sqlq_attempt_model__,
            back_populates="job",
            cascade="all, delete-orphan",
            passive_deletes=True,
            order_by=f"{cls.__sqlq_attempt_model__}.attempt",
        )

    @declared_attr
    def events(cls) -> Mapped[list[Any]]:
        return relationship(
            cls.__sqlq_event_model__,
            back_populates="job",
            cascade="all, delete-orphan",
            passive_deletes=True,
            order_by=f"({cls.__sqlq_event_model__}.ts, {cls.__sqlq_event_model__}.id)",
        )

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        t = cls.__tablename__
        held = _in("status", HELD)
        return (
            PrimaryKeyConstraint("id", name=conv(f"pk_{t}")),
            CheckConstraint(_in("status", JobStatus), name=conv(f"ck_{t}_status_valid")),
            CheckConstraint("retry_count >= 0", name=conv(f"ck_{t}_retry_count_nonneg")),
            CheckConstraint("max_retries >= 0", name=conv(f"ck_{t}_max_retries_nonneg")),
            CheckConstraint("attempt_count >= 0", name=conv(f"ck_{t}_attempt_count_nonneg")),
            CheckConstraint(
                "max_runtime_seconds IS NULL OR max_runtime_seconds > 0",
                name=conv(f"ck_{t}_max_runtime_positive"),
            ),
            CheckConstraint(
                f"NOT ({held}) OR (claimed_by IS NOT NULL AND lease_token IS NOT NULL"
                " AND lease_expires_at IS NOT NULL)",
                name=conv(f"ck_{t}_held_has_lease"),
            ),
            CheckConstraint(
                f"({held}) OR (lease_token IS NULL AND lease_expires_at IS NULL)",
                name=conv(f"ck_{t}_lease_only_when_held"),
            ),
            CheckConstraint(
                "status <> 'RUNNING' OR started_at IS NOT NULL",
                name=conv(f"ck_{t}_running_has_started"),
            ),
            CheckConstraint(
                f"NOT ({_in('status', TERMINAL)}) OR finished_at IS NOT NULL",
                name=conv(f"ck_{t}_terminal_has_finished"),
            ),
            CheckConstraint("pending_parents >= 0", name=conv(f"ck_{t}_pending_parents_nonneg")),
            CheckConstraint(
                "status <> 'WAITING' OR pending_parents > 0",
                name=conv(f"ck_{t}_waiting_has_parents"),
            ),
            CheckConstraint(
                "(concurrency_key IS NULL AND concurrency_limit IS NULL)"
                " OR (concurrency_key IS NOT NULL AND concurrency_limit >= 1)",
                name=conv(f"ck_{t}_concurrency_limit_with_key"),
            ),
            # claim: WHERE queue = ? AND status = 'QUEUED' AND run_at <= now
            #        ORDER BY priority DESC, run_at, id
            # DESC on a column, not text("priority DESC"): on SQLite, Alembic's
            # autogenerate compares column indexes but not textual expressions.
            Index(
                conv(f"ix_{t}_claim"),
                "queue",
                "status",
                column("priority").desc(),
                "run_at",
                "id",
            ),
            # sweep (expired leases): WHERE status IN (held) AND lease_expires_at <= now;
            # also the held jobs of the stats (oldest_held), which add the predicate.
            # Partial where the database allows: only held jobs have a lease (the CHECKs
            # above; a finished job's lease is cleared), so a queued or finished job
            # costs this index nothing, and `lease_expires_at <= ?` implies the WHERE.
            Index(
                conv(f"ix_{t}_lease"),
                "status",
                "lease_expires_at",
                sqlite_where=text(HELD_LEASE),
                postgresql_where=text(HELD_LEASE),
            ),
            # sweep (max runtime): WHERE status = 'RUNNING' AND deadline_at <= now.
            # Partial likewise: only a running job with a max runtime has a deadline.
            Index(
                conv(f"ix_{t}_deadline"),
                "status",
                "deadline_at",
                sqlite_where=text(HAS_DEADLINE),
                postgresql_where=text(HAS_DEADLINE),
            ),
            # failure Top-N: WHERE status = 'FAILED' AND error_code IS NOT NULL GROUP BY
            # error_code. Partial (sqlq_0014): a job enters it with its first failure
            # and leaves it on success, so enqueues and claims never touch it.
            Index(
                conv(f"ix_{t}_failed_code"),
                "status",
                "error_code",
                sqlite_where=text(HAS_ERROR_CODE),
                postgresql_where=text(HAS_ERROR_CODE),
            ),
            # retention: WHERE status = ? AND finished_at < cutoff. Partial likewise:
            # only a finished job has finished_at (an invariant `sqlq check` holds), so
            # a queued or running one is not in it.
            Index(
                conv(f"ix_{t}_finished"),
                "status",
                "finished_at",
                sqlite_where=text(HAS_FINISHED),
                postgresql_where=text(HAS_FINISHED),
            ),
            # per-type stats: GROUP BY status, type; the retry distribution: WHERE status
            # IN (...) GROUP BY type, retry_count, status (covered: no row is read); a
            # bulk action's count: WHERE status = ? AND type = ?.
            Index(conv(f"ix_{t}_status_type"), "status", "type", "retry_count"),
            # the claim's concurrency check: count jobs WHERE concurrency_key = ? AND
            # status IN (held). Partial where the database allows: jobs without a key
            # (most of them) cost this index nothing.
            Index(
                conv(f"ix_{t}_concurrency"),
                "concurrency_key",
                "status",
                sqlite_where=text("concurrency_key IS NOT NULL"),
                postgresql_where=text("concurrency_key IS NOT NULL"),
            ),
            # the claim's rate-limit count: starts WHERE queue = ? AND rate_started_at
            # > now - period. Partial where the database allows: only jobs started
            # under a rate limit are in it.
            Index(
                conv(f"ix_{t}_rate_window"),
                "queue",
                "rate_started_at",
                sqlite_where=text("rate_started_at IS NOT NULL"),
                postgresql_where=text("rate_started_at IS NOT NULL"),
            ),
            # dedupe_period: a finished job's key held for a while after it ended
            Index(
                conv(f"ix_{t}_dedupe_period"),
                "dedupe_key",
                "finished_at",
                sqlite_where=text("dedupe_period IS NOT NULL"),
                postgresql_where=text("dedupe_period IS NOT NULL"),
            ),
            # idempotent enqueue: one unfinished job per dedupe key
            Index(
                conv(f"uq_{t}_dedupe_active"),
                "dedupe_key",
                unique=True,
                sqlite_where=text(f"dedupe_key IS NOT NULL AND {_in('status', ACTIVE)}"),
                postgresql_where=text(f"dedupe_key IS NOT NULL AND {_in('status', ACTIVE)}"),
            ),
            # SQLite: AUTOINCREMENT, so an id is never handed out twice (without it
            # SQLite takes max(id) + 1: pruning the newest jobs would give their ids
            # again). Other databases' sequences never go back anyway.
            {**MYSQL_TABLE_OPTIONS, "sqlite_autoincrement": True},
        )


class JobAttemptMixin(DeclarativeOnly):
    """One run of a job (default table ``sqlq_job_attempts``)."""

    __sqlq_job_table__: ClassVar[str] = "sqlq_jobs"
    __sqlq_job_model__: ClassVar[str] = "Job"

    @declared_attr.directive
    def __tablename__(cls) -> str:
        return "sqlq_job_attempts"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[str | None] = mapped_column(String(WORKER_ID_MAX))
    started_at: Mapped[int] = mapped_column(BigInteger)
    finished_at: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16), default=AttemptStatus.RUNNING.value)
    error_code: Mapped[str | None] = mapped_column(String(ERROR_CODE_MAX))
    error_detail: Mapped[str | None] = mapped_column(String(ERROR_DETAIL_MAX))
    # A worker's claim-and-start writes no CLAIMED, STARTED or SUCCEEDED event: this
    # row holds all they said (issue 27: a third of a drained job's writes). Set on
    # such rows only; sqlq_orm.ops.stand_ins reads the three events back from them.
    after_event_id: Mapped[int | None] = mapped_column(BigInteger, sort_order=1)
    """On a row that stands for its CLAIMED and STARTED events (both at ``started_at``)
    and, once ``SUCCEEDED``, its SUCCEEDED event (at ``finished_at``): the id of the
    job's last written event when it was claimed, which places the two in the
    job's timeline. NULL on rows whose events are all in the events table."""
    lease_seconds: Mapped[int | None] = mapped_column(Integer, sort_order=1)
    """The claim's lease length, which its CLAIMED event reports (rows with
    ``after_event_id`` only)."""

    @declared_attr
    def job_id(cls) -> Mapped[int]:
        return mapped_column(
            IdType,
            ForeignKey(
                f"{cls.__sqlq_job_table__}.id",
                ondelete="CASCADE",
                name=conv(f"fk_{cls.__tablename__}_job_id"),
            ),
        )

    @declared_attr
    def job(cls) -> Mapped[Any]:
        return relationship(cls.__sqlq_job_model__, back_populates="attempts")

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        t = cls.__tablename__
        return (
            PrimaryKeyConstraint("id", name=conv(f"pk_{t}")),
            # Also the index for "attempts of job N": no separate one.
            UniqueConstraint("job_id", "attempt", name=conv(f"uq_{t}_job_attempt")),
            CheckConstraint("attempt >= 1", name=conv(f"ck_{t}_attempt_positive")),
            CheckConstraint(_in("status", AttemptStatus), name=conv(f"ck_{t}_status_valid")),
            CheckConstraint(
                "status = 'RUNNING' OR finished_at IS NOT NULL",
                name=conv(f"ck_{t}_closed_has_finished"),
            ),
            MYSQL_TABLE_OPTIONS,
        )


class JobEventMixin(DeclarativeOnly):
    """One entry of a job's append-only timeline (default table ``sqlq_job_events``)."""

    __sqlq_job_table__: ClassVar[str] = "sqlq_jobs"
    __sqlq_job_model__: ClassVar[str] = "Job"

    @declared_attr.directive
    def __tablename__(cls) -> str:
        return "sqlq_job_events"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    ts: Mapped[int] = mapped_column(BigInteger)
    event: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(WORKER_ID_MAX), default="system")
    detail: Mapped[str | None] = mapped_column(Text)  # short JSON

    @declared_attr
    def job_id(cls) -> Mapped[int]:
        return mapped_column(
            IdType,
            ForeignKey(
                f"{cls.__sqlq_job_table__}.id",
                ondelete="CASCADE",
                name=conv(f"fk_{cls.__tablename__}_job_id"),
            ),
        )

    @declared_attr
    def job(cls) -> Mapped[Any]:
        return relationship(cls.__sqlq_job_model__, back_populates="events")

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        t = cls.__tablename__
        return (
            PrimaryKeyConstraint("id", name=conv(f"pk_{t}")),
            CheckConstraint(_in("event", Event), name=conv(f"ck_{t}_event_valid")),
            # a job's timeline: WHERE job_id = ? ORDER BY ts, id
            Index(conv(f"ix_{t}_job_ts"), "job_id", "ts"),
            MYSQL_TABLE_OPTIONS,
        )


class WorkerMixin(DeclarativeOnly):
    """A live worker process (default table ``sqlq_workers``).

    Upserted on every worker tick, so "which worker holds this job, and is it
    alive?" is a join on ``claimed_by``.
    """

    @declared_attr.directive
    def __tablename__(cls) -> str:
        return "sqlq_workers"

    id: Mapped[str] = mapped_column(String(WORKER_ID_MAX), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[str] = mapped_column(String(REF_MAX), default="default")
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[int] = mapped_column(BigInteger)
    last_seen_at: Mapped[int] = mapped_column(BigInteger)
    pool: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The worker's pool as JSON text: kind, children (pid, jobs), recycles, crashes,
    kills at deadline (sqlq_0015); None from workers that predate it."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (
            PrimaryKeyConstraint("id", name=conv(f"pk_{cls.__tablename__}")),
            MYSQL_TABLE_OPTIONS,
        )


SCHEDULE_NAME_MAX = 200
CRON_MAX = 200
TIMEZONE_MAX = 64


class ScheduleMixin(DeclarativeOnly):
    """One recurring schedule's progress (default table ``sqlq_schedules``).

    Written by the schedulers: upserted from the code's declarations, and advanced by
    a compare-and-set on ``next_slot_at`` in the same transaction as the slot's job,
    so each slot is enqueued once however many schedulers run.
    """

    @declared_attr.directive
    def __tablename__(cls) -> str:
        return "sqlq_schedules"

    name: Mapped[str] = mapped_column(String(SCHEDULE_NAME_MAX), primary_key=True)
    type: Mapped[str] = mapped_column(String(TYPE_MAX))
    queue: Mapped[str] = mapped_column(String(QUEUE_MAX))
    cron: Mapped[str] = mapped_column(String(CRON_MAX))
    timezone: Mapped[str] = mapped_column(String(TIMEZONE_MAX))
    # The newest slot a job was enqueued for (NULL: none yet), and the first slot
    # not yet handled: the schedule is due once the clock reaches it.
    last_slot_at: Mapped[int | None] = mapped_column(BigInteger)
    next_slot_at: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)
    # When an operator paused it (NULL: it runs); no tick fires a paused schedule.
    paused_at: Mapped[int | None] = mapped_column(BigInteger)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        t = cls.__tablename__
        return (
            PrimaryKeyConstraint("name", name=conv(f"pk_{t}")),
            # the scheduler's tick: WHERE next_slot_at <= now
            Index(conv(f"ix_{t}_next_slot"), "next_slot_at"),
            MYSQL_TABLE_OPTIONS,
        )


POLICY_MAX = 16


class JobDependencyMixin(DeclarativeOnly):
    """One edge of the dependency graph: ``job_id`` waits for ``depends_on_id``
    (default table ``sqlq_job_dependencies``).

    Written by the enqueue, in the child's transaction; read when a parent ends, to
    find its children (hence the index on ``depends_on_id``). ``on_parent_failure`` is
    the child's policy for this parent: ``cancel`` (the child is cancelled with
    ``DEPENDENCY:FAILED`` when the parent ends FAILED or CANCELLED) or ``run`` (the
    parent only has to finish). Both keys cascade on delete, so retention pruning a
    finished job leaves no edge behind.
    """

    __sqlq_job_table__: ClassVar[str] = "sqlq_jobs"

    @declared_attr.directive
    def __tablename__(cls) -> str:
        return "sqlq_job_dependencies"

    on_parent_failure: Mapped[str] = mapped_column(String(POLICY_MAX), default="cancel")

    @declared_attr
    def job_id(cls) -> Mapped[int]:
        return mapped_column(
            IdType,
            ForeignKey(
                f"{cls.__sqlq_job_table__}.id",
                ondelete="CASCADE",
                name=conv(f"fk_{cls.__tablename__}_job_id"),
            ),
        )

    @declared_attr
    def depends_on_id(cls) -> Mapped[int]:
        return mapped_column(
            IdType,
            ForeignKey(
                f"{cls.__sqlq_job_table__}.id",
                ondelete="CASCADE",
                name=conv(f"fk_{cls.__tablename__}_depends_on_id"),
            ),
        )

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        t = cls.__tablename__
        return (
            PrimaryKeyConstraint("job_id", "depends_on_id", name=conv(f"pk_{t}")),
            CheckConstraint(
                "on_parent_failure IN ('cancel', 'run')",
                name=conv(f"ck_{t}_policy_valid"),
            ),
            # a parent's end: WHERE depends_on_id IN (:ended)
            Index(conv(f"ix_{t}_depends_on"), "depends_on_id"),
            MYSQL_TABLE_OPTIONS,
        )
