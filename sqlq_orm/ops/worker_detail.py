"""One worker's page: what it is, what it holds now, what it claimed recently.

Three bounded reads in one snapshot: its row of the workers table, the jobs it holds
(the held set, reached through a status-leading index, is bounded by the workers'
capacity), and the newest jobs it claimed, read like a jobs-list page filtered by
worker (:func:`~sqlq_orm.ops.joblist.list_jobs`: one bounded scan of the newest ids).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from sqlq_orm.core import validation
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.ops.joblist import JobFilter, JobPage, JobSummary, list_jobs
from sqlq_orm.ops.stats.views import DEFAULT_WORKER_STALE_SECONDS, WorkerView
from sqlq_orm.schema.mixins import WORKER_ID_MAX
from sqlq_orm.schema.states import HELD

RECENT_JOBS = 20


@dataclass(frozen=True)
class WorkerDetail:
    """What :func:`worker_detail` found for one worker id."""

    now: int
    worker_id: str
    worker: WorkerView | None
    """Its registration; None when no worker row has the id (gone, or never registered:
    the jobs it claimed still name it)."""
    held: list[JobSummary]
    """The jobs it holds now (CLAIMED or RUNNING), oldest first."""
    recent: JobPage
    """The newest jobs it claimed (held or finished), newest first."""


def worker_detail(
    queue: QueueContext | HasContext,
    worker_id: str,
    *,
    recent: int = RECENT_JOBS,
    worker_stale_seconds: int = DEFAULT_WORKER_STALE_SECONDS,
    scan_chunks: int = 1,
) -> WorkerDetail:
    """Worker ``worker_id``: its registration, the jobs it holds, the newest it claimed."""
    worker_id = validation.require_name("worker", worker_id, WORKER_ID_MAX)
    context = context_of(queue)
    j, w = context.tables.jobs.c, context.tables.workers.c
    summary = [j[name] for name in JobSummary.__dataclass_fields__]
    with context.read() as connection:
        now = context.now(connection)
        row = connection.execute(
            select(
                w.id,
                w.hostname,
                w.pid,
                w.queues,
                w.concurrency,
                w.started_at,
                w.last_seen_at,
                w.pool,
            ).where(w.id == worker_id)
        ).first()
        held = [
            JobSummary(**dict(found._mapping))
            for found in connection.execute(
                select(*summary)
                # lease_expires_at: exactly the held jobs have one (the schema's
                # CHECKs); it lets the partial ix_*_lease serve the read.
                .where(
                    j.status.in_(sorted(s.value for s in HELD)),
                    j.lease_expires_at.is_not(None),
                    j.claimed_by == worker_id,
                )
                .order_by(j.id)
            )
        ]
    view = None
    if row is not None:
        view = WorkerView.from_row(row, now, worker_stale_seconds, len(held))
    page = list_jobs(queue, JobFilter(worker=worker_id), limit=recent, scan_chunks=scan_chunks)
    return WorkerDetail(now=now, worker_id=worker_id, worker=view, held=held, recent=page)
