"""Results: what a task returned, stored with its job.

Revision ID: sqlq_0007
Revises: sqlq_0005
Create Date: 2026-11-24

One nullable ``TEXT`` column on the job table, ``result``: the JSON of what a handler
returned as a :class:`~sqlq_orm.core.results.JobResult` (a task's return value),
capped like the payload. Existing jobs get none. A plain ``ADD COLUMN`` on every
database: no table copy, the jobs stay in place (SQLite adds a nullable column
without rewriting the table).

And the ``SNOOZED`` outcome (a handler asked to run later, no retry spent): the CHECKs
on the attempts' status and the events' name learn it. Altered in place on
PostgreSQL and MariaDB; on SQLite the two history tables are copied in batch mode
(they reference the jobs, nothing references them: no row of another table moves).
The downgrade first records snoozed attempts and events as RELEASED, which they were
before this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0007"
down_revision: str | Sequence[str] | None = "sqlq_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


ATTEMPT_STATUSES_0005 = "'CANCELLED', 'FAILED', 'RELEASED', 'RUNNING', 'SUCCEEDED'"
ATTEMPT_STATUSES = "'CANCELLED', 'FAILED', 'RELEASED', 'RUNNING', 'SNOOZED', 'SUCCEEDED'"
EVENTS_0005 = (
    "'CANCELLED', 'CLAIMED', 'DEPENDENCIES_MET', 'ENQUEUED', 'FAILED', 'HEARTBEAT', "
    "'RECOVERED', 'RELEASED', 'RETRIED', 'RETRY_SCHEDULED', 'STARTED', "
    "'SUCCEEDED', 'TIMED_OUT'"
)
EVENTS = (
    "'CANCELLED', 'CLAIMED', 'DEPENDENCIES_MET', 'ENQUEUED', 'FAILED', 'HEARTBEAT', "
    "'RECOVERED', 'RELEASED', 'RETRIED', 'RETRY_SCHEDULED', 'SNOOZED', 'STARTED', "
    "'SUCCEEDED', 'TIMED_OUT'"
)


def _allow(attempt_statuses: str, events: str) -> None:
    with op.batch_alter_table("sqlq_job_attempts") as batch:
        batch.drop_constraint(op.f("ck_sqlq_job_attempts_status_valid"), type_="check")
        batch.create_check_constraint(
            op.f("ck_sqlq_job_attempts_status_valid"), f"status IN ({attempt_statuses})"
        )
    with op.batch_alter_table("sqlq_job_events") as batch:
        batch.drop_constraint(op.f("ck_sqlq_job_events_event_valid"), type_="check")
        batch.create_check_constraint(
            op.f("ck_sqlq_job_events_event_valid"), f"event IN ({events})"
        )


def upgrade() -> None:
    op.add_column("sqlq_jobs", sa.Column("result", sa.Text(), nullable=True))
    _allow(ATTEMPT_STATUSES, EVENTS)


def downgrade() -> None:
    op.execute("UPDATE sqlq_job_attempts SET status = 'RELEASED' WHERE status = 'SNOOZED'")
    op.execute("UPDATE sqlq_job_events SET event = 'RELEASED' WHERE event = 'SNOOZED'")
    _allow(ATTEMPT_STATUSES_0005, EVENTS_0005)
    with op.batch_alter_table("sqlq_jobs") as batch:
        batch.drop_column("result")
