"""How long finished jobs are kept, and how they are deleted.

A :class:`RetentionPolicy` keeps each terminal status for a number of days (-1 keeps
forever). :func:`prune` deletes what the policy lets go in batches, each its own
short transaction::

    DELETE FROM sqlq_jobs WHERE id IN (
        SELECT id FROM sqlq_jobs
        WHERE status = ? AND finished_at < ?      -- ix_sqlq_jobs_finished
        ORDER BY finished_at LIMIT ?)
    AND status = ? AND finished_at < ?            -- still due when its row is locked

until a batch comes back short. Attempts and events go with their job through the
``ON DELETE CASCADE`` foreign keys, so no orphan is ever left; on SQLite a batch
refuses to run on a connection where foreign keys are not enforced. Nothing in
QUEUED, CLAIMED or RUNNING is ever touched. Stopping between batches (a crash,
Ctrl-C, ``max_batches``) is safe: every committed batch stands on its own, and the
next run picks up where this one stopped.

Deleting rows does not shrink a SQLite file (pages are reused, not returned):
:func:`run_maintenance` runs the WAL checkpoint and the opt-in, off-peak ``VACUUM``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Delete, delete, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import ReturningDelete

from sqlq_orm.core import validation
from sqlq_orm.db import maintenance
from sqlq_orm.db.backends import Backend
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.db.tables import Tables
from sqlq_orm.errors import InvalidInput, SqlqError
from sqlq_orm.schema.states import Event, JobStatus

log = logging.getLogger("sqlq_orm")

DAY = 86_400
KEEP_FOREVER = -1
"""A retention of -1 days keeps rows forever."""

DEFAULT_BATCH_SIZE = 5000
MAX_DAYS = 100_000


def _days(name: str, value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (KEEP_FOREVER <= value <= MAX_DAYS)
    ):
        raise InvalidInput(
            f"{name} must be a whole number of days from 0 to {MAX_DAYS}, "
            f"or -1 to keep forever; got {value!r}"
        )
    return value


@dataclass(frozen=True)
class RetentionPolicy:
    """How many days to keep each kind of row after it is finished (-1: forever).

    The defaults follow the usual advice: successes are kept long enough to
    investigate (30 days), failures longer because they tend to come back (90).
    ``heartbeat_event_days`` trims HEARTBEAT events of jobs that are kept (off by
    default: they are rare, and they go with their job anyway); ``worker_days``
    drops registry rows of workers not seen for that long.
    """

    succeeded_days: int = 30
    failed_days: int = 90
    cancelled_days: int = 30
    heartbeat_event_days: int = KEEP_FOREVER
    worker_days: int = 7

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            _days(item.name, getattr(self, item.name))

    def with_days(self, **days: int | None) -> RetentionPolicy:
        """A copy with the given ``*_days`` fields replaced (``None`` leaves one as is)."""
        known = {item.name for item in dataclasses.fields(self)}
        unknown = sorted(set(days) - known)
        if unknown:
            raise InvalidInput(f"unknown retention setting(s) {unknown}; known: {sorted(known)}")
        return dataclasses.replace(self, **{k: v for k, v in days.items() if v is not None})

    @staticmethod
    def statuses() -> tuple[JobStatus, ...]:
        """The statuses a policy covers: the terminal ones, never QUEUED/CLAIMED/RUNNING."""
        return (JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.FAILED)

    def days_for(self, status: JobStatus) -> int:
        """Days a job in ``status`` is kept after ``finished_at``."""
        by_status = {
            JobStatus.SUCCEEDED: self.succeeded_days,
            JobStatus.FAILED: self.failed_days,
            JobStatus.CANCELLED: self.cancelled_days,
        }
        try:
            return by_status[JobStatus(status)]
        except KeyError:
            raise InvalidInput(
                f"retention applies to finished jobs only, not {JobStatus(status).value}"
            ) from None

    def cutoff(self, status: JobStatus, now: int) -> int | None:
        """Jobs in ``status`` that finished before this are due; None keeps them all."""
        return _cutoff(self.days_for(status), now)


def _cutoff(days: int, now: int) -> int | None:
    return None if days == KEEP_FOREVER else now - days * DAY


@dataclass(frozen=True)
class PruneResult:
    """What :func:`prune` deleted (or, with ``dry_run``, would delete)."""

    now: int
    dry_run: bool
    jobs: dict[str, int]
    """Jobs deleted per status (their attempts and events went with them)."""
    heartbeat_events: int
    workers: int
    batches: int
    """Delete transactions that removed something."""
    complete: bool
    """False when ``max_batches`` stopped the run before the policy was satisfied."""
    cutoffs: dict[str, int | None]
    """Per status: jobs finished before this were due (None: kept forever)."""

    @property
    def total_jobs(self) -> int:
        return sum(self.jobs.values())


class PruneQueries:
    """The statements :func:`prune` runs, for one set of tables."""

    def __init__(self, tables: Tables, dialect: Backend | None = None) -> None:
        self.tables = tables
        self.dialect = dialect
        """The database's backend; None: a LIMIT subquery as PostgreSQL and SQLite take it."""

    def delete_jobs(self, status: str, cutoff: int, batch_size: int) -> Delete:
        """One batch: the oldest ``batch_size`` due jobs, found on ``ix_*_finished``.

        The status and cutoff are checked again by the DELETE itself, not only by the
        subquery that picks the ids: a manual retry that committed while the delete
        waited for the row's lock has made the job QUEUED, and PostgreSQL re-checks
        only the outer WHERE against the row version it waited for (InnoDB's locking
        read sees that version too). Without it the retried job, its attempts and
        events would be deleted after the retry had returned.
        """
        jobs = self.tables.jobs
        j = jobs.c
        due = (j.status == status, j.finished_at < cutoff)
        victims = select(j.id).where(*due).order_by(j.finished_at).limit(batch_size)
        if self.dialect is not None:
            victims = self.dialect.limited_in_subquery(victims)
        return delete(jobs).where(j.id.in_(victims), *due)

    def count_jobs(self, status: str, cutoff: int) -> Select[Any]:
        j = self.tables.jobs.c
        return select(func.count()).where(j.status == status, j.finished_at < cutoff)

    def _heartbeats(self, cutoff: int) -> list[Any]:
        e = self.tables.events.c
        return [e.event == Event.HEARTBEAT.value, e.ts < cutoff]

    def delete_heartbeats(
        self, after_id: int, cutoff: int, batch_size: int
    ) -> ReturningDelete[Any]:
        """One batch of old HEARTBEAT events, walking the primary key from ``after_id``.

        The events table has no (event, ts) index, so the batch is bounded by a
        primary-key range: the id of the ``batch_size``-th match closes it, and one
        run reads the table once instead of once per batch.
        """
        events = self.tables.events
        e = events.c
        batch = (
            select(e.id)
            .where(e.id > after_id, *self._heartbeats(cutoff))
            .order_by(e.id)
            .limit(batch_size)
            .subquery("batch")
        )
        last_id = select(func.max(batch.c.id)).scalar_subquery()
        return (
            delete(events)
            .where(e.id > after_id, e.id <= last_id, *self._heartbeats(cutoff))
            .returning(e.id)
        )

    def count_heartbeats(self, cutoff: int) -> Select[Any]:
        return select(func.count()).where(*self._heartbeats(cutoff))

    def delete_workers(self, cutoff: int) -> Delete:
        w = self.tables.workers.c
        return delete(self.tables.workers).where(w.last_seen_at < cutoff)

    def count_workers(self, cutoff: int) -> Select[Any]:
        w = self.tables.workers.c
        return select(func.count()).where(w.last_seen_at < cutoff)

    def all(self, now: int, batch_size: int = DEFAULT_BATCH_SIZE) -> list[tuple[str, Any]]:
        """Every statement on the jobs table :func:`prune` runs, for ``EXPLAIN`` tests."""
        cutoff = now - 30 * DAY
        return [
            ("prune.delete_jobs", self.delete_jobs(JobStatus.SUCCEEDED.value, cutoff, batch_size)),
            ("prune.count_jobs", self.count_jobs(JobStatus.FAILED.value, cutoff)),
        ]


