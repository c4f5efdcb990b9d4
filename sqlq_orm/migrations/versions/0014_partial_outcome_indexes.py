"""The finished and failure-code indexes hold only jobs that have those values.

Revision ID: sqlq_0014
Revises: sqlq_0013
Create Date: 2026-11-25

Every enqueue wrote a job into ``ix_sqlq_jobs_finished (status, finished_at)`` and
``ix_sqlq_jobs_failed_code (status, error_code)``, and every claim moved it in both
(they start with ``status``), though their queries only read finished jobs and jobs
with a code. Both become partial (SQLite and PostgreSQL; issue 27):

- ``ix_sqlq_jobs_finished ... WHERE finished_at IS NOT NULL``: retention's
  ``finished_at < cutoff`` and the stats' and charts' ``finished_at >= since`` imply it;
- ``ix_sqlq_jobs_failed_code ... WHERE error_code IS NOT NULL``: the failure Top-N now
  says ``error_code IS NOT NULL`` (every FAILED job has a code), a filter on a code
  implies it.

A queued or running job with no failure behind it is in neither, so an enqueue writes
two index entries fewer and a claim moves none there (bench/README.md has the
figures). MariaDB/MySQL has no partial indexes: there both stay whole (recreated the
same). Only indexes change: no row is touched, and on SQLite no table is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0014"
down_revision: str | Sequence[str] | None = "sqlq_0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PARTIAL = {
    "ix_sqlq_jobs_finished": (["status", "finished_at"], "finished_at IS NOT NULL"),
    "ix_sqlq_jobs_failed_code": (["status", "error_code"], "error_code IS NOT NULL"),
}


def upgrade() -> None:
    for name, (columns, where) in _PARTIAL.items():
        op.drop_index(op.f(name), table_name="sqlq_jobs")
        op.create_index(
            op.f(name),
            "sqlq_jobs",
            columns,
            sqlite_where=sa.text(where),
            postgresql_where=sa.text(where),
        )


def downgrade() -> None:
    for name, (columns, _) in _PARTIAL.items():
        op.drop_index(op.f(name), table_name="sqlq_jobs")
        op.create_index(op.f(name), "sqlq_jobs", columns)
