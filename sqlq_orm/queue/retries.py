"""What a manual retry brings back, and in which state, where jobs have parents.

A retried job whose parents have not all settled as it needs waits for them: it goes
back WAITING, its count recomputed from its parents as they are now (a parent it
waits for under ``cancel`` that ended FAILED or CANCELLED refuses the retry instead:
it could never succeed). ``with_dependents`` also brings back the jobs cancelled with
``DEPENDENCY:FAILED`` below it (transitively), each WAITING for its parents.

Locks: the edges are read first (they never change), then the jobs and all their
parents are locked in one statement in id order, before their statuses are read; a
parent ending at the same time is then either seen ended, or finds the job WAITING.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection

from sqlq_orm.core import error_codes
from sqlq_orm.errors import InvalidTransition, JobNotFound, ParentNotSucceeded
from sqlq_orm.queue.dependencies import Dependencies, chunked, settle
from sqlq_orm.schema.states import JobStatus

_RETRYABLE = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})


@dataclass(frozen=True)
class RetryPlan:
    """One job a retry moves: from ``was`` to QUEUED, or WAITING for ``waiting_for``."""

    job_id: int
    was: JobStatus
    waiting_for: list[int] = field(default_factory=list)
    brought_by: int | None = None
    """The job retried with ``with_dependents`` that brings this one back, or None."""


class RetryPlanning(Dependencies):
    """Plans a manual retry under the locks of the jobs and their parents."""

    def _retry_plans(
        self, connection: Connection, job_id: int, with_dependents: bool
    ) -> list[RetryPlan]:
        """Lock ``job_id`` (with its dependents and every parent) and plan the retry;
        raises :class:`JobNotFound`, :class:`InvalidTransition` (not FAILED/CANCELLED)
        or :class:`ParentNotSucceeded`. Plans come in id order, parents first."""
        if not self.sql.has_dependencies:
            found = connection.execute(self.sql.lock_job, {"p_id": job_id}).one_or_none()
            if found is None:
                raise JobNotFound(job_id)
            return [RetryPlan(job_id, self._retryable(job_id, found.status))]
        family = [job_id, *(self._dependents(connection, job_id) if with_dependents else [])]
        parents: dict[int, list[tuple[int, str]]] = {}
        for chunk in chunked(sorted(family)):
            for child, parent, policy in connection.execute(self.sql.parents_of, {"p_ids": chunk}):
                parents.setdefault(child, []).append((parent, policy))
        wanted = sorted({*family, *(p for edges in parents.values() for p, _ in edges)})
        locked: dict[int, Any] = {}
        for chunk in chunked(wanted):
            for row in connection.execute(self.sql.lock_jobs, {"p_ids": chunk}):
                locked[row.id] = row
        if job_id not in locked:
            raise JobNotFound(job_id)
        was = self._retryable(job_id, locked[job_id].status)
        back: set[int] = set()
        plans: list[RetryPlan] = []
        for member in sorted(family):  # a parent always has a lower id than its child
            member_row: Any = locked.get(member)
            edges = parents.get(member, [])
            if member != job_id and not (
                member_row is not None
                and member_row.status == JobStatus.CANCELLED.value
                and member_row.error_code == error_codes.DEPENDENCY_FAILED
                and any(parent in back for parent, _ in edges)
            ):
                continue  # moved meanwhile, or not cancelled because of this job
            # Parents brought back by this retry are unfinished from now on.
            now = [
                (p, policy, JobStatus.QUEUED.value if p in back else locked[p].status)
                for p, policy in edges
            ]
            failed, _ = settle(now)
            if failed is not None:
                if member == job_id:
                    raise ParentNotSucceeded(job_id, was.value, *failed)
                continue  # another parent keeps it cancelled
            waiting_for = [p for p, policy, status in now if settle([(p, policy, status)])[1]]
            back.add(member)
            plans.append(
                RetryPlan(
                    member,
                    JobStatus(locked[member].status),
                    waiting_for,
                    None if member == job_id else job_id,
                )
            )
        return plans

    @staticmethod
    def _retryable(job_id: int, status: str) -> JobStatus:
        found = JobStatus(status)
        if found not in _RETRYABLE:
            raise InvalidTransition(job_id, found.value, "retry")
        return found

    def _dependents(self, connection: Connection, job_id: int) -> list[int]:
        """Jobs below ``job_id`` cancelled with ``DEPENDENCY:FAILED``, transitively (read
        without locks: the plan checks each again under its lock)."""
        found: list[int] = []
        frontier = [job_id]
        while frontier:
            children: set[int] = set()
            for chunk in chunked(frontier):
                for child, _, _ in connection.execute(self.sql.children_of, {"p_ids": chunk}):
                    children.add(child)
            frontier = []
            for chunk in chunked(sorted(children - set(found))):
                for row in connection.execute(self.sql.job_states, {"p_ids": chunk}):
                    if (
                        row.status == JobStatus.CANCELLED.value
                        and row.error_code == error_codes.DEPENDENCY_FAILED
                    ):
                        frontier.append(row.id)
            found.extend(frontier)
        return found
