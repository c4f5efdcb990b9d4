"""orders, and the job queue's tables with the app's columns on its jobs

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import sqlq_orm.migrations

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("number", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_orders")),
    )
    # sqlq's tables, exactly as its revision sqlq_0001 makes them. Pinned: a later
    # sqlq_orm release adds its steps in a new revision of ours, from_="sqlq_0001".
    sqlq_orm.migrations.upgrade(op, to="sqlq_0001")
    # The app's columns on the job table.
    with op.batch_alter_table("sqlq_jobs") as batch_op:
        batch_op.add_column(sa.Column("tenant_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("order_id", sa.Integer(), nullable=True))
        batch_op.create_index(op.f("ix_sqlq_jobs_tenant_id"), ["tenant_id"])
        batch_op.create_foreign_key(
            op.f("fk_sqlq_jobs_order_id_orders"),
            "orders",
            ["order_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    sqlq_orm.migrations.downgrade(op, from_="sqlq_0001")  # the app's columns go too
    op.drop_table("orders")
