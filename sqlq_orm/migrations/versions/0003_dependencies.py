"""Job dependencies: the WAITING status, ``pending_parents``, sqlq_job_dependencies.

Revision ID: sqlq_0003
Revises: sqlq_0002
Create Date: 2026-11-23

A snapshot like sqlq_0001: every name, type and CHECK is written out here. What changes:

- ``sqlq_jobs``: the status CHECK admits ``WAITING``; a ``pending_parents`` counter
  (0 for every existing job) with two CHECKs; a ``has_dependents`` flag (0: no
  existing job has children); the partial unique dedupe index counts a
  WAITING job as unfinished (on MySQL/MariaDB: its generated column is rebuilt).
- ``sqlq_job_events``: the event CHECK admits ``DEPENDENCIES_MET``.
- a new table ``sqlq_job_dependencies`` (one row per edge child -> parent).

SQLite cannot alter a CHECK in place: the two tables are rebuilt by Alembic's batch
mode, which the migration transaction of :func:`sqlq_orm.migrations.safe_migration`
keeps from cascading deletes (foreign keys are suspended and checked before commit).
Existing jobs, attempts and events are kept as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0003"
down_revision: str | Sequence[str] | None = "sqlq_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
MYSQL: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}

JOB_STATUSES_0001 = "'CANCELLED', 'CLAIMED', 'FAILED', 'QUEUED', 'RUNNING', 'SUCCEEDED'"
JOB_STATUSES = "'CANCELLED', 'CLAIMED', 'FAILED', 'QUEUED', 'RUNNING', 'SUCCEEDED', 'WAITING'"
EVENTS_0001 = (
    "'CANCELLED', 'CLAIMED', 'ENQUEUED', 'FAILED', 'HEARTBEAT', "
    "'RECOVERED', 'RELEASED', 'RETRIED', 'RETRY_SCHEDULED', 'STARTED', "
    "'SUCCEEDED', 'TIMED_OUT'"
)
EVENTS = (
    "'CANCELLED', 'CLAIMED', 'DEPENDENCIES_MET', 'ENQUEUED', 'FAILED', 'HEARTBEAT', "
    "'RECOVERED', 'RELEASED', 'RETRIED', 'RETRY_SCHEDULED', 'STARTED', "
    "'SUCCEEDED', 'TIMED_OUT'"
)
ACTIVE_0001 = "status IN ('CLAIMED', 'QUEUED', 'RUNNING')"
ACTIVE = "status IN ('CLAIMED', 'QUEUED', 'RUNNING', 'WAITING')"
DEDUPE_INDEX = "uq_sqlq_jobs_dedupe_active"


def _replace_dedupe_index(active: str) -> None:
    """Drop and recreate the partial unique dedupe index with ``active`` as its WHERE."""
    op.drop_index(op.f(DEDUPE_INDEX), table_name="sqlq_jobs")
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        # The emulation's generated column (db/backends/mysql.py) goes with its index.
        op.drop_column("sqlq_jobs", f"{DEDUPE_INDEX}_key")
    where = sa.text(f"dedupe_key IS NOT NULL AND {active}")
    op.create_index(
        op.f(DEDUPE_INDEX),
        "sqlq_jobs",
        ["dedupe_key"],
        unique=True,
        sqlite_where=where,
        postgresql_where=where,
        info={"sqlq_key_type": sa.String(255)},
    )


def _restore_claim_index_order() -> None:
    """SQLite: give the claim index back its ``priority DESC`` after a batch rebuild.

    Batch mode recreates the index from SQLite's reflection, which drops DESC; inside
    :func:`~sqlq_orm.migrations.safe_migration` that is already undone, but a host
    app's own ``env.py`` may not use it. Elsewhere the table is altered in place.
    """
    if op.get_context().dialect.name != "sqlite":
        return
    op.drop_index(op.f("ix_sqlq_jobs_claim"), table_name="sqlq_jobs")
    op.create_index(
        op.f("ix_sqlq_jobs_claim"),
        "sqlq_jobs",
        ["queue", "status", sa.text("priority DESC"), "run_at", "id"],
    )


def upgrade() -> None:
    with op.batch_alter_table("sqlq_jobs") as batch:
        batch.drop_constraint(op.f("ck_sqlq_jobs_status_valid"), type_="check")
        batch.add_column(
            sa.Column("pending_parents", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        batch.add_column(
            sa.Column("has_dependents", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        batch.create_check_constraint(
            op.f("ck_sqlq_jobs_status_valid"), f"status IN ({JOB_STATUSES})"
        )
        batch.create_check_constraint(
            op.f("ck_sqlq_jobs_pending_parents_nonneg"), "pending_parents >= 0"
        )
        batch.create_check_constraint(
            op.f("ck_sqlq_jobs_waiting_has_parents"),
            "status <> 'WAITING' OR pending_parents > 0",
        )
    _restore_claim_index_order()
    # After the new column: on MySQL the index's generated column is then last, as
    # create_all() puts it.
    _replace_dedupe_index(ACTIVE)
    with op.batch_alter_table("sqlq_job_events") as batch:
        batch.drop_constraint(op.f("ck_sqlq_job_events_event_valid"), type_="check")
        batch.create_check_constraint(
            op.f("ck_sqlq_job_events_event_valid"), f"event IN ({EVENTS})"
        )

    op.create_table(
        "sqlq_job_dependencies",
        sa.Column("on_parent_failure", sa.String(16), nullable=False),
        sa.Column("job_id", ID, nullable=False),
        sa.Column("depends_on_id", ID, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "depends_on_id", name=op.f("pk_sqlq_job_dependencies")),
        sa.CheckConstraint(
            "on_parent_failure IN ('cancel', 'run')",
            name=op.f("ck_sqlq_job_dependencies_policy_valid"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["sqlq_jobs.id"],
            name=op.f("fk_sqlq_job_dependencies_job_id"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["depends_on_id"],
            ["sqlq_jobs.id"],
            name=op.f("fk_sqlq_job_dependencies_depends_on_id"),
            ondelete="CASCADE",
        ),
        **MYSQL,
    )
    # a parent's end: WHERE depends_on_id IN (:ended)
    op.create_index(
        op.f("ix_sqlq_job_dependencies_depends_on"), "sqlq_job_dependencies", ["depends_on_id"]
    )


def downgrade() -> None:
    # A WAITING job cannot be stored under sqlq_0002's CHECK: it goes back to QUEUED
    # (its parents are forgotten with the table).
    op.drop_table("sqlq_job_dependencies")
    op.execute("UPDATE sqlq_jobs SET status = 'QUEUED' WHERE status = 'WAITING'")
    op.execute("DELETE FROM sqlq_job_events WHERE event = 'DEPENDENCIES_MET'")
    with op.batch_alter_table("sqlq_job_events") as batch:
        batch.drop_constraint(op.f("ck_sqlq_job_events_event_valid"), type_="check")
        batch.create_check_constraint(
            op.f("ck_sqlq_job_events_event_valid"), f"event IN ({EVENTS_0001})"
        )
    with op.batch_alter_table("sqlq_jobs") as batch:
        batch.drop_constraint(op.f("ck_sqlq_jobs_waiting_has_parents"), type_="check")
        batch.drop_constraint(op.f("ck_sqlq_jobs_pending_parents_nonneg"), type_="check")
        batch.drop_constraint(op.f("ck_sqlq_jobs_status_valid"), type_="check")
        batch.drop_column("has_dependents")
        batch.drop_column("pending_parents")
        batch.create_check_constraint(
            op.f("ck_sqlq_jobs_status_valid"), f"status IN ({JOB_STATUSES_0001})"
        )
    _restore_claim_index_order()
    _replace_dedupe_index(ACTIVE_0001)
