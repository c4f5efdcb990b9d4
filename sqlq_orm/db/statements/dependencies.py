"""Job dependencies: the edges a child's enqueue writes, and what a parent's end runs.

A child waits (status WAITING) with ``pending_parents`` counting the parents it still
needs. Whoever ends a parent, in that transaction, locks the parent's WAITING children
(in id order, so two enders lock alike) and then decrements each child's counter, or
cancels the child; the child row lock serialises two parents that end at once, so
the last of them always sees the counter reach zero.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, case, insert, select

from sqlq_orm.core import error_codes
from sqlq_orm.db.statements.base import StatementGroup, lease_cleared
from sqlq_orm.schema.states import JobStatus

POLICIES = ("cancel", "run")
"""What a child does when a parent ends FAILED or CANCELLED: be cancelled with
``DEPENDENCY:FAILED`` (``cancel``), or count the parent as done and run (``run``)."""


class DependencyStatements(StatementGroup):
    """Edges of the dependency graph, and the promotion or cancellation of children."""

    def dependents_flag(self) -> list[Any]:
        """``[has_dependents]`` for a finishing statement's RETURNING, or ``[]`` when
        the models have no dependency table."""
        column = self.has_dependents_column
        return [] if column is None else [column]

    def _build_dependencies(self) -> None:
        jobs = self.tables.jobs
        j = jobs.c
        now = self.now
        deps = self.tables.dependencies
        self.has_dependencies = deps is not None
        self.has_dependents_column: Any = None
        if deps is None:
            return
        d = deps.c
        # RETURNING column of a finish: whether the job has children at all, so a
        # batch without any pays no further round trip. A column of the row itself,
        # not a lookup: PostgreSQL evaluates a subquery in RETURNING in the snapshot
        # the statement started with, which misses a child committed while the
        # statement waited for the parent's row lock; the row's own columns are read
        # from the version it waited for.
        self.has_dependents_column = j.has_dependents
        # -- enqueue ---------------------------------------------------------------
        # The parents are flagged and locked in the child's transaction: a parent that
        # ends later sees the flag (and the edge, once the child commits: its ending
        # UPDATE waits for the lock); one that ended first is read SUCCEEDED (or FAILED,
        # CANCELLED) after the lock. The lock is a share lock: it holds off the
        # parent's end, but not another child's enqueue, and the worker's lease renewal
        # passes over the row instead of waiting (FOR ... SKIP LOCKED) and renews the
        # rest. Only a parent not flagged yet is locked exclusively, to flag it, once
        # per parent. First the exclusive locks, then the shared ones, each in id
        # order, so two enqueues never hold what the other waits for.
        parents = j.id.in_(bindparam("p_ids", expanding=True))
        unflagged = and_(parents, j.has_dependents == 0)
        self.unflagged_parents = select(j.id).where(unflagged)  # a plain read: no wait
        self.lock_unflagged_parents = select(j.id).where(unflagged).order_by(j.id).with_for_update()
        self.flag_parents = self.update_by_id(jobs).where(parents).values(has_dependents=1)
        self.lock_parents = select(j.id).where(parents).order_by(j.id).with_for_update(read=True)
        self.parent_states = select(j.id, j.status).where(parents)
        self.insert_dependency = insert(deps).values(
            job_id=bindparam("p_job_id"),
            depends_on_id=bindparam("p_parent_id"),
            on_parent_failure=bindparam("p_policy"),
        )
        # The child just inserted (QUEUED, seen by nobody yet) waits for its parents.
        self.hold_waiting = (
            self.update_by_id(jobs)
            .where(j.id == bindparam("p_id"), j.status == JobStatus.QUEUED.value)
            .values(status=JobStatus.WAITING.value, pending_parents=bindparam("p_pending"))
        )
        # -- a parent's end ------------------------------------------------------------
        self.children_of = (
            select(d.job_id, d.depends_on_id, d.on_parent_failure)
            .where(d.depends_on_id.in_(bindparam("p_ids", expanding=True)))
            .order_by(d.job_id, d.depends_on_id)
        )
        self.lock_children = (
            select(j.id, j.status, j.pending_parents, j.queue)
            .where(
                j.id.in_(bindparam("p_ids", expanding=True)),
                j.status == JobStatus.WAITING.value,
            )
            .order_by(j.id)
            .with_for_update()
        )
        # Guarded by WAITING: with the row locked the guard always holds; it keeps a
        # mistaken call from moving any other job. Never below 0: a parent retried by
        # hand after it failed may end a second time.
        left = j.pending_parents - bindparam("p_met")
        remaining = case((left < 0, 0), else_=left)
        self.parents_met = (
            self.update_by_id(jobs)
            .where(j.id == bindparam("p_id"), j.status == JobStatus.WAITING.value)
            # In this order: MySQL evaluates SET left to right, each assignment seeing
            # the ones before it, so the counter is the last thing changed.
            .ordered_values(
                (
                    j.status,
                    case((remaining <= 0, JobStatus.QUEUED.value), else_=JobStatus.WAITING.value),
                ),
                # Queued now, not at the enqueue: it takes its turn behind the jobs
                # already ready instead of jumping ahead of them.
                (j.run_at, case((and_(remaining <= 0, j.run_at < now), now), else_=j.run_at)),
                (j.pending_parents, remaining),
            )
        )
        self.cancel_for_dependency = (
            self.update_by_id(jobs)
            .where(j.id == bindparam("p_id"), j.status == bindparam("p_status"))
            .values(
                status=JobStatus.CANCELLED.value,
                finished_at=now,
                error_code=error_codes.DEPENDENCY_FAILED,
                error_detail=bindparam("p_detail"),
                **lease_cleared(),
            )
        )
