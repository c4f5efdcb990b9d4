"""Concurrency keys: at most N jobs sharing a key are CLAIMED or RUNNING at once.

Revision ID: sqlq_0004
Revises: sqlq_0002
Create Date: 2026-11-23

Two nullable columns on the job table (existing jobs get neither, so no limit), the
CHECK that pairs them, and the index the claim counts held jobs per key with (partial
where the database allows). On SQLite the CHECK needs batch mode, which copies the
table; ``safe_migration`` keeps its foreign keys and indexes intact.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0004"
down_revision: str | Sequence[str] | None = "sqlq_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HAS_KEY = "concurrency_key IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("sqlq_jobs") as batch:
        batch.add_column(sa.Column("concurrency_key", sa.String(255), nullable=True))
        batch.add_column(sa.Column("concurrency_limit", sa.Integer(), nullable=True))
        batch.create_check_constraint(
            # op.f: the name as written (a host base's naming convention would add
            # its "ck_<table>_" prefix to it again).
            op.f("ck_sqlq_jobs_concurrency_limit_with_key"),
            "(concurrency_key IS NULL AND concurrency_limit IS NULL)"
            " OR (concurrency_key IS NOT NULL AND concurrency_limit >= 1)",
        )
    # the claim's concurrency check: held jobs per key
    op.create_index(
        op.f("ix_sqlq_jobs_concurrency"),
        "sqlq_jobs",
        ["concurrency_key", "status"],
        sqlite_where=sa.text(_HAS_KEY),
        postgresql_where=sa.text(_HAS_KEY),
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_sqlq_jobs_concurrency"), table_name="sqlq_jobs")
    with op.batch_alter_table("sqlq_jobs") as batch:
        batch.drop_constraint(op.f("ck_sqlq_jobs_concurrency_limit_with_key"), type_="check")
        batch.drop_column("concurrency_limit")
        batch.drop_column("concurrency_key")
