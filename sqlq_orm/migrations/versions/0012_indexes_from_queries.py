"""The job table's indexes re-derived from the queries that read them (issue 27).

Revision ID: sqlq_0012
Revises: sqlq_0011
Create Date: 2026-11-24

Every enqueue writes a job into each index of the job table and every status change
moves it in each one that holds ``status``; this revision keeps only what a query
reads (bench/README.md, "Issue 27: the job table's indexes", has the plans):

- ``ix_sqlq_jobs_lease`` and ``ix_sqlq_jobs_deadline`` become partial (``WHERE
  lease_expires_at IS NOT NULL`` / ``deadline_at IS NOT NULL``, SQLite and PostgreSQL):
  only held jobs have a lease and only a running job with a max runtime a deadline,
  so a queued or finished job is in neither. The sweep's ``<= now`` implies the WHERE.
- ``ix_sqlq_jobs_running_age`` is dropped: the stats' oldest held jobs order by
  ``COALESCE(heartbeat_at, created_at)``, which it never served; they read the held
  jobs on the partial lease index instead. Each heartbeat no longer moves it either.
- ``ix_sqlq_jobs_type_status (type, status)`` becomes ``ix_sqlq_jobs_status_type
  (status, type, retry_count)``: it covers the retry distribution (which read every
  FAILED job's row) and still covers the per-type counts.

MariaDB/MySQL has no partial indexes: there the lease and deadline indexes stay whole
(recreated the same), as in sqlq_0001. Only indexes change: no row is touched, and on
SQLite no table is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0012"
down_revision: str | Sequence[str] | None = "sqlq_0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HELD_LEASE = "lease_expires_at IS NOT NULL"
_HAS_DEADLINE = "deadline_at IS NOT NULL"


def upgrade() -> None:
    op.drop_index(op.f("ix_sqlq_jobs_lease"), table_name="sqlq_jobs")
    op.create_index(
        op.f("ix_sqlq_jobs_lease"),
        "sqlq_jobs",
        ["status", "lease_expires_at"],
        sqlite_where=sa.text(_HELD_LEASE),
        postgresql_where=sa.text(_HELD_LEASE),
    )
    op.drop_index(op.f("ix_sqlq_jobs_deadline"), table_name="sqlq_jobs")
    op.create_index(
        op.f("ix_sqlq_jobs_deadline"),
        "sqlq_jobs",
        ["status", "deadline_at"],
        sqlite_where=sa.text(_HAS_DEADLINE),
        postgresql_where=sa.text(_HAS_DEADLINE),
    )
    op.drop_index(op.f("ix_sqlq_jobs_running_age"), table_name="sqlq_jobs")
    # The new index first, so the per-type counts always have one to read.
    op.create_index(
        op.f("ix_sqlq_jobs_status_type"), "sqlq_jobs", ["status", "type", "retry_count"]
    )
    op.drop_index(op.f("ix_sqlq_jobs_type_status"), table_name="sqlq_jobs")


def downgrade() -> None:
    op.create_index(op.f("ix_sqlq_jobs_type_status"), "sqlq_jobs", ["type", "status"])
    op.drop_index(op.f("ix_sqlq_jobs_status_type"), table_name="sqlq_jobs")
    op.create_index(
        op.f("ix_sqlq_jobs_running_age"), "sqlq_jobs", ["status", "heartbeat_at", "created_at"]
    )
    op.drop_index(op.f("ix_sqlq_jobs_deadline"), table_name="sqlq_jobs")
    op.create_index(op.f("ix_sqlq_jobs_deadline"), "sqlq_jobs", ["status", "deadline_at"])
    op.drop_index(op.f("ix_sqlq_jobs_lease"), table_name="sqlq_jobs")
    op.create_index(op.f("ix_sqlq_jobs_lease"), "sqlq_jobs", ["status", "lease_expires_at"])
