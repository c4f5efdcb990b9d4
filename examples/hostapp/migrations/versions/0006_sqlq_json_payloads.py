"""sqlq's payloads and results in the database's JSON type (its revision sqlq_0010)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlq_orm.migrations
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # JSONB on PostgreSQL, JSON on MariaDB (existing rows converted in place); SQLite
    # keeps TEXT. On PostgreSQL also the job table's autovacuum settings.
    sqlq_orm.migrations.upgrade(op, to="sqlq_0010")


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0010", to="sqlq_0009")
