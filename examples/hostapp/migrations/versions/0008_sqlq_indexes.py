"""sqlq's job table indexes re-derived from its queries (its revision sqlq_0012)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlq_orm.migrations
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Indexes only: the lease and deadline indexes partial, the running-age index
    # dropped, (type, status) replaced by (status, type, retry_count).
    sqlq_orm.migrations.upgrade(op, to="sqlq_0012")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0012", to="sqlq_0011")
