"""The dedupe-period invariant: a finished job's key admits no new job during its period.

A job enqueued with ``dedupe_key`` and ``dedupe_period`` keeps its key for
``dedupe_period`` seconds after it SUCCEEDED or FAILED: an enqueue of that key in
the meantime returns the finished job instead of creating one. So no other job with
the same key may have been created at or after the holder's ``finished_at`` and
before ``finished_at + dedupe_period`` (both whole seconds; a job created in the very
second its holder finished is inside the period). A CANCELLED job releases its key.

A job created *before* its holder's ``finished_at`` is not reported: the holder may
have been retried by hand and finished again later, which moves ``finished_at``.

The read joins every finished holder with a period (the partial index
``ix_*_dedupe_period`` on ``dedupe_key``) to the other jobs of its key. Used by
:func:`sqlq_orm.ops.invariants.check`; returns ``(invariant, job_id, detail)``
triples naming the job created inside the period.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, and_, select
from sqlalchemy.engine import Connection

from sqlq_orm.schema.states import JobStatus

INVARIANTS: dict[str, str] = {
    "dedupe_key_held_for_its_period": (
        "no job was created with the dedupe_key of a job that SUCCEEDED or FAILED with a "
        "dedupe_period, at or after its finished_at and less than dedupe_period seconds "
        "later (that enqueue should have returned the finished job)"
    ),
}

_HOLDING = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value)


def hold_problems(connection: Connection, jobs: Table) -> list[tuple[str, int, str]]:
    """Every job created inside another job's dedupe period, with the holder named."""
    holder = jobs.alias("holder")
    later = jobs.alias("later")
    h, n = holder.c, later.c
    query = (
        select(n.id, n.created_at, h.id, h.dedupe_key, h.finished_at, h.dedupe_period)
        .select_from(
            holder.join(
                later,
                and_(
                    n.dedupe_key == h.dedupe_key,
                    n.id != h.id,
                    n.created_at >= h.finished_at,
                    n.created_at < h.finished_at + h.dedupe_period,
                ),
            )
        )
        .where(
            h.dedupe_key.is_not(None),
            h.dedupe_period.is_not(None),
            h.status.in_(_HOLDING),
            h.finished_at.is_not(None),
        )
        .order_by(n.id, h.id)
    )
    return [_problem(row) for row in connection.execute(query)]


def _problem(row: Any) -> tuple[str, int, str]:
    job_id, created_at, holder_id, key, finished_at, period = row
    return (
        "dedupe_key_held_for_its_period",
        int(job_id),
        f"created at {created_at} with dedupe_key={key!r}, {created_at - finished_at}s after "
        f"job {holder_id} finished at {finished_at}, which holds the key for {period}s",
    )
