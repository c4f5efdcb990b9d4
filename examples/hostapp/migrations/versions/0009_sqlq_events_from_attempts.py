"""sqlq's attempt rows standing for a worker's claim, start and success (its revision sqlq_0013)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlq_orm.migrations
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Two nullable columns on the attempts table (after_event_id, lease_seconds).
    sqlq_orm.migrations.upgrade(op, to="sqlq_0013")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0013", to="sqlq_0012")
