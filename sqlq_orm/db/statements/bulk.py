"""Bulk actions by filter: walking the matches in id order, and discarding jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Integer, bindparam, delete, func, select
from sqlalchemy.sql import ColumnElement, Select

from sqlq_orm.db.statements.base import StatementGroup
from sqlq_orm.schema.states import JobStatus

DISCARDABLE = (
    JobStatus.WAITING,
    JobStatus.QUEUED,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)
"""What a discard may delete: anything but a job a worker holds (CLAIMED, RUNNING)."""


class BulkStatements(StatementGroup):
    """Statements of the bulk actions (cancel, retry, discard by filter)."""

    def _build_bulk(self) -> None:
        j = self.tables.jobs.c
        # The rows a discard batch works on, locked (SQLite: the write lock already is).
        self.lock_jobs_by_id = (
            select(j.id, j.status, j.queue)
            .where(j.id.in_(bindparam("p_ids", expanding=True)))
            .order_by(j.id)
            .with_for_update()
        )
        # Delete these jobs if still discardable; their attempts, events and dependency
        # edges go with them (ON DELETE CASCADE).
        self.discard_jobs = delete(self.tables.jobs).where(
            j.id.in_(bindparam("p_ids", expanding=True)),
            j.status.in_([status.value for status in DISCARDABLE]),
        )

    def bulk_batch(
        self, where: Sequence[ColumnElement[bool]], statuses: Sequence[str]
    ) -> Select[Any]:
        """The next ``p_limit`` matching ids above ``p_after``, in id order (a keyset walk:
        each batch starts where the last one ended, so an interrupted run can go on)."""
        j = self.tables.jobs.c
        return (
            select(j.id)
            .where(*where, j.status.in_(statuses), j.id > bindparam("p_after", type_=Integer))
            .order_by(j.id)
            .limit(bindparam("p_limit", type_=Integer))
        )

    def bulk_count(
        self, where: Sequence[ColumnElement[bool]], statuses: Sequence[str]
    ) -> Select[Any]:
        """How many jobs match (a dry run's answer)."""
        j = self.tables.jobs.c
        return select(func.count()).where(*where, j.status.in_(statuses))
