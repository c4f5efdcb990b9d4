"""sqlq's rate limits and uniqueness over a period (its revision sqlq_0011)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlq_orm.migrations
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A queue's rate limit (on sqlq_queues), and per job its rate_key, when the claim
    # started it under the limit, and how long its dedupe_key holds after it ends.
    sqlq_orm.migrations.upgrade(op, to="sqlq_0011")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0011", to="sqlq_0010")
