"""The writes on jobs the dashboard offers, and which jobs each applies to.

Shared by the pages (which offer an action only where it can apply) and the action
handlers (which carry it out).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlq_orm.db.statements.bulk import DISCARDABLE
from sqlq_orm.ops.joblist import JobFilter
from sqlq_orm.schema.states import TERMINAL, JobStatus


@dataclass(frozen=True)
class Action:
    """What an action does and which statuses it applies to."""

    name: str
    verb: str
    past: str
    applies_to: tuple[str, ...]

    def statuses_for(self, job_filter: JobFilter) -> list[str]:
        """The statuses this action applies to that ``job_filter`` lets through."""
        return [s for s in self.applies_to if job_filter.status in (None, s)]


ACTIONS = {
    "retry": Action(
        "retry", "Retry", "retried", (JobStatus.FAILED.value, JobStatus.CANCELLED.value)
    ),
    # Every unfinished status: what Queue.cancel accepts, and what the job page offers.
    "cancel": Action(
        "cancel",
        "Cancel",
        "cancelled",
        tuple(s.value for s in JobStatus if s not in TERMINAL),
    ),
    # Delete with attempts and events; never a job a worker holds (cancel it first).
    "discard": Action("discard", "Discard", "discarded", tuple(s.value for s in DISCARDABLE)),
}
