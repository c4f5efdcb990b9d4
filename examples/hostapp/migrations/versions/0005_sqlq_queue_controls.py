"""sqlq's operator controls: paused queues and schedules (its revision sqlq_0009)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

import sqlq_orm.migrations

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The next sqlq_orm release: its steps up to its newest revision. Without from_=,
    # the steps start where the database stands.
    sqlq_orm.migrations.upgrade(op, to="sqlq_0009")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0009", to="sqlq_0007")
