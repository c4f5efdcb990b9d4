"""sqlq's worker rows say what pool each worker runs (its revision sqlq_0015)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlq_orm.migrations
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One nullable column: sqlq_workers.pool (kind, children, recycles, crashes).
    sqlq_orm.migrations.upgrade(op, to="sqlq_0015")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0015", to="sqlq_0014")
