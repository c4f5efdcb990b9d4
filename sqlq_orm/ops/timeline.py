"""One job's story for ``sqlq show``: its state, its attempts, its events, its worker.

:func:`job_timeline` reads them in one snapshot
(:meth:`QueueContext.snapshot() <sqlq_orm.db.context.QueueContext.snapshot>`), with
"now" read once from the queue's clock; :class:`TimelineQueries` holds the statements
(each on a key or an index, checked by ``tests/test_explain.py``). The lease token is
never read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.sql import Select

from sqlq_orm.core import redaction, validation
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.db.tables import Tables
from sqlq_orm.errors import JobNotFound
from sqlq_orm.ops.stand_ins import attempt_events, in_order
from sqlq_orm.ops.stats.queries import HELD_VALUES
from sqlq_orm.ops.stats.views import (
    DEFAULT_WORKER_STALE_SECONDS,
    WorkerState,
    WorkerView,
    worker_state,
)
from sqlq_orm.schema.mixins import JOB_MIXIN_COLUMNS


@dataclass(frozen=True)
class JobView:
    """A job's current state as ``sqlq show`` prints it (never its lease token)."""

    id: int
    queue: str
    type: str
    status: str
    priority: int
    payload: Any
    """Decoded JSON (the raw text if it does not decode), the arguments a task keeps
    out of view (``redact=``) shown as ``[redacted]``."""
    payload_ref: str | None
    result_ref: str | None
    dedupe_key: str | None
    created_at: int
    run_at: int
    claimed_at: int | None
    started_at: int | None
    heartbeat_at: int | None
    lease_expires_at: int | None
    deadline_at: int | None
    finished_at: int | None
    claimed_by: str | None
    attempt_count: int
    retry_count: int
    max_retries: int
    max_runtime_seconds: int | None
    error_code: str | None
    error_detail: str | None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    result: Any = None
    """What the handler returned as a result (a task's return value), decoded JSON."""
    columns: dict[str, Any] = field(default_factory=dict)
    """The job's values for the columns the host app added, by name."""


@dataclass(frozen=True)
class AttemptView:
    """One run of the job."""

    attempt: int
    worker_id: str | None
    status: str
    started_at: int
    finished_at: int | None
    duration_seconds: int | None
    """``finished_at - started_at``; for an open attempt, how long it has run so far."""
    error_code: str | None
    error_detail: str | None


@dataclass(frozen=True)
class EventView:
    """One entry of the job's timeline."""

    ts: int
    event: str
    actor: str
    detail: Any
    """Decoded JSON detail (the raw text if it does not decode, None if absent)."""


@dataclass(frozen=True)
class RelatedJob:
    """A parent or a child of a job (``depends_on``)."""

    id: int
    type: str
    status: str
    on_parent_failure: str
    """The child's policy on this edge: ``cancel`` or ``run``."""


@dataclass(frozen=True)
class JobTimeline:
    """Everything known about one job, as of ``now``."""

    now: int
    job: JobView
    attempts: list[AttemptView]
    events: list[EventView]
    worker: WorkerView | None
    """The worker holding the job, if it is held and the worker is registered."""
    worker_state: WorkerState | None
    """None when nobody holds the job."""
    parents: list[RelatedJob] = field(default_factory=list)
    """The jobs this one waits for (``depends_on``), by id."""
    children: list[RelatedJob] = field(default_factory=list)
    """The jobs that wait for this one, by id."""


_JOB_VIEW_COLUMNS = [name for name in JobView.__dataclass_fields__ if name != "columns"]


