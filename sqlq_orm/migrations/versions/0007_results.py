"""Results: what a task returned, stored with its job.

Revision ID: sqlq_0007
Revises: sqlq_0005
Create Date: 2026-11-24

One nullable ``TEXT`` column on the job table, ``result``: the JSON of what a handler
returned as a :class:`~sqlq_orm.core.results.JobResult` (a task's return value),
capped like the payload. Existing jobs get none. A plain ``ADD COLUMN`` on every
database: no table copy, the jobs stay in place (SQLite adds a nullable column
without rewriting the table).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0007"
down_revision: str | Sequence[str] | None = "sqlq_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sqlq_jobs", sa.Column("result", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sqlq_jobs") as batch:
        batch.drop_column("result")
