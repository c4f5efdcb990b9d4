"""Initial schema: jobs, attempts, events and workers.

Revision ID: sqlq_0001
Revises:
Create Date: 2025-11-21

A migration is a snapshot: every name, type, CHECK and index is written out here
rather than imported from sqlq_orm, so this revision creates the same schema however
the models change later. Every name is wrapped in ``op.f`` so the naming convention
of whichever metadata runs it (ours, or a host app's) leaves it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("sqlq",)
depends_on: str | Sequence[str] | None = None

# INTEGER PRIMARY KEY is SQLite's auto-increment rowid alias; elsewhere 64 bits.
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

HELD = "status IN ('CLAIMED', 'RUNNING')"
ACTIVE = "status IN ('CLAIMED', 'QUEUED', 'RUNNING')"
TERMINAL = "status IN ('CANCELLED', 'FAILED', 'SUCCEEDED')"
DEDUPE_ACTIVE = f"dedupe_key IS NOT NULL AND {ACTIVE}"
# MySQL/MariaDB only (other databases ignore mysql_* arguments): InnoDB, utf8mb4 and a
# binary collation, so keys and tokens compare exactly as elsewhere. There the partial
# unique index below becomes a unique index on a generated column (db/backends/mysql.py).
MYSQL: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def upgrade() -> None:
    op.create_table(
        "sqlq_jobs",
        sa.Column("id", ID, nullable=False),
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("type", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=True),
        sa.Column("payload_ref", sa.String(1000), nullable=True),
        sa.Column("result_ref", sa.String(1000), nullable=True),
        sa.Column("dedupe_key", sa.String(255), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("run_at", sa.BigInteger(), nullable=False),
        sa.Column("claimed_at", sa.BigInteger(), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=True),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("deadline_at", sa.BigInteger(), nullable=True),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(200), nullable=True),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("retry_count", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("max_runtime_seconds", sa.Integer(), nullable=True),
        sa.Column("error_code", sa.String(100), nullable=True),
        sa.Column("error_detail", sa.String(500), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sqlq_jobs")),
        sa.CheckConstraint(
            "status IN ('CANCELLED', 'CLAIMED', 'FAILED', 'QUEUED', 'RUNNING', 'SUCCEEDED')",
            name=op.f("ck_sqlq_jobs_status_valid"),
        ),
        sa.CheckConstraint("retry_count >= 0", name=op.f("ck_sqlq_jobs_retry_count_nonneg")),
        sa.CheckConstraint("max_retries >= 0", name=op.f("ck_sqlq_jobs_max_retries_nonneg")),
        sa.CheckConstraint("attempt_count >= 0", name=op.f("ck_sqlq_jobs_attempt_count_nonneg")),
        sa.CheckConstraint(
            "max_runtime_seconds IS NULL OR max_runtime_seconds > 0",
            name=op.f("ck_sqlq_jobs_max_runtime_positive"),
        ),
        sa.CheckConstraint(
            f"NOT ({HELD}) OR (claimed_by IS NOT NULL AND lease_token IS NOT NULL"
            " AND lease_expires_at IS NOT NULL)",
            name=op.f("ck_sqlq_jobs_held_has_lease"),
        ),
        sa.CheckConstraint(
            f"({HELD}) OR (lease_token IS NULL AND lease_expires_at IS NULL)",
            name=op.f("ck_sqlq_jobs_lease_only_when_held"),
        ),
        sa.CheckConstraint(
            "status <> 'RUNNING' OR started_at IS NOT NULL",
            name=op.f("ck_sqlq_jobs_running_has_started"),
        ),
        sa.CheckConstraint(
            f"NOT ({TERMINAL}) OR finished_at IS NOT NULL",
            name=op.f("ck_sqlq_jobs_terminal_has_finished"),
        ),
        **MYSQL,
    )
    # claim: WHERE queue = ? AND status = 'QUEUED' AND run_at <= now
    #        ORDER BY priority DESC, run_at, id
    op.create_index(
        op.f("ix_sqlq_jobs_claim"),
        "sqlq_jobs",
        ["queue", "status", sa.text("priority DESC"), "run_at", "id"],
    )
    op.create_index(op.f("ix_sqlq_jobs_lease"), "sqlq_jobs", ["status", "lease_expires_at"])
    op.create_index(op.f("ix_sqlq_jobs_deadline"), "sqlq_jobs", ["status", "deadline_at"])
    op.create_index(
        op.f("ix_sqlq_jobs_running_age"), "sqlq_jobs", ["status", "heartbeat_at", "created_at"]
    )
    op.create_index(op.f("ix_sqlq_jobs_failed_code"), "sqlq_jobs", ["status", "error_code"])
    op.create_index(op.f("ix_sqlq_jobs_finished"), "sqlq_jobs", ["status", "finished_at"])
    op.create_index(op.f("ix_sqlq_jobs_type_status"), "sqlq_jobs", ["type", "status"])
    op.create_index(
        op.f("uq_sqlq_jobs_dedupe_active"),
        "sqlq_jobs",
        ["dedupe_key"],
        unique=True,
        sqlite_where=sa.text(DEDUPE_ACTIVE),
        postgresql_where=sa.text(DEDUPE_ACTIVE),
        # MySQL: a unique index on a generated column of this type (db/backends/mysql.py).
        info={"sqlq_key_type": sa.String(255)},
    )

    op.create_table(
        "sqlq_workers",
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.String(1000), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sqlq_workers")),
        **MYSQL,
    )

    op.create_table(
        "sqlq_job_attempts",
        sa.Column("id", ID, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error_code", sa.String(100), nullable=True),
        sa.Column("error_detail", sa.String(500), nullable=True),
        sa.Column("job_id", ID, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sqlq_job_attempts")),
        # Also the index for "attempts of job N".
        sa.UniqueConstraint("job_id", "attempt", name=op.f("uq_sqlq_job_attempts_job_attempt")),
        sa.CheckConstraint("attempt >= 1", name=op.f("ck_sqlq_job_attempts_attempt_positive")),
        sa.CheckConstraint(
            "status IN ('CANCELLED', 'FAILED', 'RELEASED', 'RUNNING', 'SUCCEEDED')",
            name=op.f("ck_sqlq_job_attempts_status_valid"),
        ),
        sa.CheckConstraint(
            "status = 'RUNNING' OR finished_at IS NOT NULL",
            name=op.f("ck_sqlq_job_attempts_closed_has_finished"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["sqlq_jobs.id"],
            name=op.f("fk_sqlq_job_attempts_job_id"),
            ondelete="CASCADE",
        ),
        **MYSQL,
    )

    op.create_table(
        "sqlq_job_events",
        sa.Column("id", ID, nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("job_id", ID, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sqlq_job_events")),
        sa.CheckConstraint(
            "event IN ('CANCELLED', 'CLAIMED', 'ENQUEUED', 'FAILED', 'HEARTBEAT', "
            "'RECOVERED', 'RELEASED', 'RETRIED', 'RETRY_SCHEDULED', 'STARTED', "
            "'SUCCEEDED', 'TIMED_OUT')",
            name=op.f("ck_sqlq_job_events_event_valid"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["sqlq_jobs.id"],
            name=op.f("fk_sqlq_job_events_job_id"),
            ondelete="CASCADE",
        ),
        **MYSQL,
    )
    # a job's timeline: WHERE job_id = ? ORDER BY ts, id
    op.create_index(op.f("ix_sqlq_job_events_job_ts"), "sqlq_job_events", ["job_id", "ts"])


def downgrade() -> None:
    # Children first; each table's indexes go with it.
    op.drop_table("sqlq_job_events")
    op.drop_table("sqlq_job_attempts")
    op.drop_table("sqlq_workers")
    op.drop_table("sqlq_jobs")