class TimelineQueries:
    """The statements behind :func:`job_timeline`, each on a key or an index."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def job(self, job_id: int) -> Select[Any]:
        """By primary key; the lease token is never selected."""
        j = self.tables.jobs.c
        app_columns = (c for c in self.tables.jobs.c if c.name not in JOB_MIXIN_COLUMNS)
        return select(*(j[name] for name in _JOB_VIEW_COLUMNS), *app_columns).where(j.id == job_id)

    def attempts(self, job_id: int) -> Select[Any]:
        """On ``uq_*_job_attempt`` (job_id, attempt)."""
        a = self.tables.attempts.c
        return (
            select(
                a.attempt,
                a.worker_id,
                a.status,
                a.started_at,
                a.finished_at,
                a.error_code,
                a.error_detail,
                a.after_event_id,
                a.lease_seconds,
            )
            .where(a.job_id == job_id)
            .order_by(a.attempt)
        )

    def events(self, job_id: int) -> Select[Any]:
        """On ``ix_*_job_ts`` (job_id, ts); put in the order they happened (event id)
        by :func:`~sqlq_orm.ops.stand_ins.in_order`, whatever their times say."""
        e = self.tables.events.c
        return (
            select(e.id, e.ts, e.event, e.actor, e.detail)
            .where(e.job_id == job_id)
            .order_by(e.ts, e.id)
        )

    def worker(self, worker_id: str) -> Select[Any]:
        w = self.tables.workers.c
        return select(
            w.id, w.hostname, w.pid, w.queues, w.concurrency, w.started_at, w.last_seen_at
        ).where(w.id == worker_id)

    def held_by(self, worker_id: str) -> Select[Any]:
        """The held set (small) through the partial ``ix_*_lease``: only held jobs have
        a lease (the schema's CHECKs), so its WHERE changes no answer."""
        j = self.tables.jobs.c
        return select(func.count()).where(
            j.status.in_(HELD_VALUES), j.lease_expires_at.is_not(None), j.claimed_by == worker_id
        )

    def parents(self, job_id: int) -> Select[Any] | None:
        """On the dependencies' primary key (job_id, depends_on_id); None without them."""
        d = self.tables.dependencies
        if d is None:
            return None
        parent = self.tables.jobs.alias("parent")
        return (
            select(parent.c.id, parent.c.type, parent.c.status, d.c.on_parent_failure)
            .select_from(d.join(parent, parent.c.id == d.c.depends_on_id))
            .where(d.c.job_id == job_id)
            .order_by(parent.c.id)
        )

    def children(self, job_id: int) -> Select[Any] | None:
        """On ``ix_*_depends_on``; None without a dependencies table."""
        d = self.tables.dependencies
        if d is None:
            return None
        child = self.tables.jobs.alias("child")
        return (
            select(child.c.id, child.c.type, child.c.status, d.c.on_parent_failure)
            .select_from(d.join(child, child.c.id == d.c.job_id))
            .where(d.c.depends_on_id == job_id)
            .order_by(child.c.id)
        )

    def all(self) -> list[tuple[str, Any]]:
        """Every statement :func:`job_timeline` runs, named, for ``EXPLAIN`` tests."""
        found = [
            ("show.job", self.job(1)),
            ("show.attempts", self.attempts(1)),
            ("show.events", self.events(1)),
            ("show.held_by", self.held_by("w-1")),
            ("show.parents", self.parents(1)),
            ("show.children", self.children(1)),
        ]
        return [(name, statement) for name, statement in found if statement is not None]


def _decode(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def job_timeline(
    queue: QueueContext | HasContext,
    job_id: int,
    *,
    worker_stale_seconds: int = DEFAULT_WORKER_STALE_SECONDS,
) -> JobTimeline:
    """Return job ``job_id`` with its attempts, its events and the worker holding it.

    ``queue`` is a :class:`~sqlq_orm.Queue` or its
    :class:`~sqlq_orm.db.context.QueueContext`.

    Raises :class:`~sqlq_orm.errors.JobNotFound` when there is no such job.
    """
    validation.job_id(job_id)
    context = context_of(queue)
    q = TimelineQueries(context.tables)
    with context.snapshot() as connection:
        now = context.now(connection)
        row = connection.execute(q.job(job_id)).one_or_none()
        if row is None:
            raise JobNotFound(job_id)
        values = dict(row._mapping)
        # As it may be displayed: a task's redact= arguments replaced (the job says which).
        values["payload"] = redaction.redact(_decode(values["payload"]))
        if "result" in values:
            values["result"] = _decode(values["result"])
        app = {name: values.pop(name) for name in list(values) if name not in _JOB_VIEW_COLUMNS}
        job = JobView(**values, columns=app)
        attempt_rows = connection.execute(q.attempts(job_id)).all()
        attempts = [
            AttemptView(
                attempt=int(a.attempt),
                worker_id=a.worker_id,
                status=a.status,
                started_at=int(a.started_at),
                finished_at=a.finished_at,
                duration_seconds=(
                    (a.finished_at if a.finished_at is not None else now) - int(a.started_at)
                ),
                error_code=a.error_code,
                error_detail=a.error_detail,
            )
            for a in attempt_rows
        ]
        events = _events(connection.execute(q.events(job_id)).all(), attempt_rows)
        worker = None
        state = None
        if job.status in HELD_VALUES and job.claimed_by is not None:
            found = connection.execute(q.worker(job.claimed_by)).one_or_none()
            if found is not None:
                held = connection.execute(q.held_by(job.claimed_by)).scalar_one()
                worker = WorkerView(
                    id=found.id,
                    hostname=found.hostname,
                    pid=int(found.pid),
                    queues=found.queues,
                    concurrency=int(found.concurrency),
                    started_at=int(found.started_at),
                    last_seen_at=int(found.last_seen_at),
                    seen_seconds_ago=max(0, now - int(found.last_seen_at)),
                    state=worker_state(int(found.last_seen_at), now, worker_stale_seconds),
                    held_jobs=int(held),
                )
            state = worker_state(
                None if found is None else int(found.last_seen_at), now, worker_stale_seconds
            )
        related = [
            [RelatedJob(int(r.id), r.type, r.status, r.on_parent_failure) for r in rows]
            for rows in (
                [] if query is None else connection.execute(query).all()
                for query in (q.parents(job_id), q.children(job_id))
            )
        ]
    return JobTimeline(
        now=now,
        job=job,
        attempts=attempts,
        events=events,
        worker=worker,
        worker_state=state,
        parents=related[0],
        children=related[1],
    )


def _events(written: Sequence[Any], attempt_rows: Sequence[Any]) -> list[EventView]:
    """The written events with those the attempt rows stand for, in the order they
    happened (:mod:`sqlq_orm.ops.stand_ins`): by event id, never re-sorted by time, so
    a clock stepped backward shows its earlier times out of order instead of moving a
    SUCCEEDED before its CLAIMED."""

    def view(e: Any) -> EventView:
        return EventView(ts=e.ts, event=e.event, actor=e.actor, detail=e.detail)

    stand_ins = []
    for a in attempt_rows:
        if a.after_event_id is None:
            continue
        begun, ended = attempt_events(
            int(a.attempt), a.worker_id, a.status, a.started_at, a.finished_at, a.lease_seconds
        )
        stand_ins.append(
            (
                int(a.after_event_id),
                int(a.attempt),
                [view(e) for e in begun],
                None if ended is None else view(ended),
            )
        )
    written_views = [
        (
            int(e.id),
            EventView(ts=int(e.ts), event=e.event, actor=e.actor, detail=_decode(e.detail)),
        )
        for e in written
    ]
    return in_order(written_views, stand_ins)
