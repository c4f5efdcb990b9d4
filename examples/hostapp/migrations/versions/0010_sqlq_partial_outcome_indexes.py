"""sqlq's finished and failure-code indexes made partial (its revision sqlq_0014)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlq_orm.migrations
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Indexes only: ix_sqlq_jobs_finished and ix_sqlq_jobs_failed_code partial.
    sqlq_orm.migrations.upgrade(op, to="sqlq_0014")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0014", to="sqlq_0013")
