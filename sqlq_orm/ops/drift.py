"""What unfinished jobs are stored, by type, for checks against the code that runs them.

:func:`unfinished_types` counts the WAITING, QUEUED, CLAIMED and RUNNING jobs of each
type (one grouped read); :func:`unfinished_payloads` walks one type's payloads by id in
batches, so a check of a large backlog holds no long transaction and no big result.
What the payloads are checked against (a task's signature) is the caller's business:
:mod:`sqlq_orm.tasks.drift`.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import func, select

from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.schema.states import ACTIVE

ACTIVE_VALUES = sorted(status.value for status in ACTIVE)
BATCH = 1000


def unfinished_types(target: QueueContext | HasContext) -> dict[str, int]:
    """Unfinished jobs per type."""
    context = context_of(target)
    j = context.tables.jobs.c
    query = select(j.type, func.count()).where(j.status.in_(ACTIVE_VALUES)).group_by(j.type)
    with context.read() as connection:
        return {job_type: int(count) for job_type, count in connection.execute(query)}


def unfinished_payloads(
    target: QueueContext | HasContext, job_type: str, batch: int = BATCH
) -> Iterator[tuple[int, str | None]]:
    """``(id, payload JSON text)`` of every unfinished job of ``job_type``, by id."""
    context = context_of(target)
    j = context.tables.jobs.c
    after = 0
    while True:
        query = (
            select(j.id, j.payload)
            .where(j.type == job_type, j.status.in_(ACTIVE_VALUES), j.id > after)
            .order_by(j.id)
            .limit(batch)
        )
        with context.read() as connection:
            rows = connection.execute(query).all()
        yield from ((int(job_id), payload) for job_id, payload in rows)
        if len(rows) < batch:
            return
        after = int(rows[-1][0])