def _require_cascade(connection: Connection) -> None:
    if not maintenance.foreign_keys_enforced(connection):
        raise SqlqError(
            "foreign keys are not enforced on this database connection, so deleting jobs "
            "would leave orphan attempts and events; nothing was deleted. Create the engine "
            "with sqlq_orm.create_engine(), or call sqlq_orm.configure_engine(engine) "
            "before its first use"
        )


def prune(
    queue: QueueContext | HasContext,
    policy: RetentionPolicy | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_batches: int | None = None,
    dry_run: bool = False,
) -> PruneResult:
    """Delete finished jobs (and old worker rows, and old HEARTBEAT events) per ``policy``.

    Jobs go oldest first, ``batch_size`` per transaction, status by status, until a
    batch comes back short or ``max_batches`` delete transactions have run (then
    ``complete`` is False and running it again continues). Each job's attempts and
    events are deleted with it by the database. QUEUED, CLAIMED and RUNNING jobs are
    never touched. "Now" comes from the queue's clock, read once per run.
    With ``dry_run``, nothing is written and the counts are what is due.
    """
    policy = policy or RetentionPolicy()
    if not isinstance(policy, RetentionPolicy):
        raise InvalidInput(f"policy must be a RetentionPolicy, got {policy!r}")
    batch_size = validation.require_int(
        "batch_size", batch_size, minimum=1, maximum=validation.INT32_MAX
    )
    if max_batches is not None:
        max_batches = validation.require_int("max_batches", max_batches, minimum=1)
    context = context_of(queue)
    q = PruneQueries(context.tables, context.dialect)
    now = context.read_now()
    cutoffs = {status.value: policy.cutoff(status, now) for status in policy.statuses()}
    heartbeat_cutoff = _cutoff(policy.heartbeat_event_days, now)
    worker_cutoff = _cutoff(policy.worker_days, now)

    if dry_run:
        return _count_due(context, q, now, cutoffs, heartbeat_cutoff, worker_cutoff)

    workers = 0
    if worker_cutoff is not None:
        with context.write() as connection:
            workers = connection.execute(q.delete_workers(worker_cutoff)).rowcount

    deleted = dict.fromkeys(cutoffs, 0)
    heartbeats = 0
    batches = 0
    complete = True

    def budget_left() -> bool:
        return max_batches is None or batches < max_batches

    for status, cutoff in cutoffs.items():
        if cutoff is None:
            continue
        while True:
            if not budget_left():
                complete = False
                break
            with context.write() as connection:
                _require_cascade(connection)
                count = connection.execute(q.delete_jobs(status, cutoff, batch_size)).rowcount
            if count:
                batches += 1
                deleted[status] += count
            if count < batch_size:
                break

    if heartbeat_cutoff is not None:
        after_id = 0
        while True:
            if not budget_left():
                complete = False
                break
            with context.write() as connection:
                ids = (
                    connection.execute(q.delete_heartbeats(after_id, heartbeat_cutoff, batch_size))
                    .scalars()
                    .all()
                )
            if ids:
                batches += 1
                heartbeats += len(ids)
                after_id = max(ids)
            if len(ids) < batch_size:
                break

    result = PruneResult(
        now=now,
        dry_run=False,
        jobs=deleted,
        heartbeat_events=heartbeats,
        workers=workers,
        batches=batches,
        complete=complete,
        cutoffs=cutoffs,
    )
    if result.total_jobs or heartbeats or workers:
        log.info(
            "prune: deleted %s job(s) %s, %d heartbeat event(s), %d worker(s) in %d batch(es)%s",
            result.total_jobs, deleted, heartbeats, workers, batches,
            "" if complete else "; stopped at max_batches, more is due",
        )  # fmt: skip
    return result


