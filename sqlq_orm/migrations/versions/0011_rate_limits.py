"""Rate limits per queue and key; uniqueness over a period.

Revision ID: sqlq_0011
Revises: sqlq_0009
Create Date: 2026-11-24

Two nullable columns on ``sqlq_queues`` (``rate_limit`` starts per ``rate_period``
seconds, with the CHECK that pairs them; that small table is copied in batch mode,
as sqlq_0009 did), and three nullable columns on the job table: ``rate_key``,
``rate_started_at`` (the claim's sliding-window count reads it through the new index
``ix_sqlq_jobs_rate_window``) and ``dedupe_period`` (how long a finished job's dedupe
key still holds, read through ``ix_sqlq_jobs_dedupe_period``). The job columns are
plain ``ADD COLUMN``s on every database, as in sqlq_0007: the jobs stay in place,
existing jobs get none of them (no key, no limit, no period).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0011"
down_revision: str | Sequence[str] | None = "sqlq_0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STARTED = "rate_started_at IS NOT NULL"
_HELD_FOR_PERIOD = "dedupe_period IS NOT NULL"


def upgrade() -> None:
    # Rebuilt on SQLite (as sqlq_0009 does); a plain ALTER elsewhere, which --sql
    # (offline) mode can render without reflecting the table.
    recreate: Literal["always", "auto"] = (
        "always" if op.get_context().dialect.name == "sqlite" else "auto"
    )
    with op.batch_alter_table("sqlq_queues", recreate=recreate) as batch:
        batch.add_column(sa.Column("rate_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("rate_period", sa.Integer(), nullable=True))
        batch.create_check_constraint(
            op.f("ck_sqlq_queues_rate_limit_with_period"),
            "(rate_limit IS NULL AND rate_period IS NULL)"
            " OR (rate_limit >= 1 AND rate_period >= 1)",
        )
    op.add_column("sqlq_jobs", sa.Column("rate_key", sa.String(255), nullable=True))
    op.add_column("sqlq_jobs", sa.Column("rate_started_at", sa.BigInteger(), nullable=True))
    op.add_column("sqlq_jobs", sa.Column("dedupe_period", sa.Integer(), nullable=True))
    op.create_index(
        op.f("ix_sqlq_jobs_rate_window"),
        "sqlq_jobs",
        ["queue", "rate_started_at"],
        sqlite_where=sa.text(_STARTED),
        postgresql_where=sa.text(_STARTED),
    )
    op.create_index(
        op.f("ix_sqlq_jobs_dedupe_period"),
        "sqlq_jobs",
        ["dedupe_key", "finished_at"],
        sqlite_where=sa.text(_HELD_FOR_PERIOD),
        postgresql_where=sa.text(_HELD_FOR_PERIOD),
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_sqlq_jobs_dedupe_period"), table_name="sqlq_jobs")
    op.drop_index(op.f("ix_sqlq_jobs_rate_window"), table_name="sqlq_jobs")
    with op.batch_alter_table("sqlq_jobs") as batch:
        batch.drop_column("dedupe_period")
        batch.drop_column("rate_started_at")
        batch.drop_column("rate_key")
    with op.batch_alter_table("sqlq_queues") as batch:
        batch.drop_constraint(op.f("ck_sqlq_queues_rate_limit_with_period"), type_="check")
        batch.drop_column("rate_period")
        batch.drop_column("rate_limit")
