"""Job ids are never handed out twice: ``AUTOINCREMENT`` on SQLite.

Revision ID: sqlq_0005
Revises: sqlq_0004
Create Date: 2026-11-24

Without ``AUTOINCREMENT`` SQLite gives a new row ``max(id) + 1``: once retention pruned
the newest jobs, the next job got an id already handed out, and an app row, a log line
or a ticket holding it pointed at another job. With it, SQLite keeps the highest id
ever used in ``sqlite_sequence`` and never goes below it.

SQLite only: the job table is rebuilt in batch mode with its rows in place (ids kept),
and its sequence starts at the highest job id anything still refers to (the jobs, and
the attempts, events and dependency edges, which outlive nothing but could point
higher where foreign keys were once off). Ids pruned above that before this revision
are unknowable and may still come again once. PostgreSQL (sequences) and MariaDB
(InnoDB's ``AUTO_INCREMENT``, kept across restarts since 10.2.4) never hand out an id
twice: nothing to do there.

Run it inside :func:`~sqlq_orm.migrations.safe_migration` (or a stock ``env.py``:
importing sqlq_orm guards the rebuild, see :mod:`sqlq_orm.db.backends.sqlite_rebuilds`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "sqlq_0005"
down_revision: str | Sequence[str] | None = "sqlq_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_REFERENCES = (
    ("sqlq_jobs", "id"),
    ("sqlq_job_attempts", "job_id"),
    ("sqlq_job_events", "job_id"),
    ("sqlq_job_dependencies", "job_id"),
    ("sqlq_job_dependencies", "depends_on_id"),
)


def _on_sqlite() -> bool:
    return bool(op.get_context().dialect.name == "sqlite")


def _restore_claim_index_order() -> None:
    """The claim index's ``priority DESC``, which a rebuild from SQLite's reflection
    loses where neither safe_migration nor sqlq's rebuild guard put it back."""
    op.drop_index(op.f("ix_sqlq_jobs_claim"), table_name="sqlq_jobs")
    op.create_index(
        op.f("ix_sqlq_jobs_claim"),
        "sqlq_jobs",
        ["queue", "status", sa.text("priority DESC"), "run_at", "id"],
    )


def upgrade() -> None:
    if not _on_sqlite():
        return
    with op.batch_alter_table(
        "sqlq_jobs", recreate="always", table_kwargs={"sqlite_autoincrement": True}
    ):
        pass
    _restore_claim_index_order()
    highest = " UNION ALL ".join(
        f"SELECT max({column}) AS m FROM {table}" for table, column in _REFERENCES
    )
    # The copy's explicit ids already set the sequence to max(id); an empty table has none.
    op.execute(
        "INSERT INTO sqlite_sequence (name, seq) SELECT 'sqlq_jobs', 0 "
        "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'sqlq_jobs')"
    )
    op.execute(
        f"UPDATE sqlite_sequence SET seq = max(seq, (SELECT coalesce(max(m), 0) FROM ({highest}) "
        "AS highest)) WHERE name = 'sqlq_jobs'"
    )


def downgrade() -> None:
    if not _on_sqlite():
        return
    with op.batch_alter_table(
        "sqlq_jobs", recreate="always", table_kwargs={"sqlite_autoincrement": False}
    ):
        pass
    _restore_claim_index_order()
