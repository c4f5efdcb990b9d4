"""sqlq's rate limits and uniqueness over a period (its revision sqlq_0011)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

import sqlq_orm.migrations

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    sqlq_orm.migrations.upgrade(op, to="sqlq_0011")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0011", to="sqlq_0009")
