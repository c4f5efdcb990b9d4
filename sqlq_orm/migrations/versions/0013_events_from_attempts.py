"""A worker's claim, start and success read from its attempt row, not written as events.

Revision ID: sqlq_0013
Revises: sqlq_0012
Create Date: 2026-11-25

Two nullable columns on the attempts table (issue 27, "write less per job"):

- ``after_event_id``: set on an attempt opened by a claim that also started the job
  (every ``Worker`` run). Such a row stands for the attempt's CLAIMED and STARTED
  events and, when it ends ``SUCCEEDED``, its SUCCEEDED event; none of the three is
  written to the events table. The value is the id of the job's last written event
  at the claim, which places the two in the job's timeline
  (:mod:`sqlq_orm.ops.stand_ins`).
- ``lease_seconds``: the claim's lease length, which its CLAIMED event reports.

Existing rows keep NULL in both: their events are in the events table, as before, and
are read as before. Plain ``ADD COLUMN``s on every database: no row is touched and on
SQLite no table is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0013"
down_revision: str | Sequence[str] | None = "sqlq_0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sqlq_job_attempts", sa.Column("after_event_id", sa.BigInteger(), nullable=True))
    op.add_column("sqlq_job_attempts", sa.Column("lease_seconds", sa.Integer(), nullable=True))


def downgrade() -> None:
    # Rows written since the upgrade hold events that exist nowhere else: going back
    # would drop them from every timeline, so downgrading writes them out first.
    _write_out_events()
    with op.batch_alter_table("sqlq_job_attempts") as batch:
        batch.drop_column("lease_seconds")
        batch.drop_column("after_event_id")


def _write_out_events() -> None:
    attempts = sa.table(
        "sqlq_job_attempts",
        *(sa.column(name) for name in ("job_id", "attempt", "worker_id", "status")),
        sa.column("started_at", sa.BigInteger()),
        sa.column("finished_at", sa.BigInteger()),
        sa.column("after_event_id", sa.BigInteger()),
        sa.column("lease_seconds", sa.Integer()),
    )
    events = sa.table(
        "sqlq_job_events",
        *(sa.column(name) for name in ("job_id", "ts", "event", "actor", "detail")),
    )
    a = attempts.c
    number = '{"attempt":' + sa.cast(a.attempt, sa.String)  # String "+" is || or CONCAT()
    actor = sa.func.coalesce(a.worker_id, "system")
    derived = a.after_event_id.is_not(None)
    for when, name, detail, only in (
        (
            a.started_at,
            "CLAIMED",
            number + ',"lease_seconds":' + sa.cast(a.lease_seconds, sa.String) + "}",
            derived,
        ),
        (a.started_at, "STARTED", number + "}", derived),
        (a.finished_at, "SUCCEEDED", number + "}", sa.and_(derived, a.status == "SUCCEEDED")),
    ):
        rows = sa.select(a.job_id, when, sa.literal(name), actor, detail).where(only)
        op.execute(events.insert().from_select(["job_id", "ts", "event", "actor", "detail"], rows))
