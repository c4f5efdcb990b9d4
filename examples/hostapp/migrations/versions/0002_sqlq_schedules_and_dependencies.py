"""sqlq's recurring schedules and job dependencies (its revisions sqlq_0002 to sqlq_0004)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

import sqlq_orm.migrations

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # sqlq_orm shipped new revisions: this app takes them in a revision of its own.
    sqlq_orm.migrations.upgrade(op, from_="sqlq_0001", to="sqlq_0004")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0004", to="sqlq_0001")
