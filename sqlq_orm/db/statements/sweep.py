"""The sweeper: expired leases and runs past their deadline, locked as they are read."""

from __future__ import annotations

from sqlalchemy import (
    Integer,
    bindparam,
    select,
)

from sqlq_orm.db.statements.base import HELD_VALUES, StatementGroup, lease_cleared, status_in
from sqlq_orm.schema.states import JobStatus


class SweepStatements(StatementGroup):
    """The sweeper: expired leases and runs past their deadline, locked as they are read."""

    def _build_sweep(self) -> None:
        j = self.tables.jobs.c
        now = self.now
        # -- sweep -----------------------------------------------------------------
        sweep_columns = (
            j.id,
            j.type,
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
            .where(status_in(j.status, HELD_VALUES), j.lease_expires_at <= now)
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
        # An expired lease on a job that was claimed but never started (a dead worker's
        # prefetch): back to the queue with no retry spent, fenced by the token the
        # sweeper saw and by CLAIMED (a start since would have made it RUNNING).
        self.release_unstarted = (
            self.update_by_id(self.tables.jobs)
            .where(self.lease_guard(), j.status == JobStatus.CLAIMED.value)
            .values(status=JobStatus.QUEUED.value, run_at=now, **lease_cleared())
        )
