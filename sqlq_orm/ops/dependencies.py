"""Jobs WAITING for their parents, and what each waits on (the dashboard's dependencies page).

Read-only, in one snapshot: the oldest WAITING jobs first (a bounded page on a
status-leading index), then the parents of exactly those jobs (on the dependencies'
primary key, which starts with the child's id).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select

from sqlq_orm.core import validation
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.ops.timeline import RelatedJob
from sqlq_orm.schema.states import JobStatus

DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class WaitingJob:
    """A WAITING job and its parents."""

    id: int
    type: str
    queue: str
    created_at: int
    pending_parents: int
    """How many parents it still waits for."""
    parents: list[RelatedJob] = field(default_factory=list)


@dataclass(frozen=True)
class WaitingJobs:
    """One page of WAITING jobs, oldest first."""

    now: int
    jobs: list[WaitingJob]
    total: int
    """Every WAITING job, not only this page."""
    available: bool = True
    """False when the models have no dependency table (nothing can wait)."""


def waiting_jobs(queue: QueueContext | HasContext, *, limit: int = DEFAULT_LIMIT) -> WaitingJobs:
    """The oldest ``limit`` WAITING jobs with their parents, and how many wait in all."""
    limit = validation.require_int("limit", limit, minimum=1, maximum=1000)
    context = context_of(queue)
    deps = context.tables.dependencies
    j = context.tables.jobs.c
    with context.snapshot() as connection:
        now = context.now(connection)
        if deps is None:
            return WaitingJobs(now=now, jobs=[], total=0, available=False)
        waiting = j.status == JobStatus.WAITING.value
        total = connection.execute(
            select(func.count()).select_from(context.tables.jobs).where(waiting)
        ).scalar_one()
        rows = connection.execute(
            select(j.id, j.type, j.queue, j.created_at, j.pending_parents)
            .where(waiting)
            .order_by(j.id)
            .limit(limit)
        ).all()
        parents: dict[int, list[RelatedJob]] = {row.id: [] for row in rows}
        if rows:
            parent = context.tables.jobs.alias("parent")
            d = deps.c
            for child, pid, ptype, pstatus, policy in connection.execute(
                select(d.job_id, parent.c.id, parent.c.type, parent.c.status, d.on_parent_failure)
                .select_from(deps.join(parent, parent.c.id == d.depends_on_id))
                .where(d.job_id.in_(list(parents)))
                .order_by(d.job_id, parent.c.id)
            ):
                parents[child].append(RelatedJob(int(pid), ptype, pstatus, policy))
    return WaitingJobs(
        now=now,
        jobs=[
            WaitingJob(
                id=int(row.id),
                type=row.type,
                queue=row.queue,
                created_at=int(row.created_at),
                pending_parents=int(row.pending_parents),
                parents=parents[row.id],
            )
            for row in rows
        ],
        total=int(total),
    )
