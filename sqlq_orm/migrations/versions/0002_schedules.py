"""Recurring schedules: the sqlq_schedules table.

Revision ID: sqlq_0002
Revises: sqlq_0001
Create Date: 2026-11-23

A snapshot like sqlq_0001: names, types and the index are written out here, through
Alembic's portable operations only (no dialect-specific SQL), so it runs the same on
every database sqlq_orm supports. Existing jobs are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0002"
down_revision: str | Sequence[str] | None = "sqlq_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sqlq_schedules",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("type", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("last_slot_at", sa.BigInteger(), nullable=True),
        sa.Column("next_slot_at", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_sqlq_schedules")),
        # MySQL/MariaDB only, as in sqlq_0001: InnoDB, utf8mb4, binary collation.
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    # the scheduler's tick: WHERE next_slot_at <= now
    op.create_index(op.f("ix_sqlq_schedules_next_slot"), "sqlq_schedules", ["next_slot_at"])


def downgrade() -> None:
    op.drop_table("sqlq_schedules")
