"""sqlq's job ids, never handed out twice (its revision sqlq_0005)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

import sqlq_orm.migrations

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A new sqlq_orm release: its steps up to its newest revision, written out (a
    # revision is a snapshot). Without from_=, the steps start where the database stands.
    sqlq_orm.migrations.upgrade(op, to="sqlq_0005")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0005", to="sqlq_0004")
