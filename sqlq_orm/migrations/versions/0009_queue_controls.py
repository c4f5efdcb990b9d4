"""Operator controls: the sqlq_queues table (paused queues), paused schedules.

Revision ID: sqlq_0009
Revises: sqlq_0007
Create Date: 2026-11-24

A new table, written out through Alembic's portable operations like sqlq_0002, and
a nullable ``paused_at`` on ``sqlq_schedules`` (that small table is copied in batch
mode, on SQLite too); existing jobs are untouched, and a queue without a row runs as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0009"
down_revision: str | Sequence[str] | None = "sqlq_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sqlq_queues",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("paused_at", sa.BigInteger(), nullable=True),
        sa.Column("changed_by", sa.String(200), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_sqlq_queues")),
        # MySQL/MariaDB only, as in sqlq_0001: InnoDB, utf8mb4, binary collation.
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    # On SQLite a plain ADD COLUMN would leave the table's DDL unlike the models'
    # (SQLite appends the column to the stored CREATE text): rebuild the small table.
    # Elsewhere a plain ALTER, which --sql (offline) mode can render: a rebuild there
    # would need a live connection to reflect the table.
    with op.batch_alter_table("sqlq_schedules", recreate=_rebuilt_on_sqlite()) as batch:
        batch.add_column(sa.Column("paused_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sqlq_schedules") as batch:
        batch.drop_column("paused_at")
    op.drop_table("sqlq_queues")


def _rebuilt_on_sqlite() -> Literal["always", "auto"]:
    return "always" if op.get_context().dialect.name == "sqlite" else "auto"