def _count_due(
    context: QueueContext,
    q: PruneQueries,
    now: int,
    cutoffs: dict[str, int | None],
    heartbeat_cutoff: int | None,
    worker_cutoff: int | None,
) -> PruneResult:
    with context.read() as connection:
        jobs = {
            status: 0
            if cutoff is None
            else int(connection.execute(q.count_jobs(status, cutoff)).scalar_one())
            for status, cutoff in cutoffs.items()
        }
        heartbeats = 0
        if heartbeat_cutoff is not None:
            heartbeats = int(connection.execute(q.count_heartbeats(heartbeat_cutoff)).scalar_one())
        workers = 0
        if worker_cutoff is not None:
            workers = int(connection.execute(q.count_workers(worker_cutoff)).scalar_one())
    return PruneResult(
        now=now,
        dry_run=True,
        jobs=jobs,
        heartbeat_events=heartbeats,
        workers=workers,
        batches=0,
        complete=True,
        cutoffs=cutoffs,
    )


# -------------------------------------------------------------------- maintenance


@dataclass(frozen=True)
class MaintenanceResult:
    """One maintenance task: what ran (or why nothing did), and what it reported."""

    task: str
    statement: str | None
    """The SQL that ran; None when the task does not apply to this database."""
    message: str
    output: list[list[Any]] = dataclasses.field(default_factory=list)


def run_maintenance(
    queue: QueueContext | HasContext, *, checkpoint: bool = False, vacuum: bool = False
) -> list[MaintenanceResult]:
    """Run the database's own upkeep for the queue's tables; each task is opt-in.

    ``checkpoint``: on SQLite, ``PRAGMA wal_checkpoint(TRUNCATE)`` copies the WAL
    into the database and truncates it (PostgreSQL checkpoints on its own).
    ``vacuum``: on SQLite, ``VACUUM`` rewrites the whole file to give freed pages back
    to the file system; it needs an exclusive lock and time proportional to the
    database: run it off-peak, rarely, only when the file must shrink. On PostgreSQL,
    ``VACUUM (ANALYZE)`` of the four queue tables (space reusable, statistics fresh).
    Statements run outside any transaction, as both databases require.
    """
    context = context_of(queue)
    tables = context.tables
    queue_tables = [tables.jobs, tables.attempts, tables.events, tables.workers]
    results = []
    for task, wanted in (("checkpoint", checkpoint), ("vacuum", vacuum)):
        if not wanted:
            continue
        plan = maintenance.maintenance_statement(context.engine, task, queue_tables)
        output: list[list[Any]] = []
        if plan.sql is not None:
            rows = maintenance.run_outside_transaction(context.engine, plan.sql)
            output = [list(row) for row in rows]
            log.info("maintenance: %s ran %s -> %s", task, plan.sql, output)
        results.append(
            MaintenanceResult(task=task, statement=plan.sql, message=plan.note, output=output)
        )
    return results
