"""sqlq's job results, what tasks return (its revision sqlq_0007)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

import sqlq_orm.migrations

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A new sqlq_orm release: its steps up to its newest revision, written out (a
    # revision is a snapshot). Without from_=, the steps start where the database stands.
    sqlq_orm.migrations.upgrade(op, to="sqlq_0007")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0007", to="sqlq_0005")
