"""Each worker's pool: what ``sqlq stats``, the dashboard and ``/metrics`` show of it.

Revision ID: sqlq_0015
Revises: sqlq_0014
Create Date: 2026-11-28

One nullable column on ``sqlq_workers``: ``pool``, the JSON text of the worker's pool
(its kind; for a process pool its children and their pids, jobs per child, recycles,
crashes and kills at deadline; issue 35), written by the liveness upsert every
heartbeat round. A plain ``ADD COLUMN`` on every database; existing rows (and workers
of older versions) have none, shown as a thread pool.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0015"
down_revision: str | Sequence[str] | None = "sqlq_0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sqlq_workers", sa.Column("pool", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sqlq_workers") as batch:
        batch.drop_column("pool")
