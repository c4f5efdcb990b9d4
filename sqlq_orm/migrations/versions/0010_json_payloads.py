"""Payloads and results in the database's JSON type; autovacuum settings for the job table.

Revision ID: sqlq_0010
Revises: sqlq_0009
Create Date: 2026-11-24

``sqlq_jobs.payload`` and ``sqlq_jobs.result`` (JSON text the service writes) become
``JSONB`` on PostgreSQL and ``JSON`` on MariaDB/MySQL, so arguments can be searched
(``JobFilter(args_contain=...)``, ``payload @> ...``); SQLite keeps ``TEXT``, which its
JSON functions read as it is. Existing rows are converted in place (``ALTER COLUMN
... TYPE jsonb USING``; MariaDB's ``MODIFY`` copies the table, as any column change does
there). The result goes with the payload: the same text written by the same encoder,
and as worth searching.

Rows that cannot be converted stop the upgrade before anything changes, with their ids:
on PostgreSQL a payload or result holding the character NUL (``\\u0000``, which JSONB
cannot store), on MariaDB one that is not valid JSON (the JSON type's CHECK refuses it).

On PostgreSQL it also sets per-table autovacuum settings on ``sqlq_jobs`` (the table is
updated several times per job and pruned in bulk; the server's default waits for 20 %
of the table to be dead before vacuuming it, which on a table of a million retained
jobs is 200,000 dead rows in the claim index). See docs/howto/postgresql-production.md; a DBA's own
values can replace them afterwards (``ALTER TABLE ... SET``), the downgrade resets them.

The downgrade turns the columns back into ``TEXT``. On PostgreSQL the text is then
JSONB's rendering of the value (keys sorted, PostgreSQL's spacing), not what was
written: equal as JSON, not byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from sqlq_orm.errors import SqlqError

revision: str = "sqlq_0010"
down_revision: str | Sequence[str] | None = "sqlq_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("payload", "result")

AUTOVACUUM = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
}
"""Storage parameters set on ``sqlq_jobs`` (PostgreSQL); why: the docs page
docs/howto/postgresql-production.md."""

# JSONB refuses the escape \u0000 (and nothing else the library writes); an odd run of
# backslashes before "u0000" is the escape, an even one a literal backslash then text.
_PG_NUL_ESCAPE = r"(^|[^\\])(\\\\)*\\u0000"


def _dialect() -> str:
    return str(op.get_context().dialect.name)


def _refuse_rows(where: str, why: str, params: dict[str, str] | None = None) -> None:
    if op.get_context().as_sql:
        return  # --sql (offline): no rows to read; the database refuses such rows itself
    ids = (
        op.get_bind()
        .execute(
            sa.text(f"SELECT id FROM sqlq_jobs WHERE {where} ORDER BY id LIMIT 20"), params or {}
        )
        .scalars()
        .all()
    )
    if ids:
        raise SqlqError(
            f"sqlq_0010 cannot convert sqlq_jobs.payload/result to JSON: jobs {list(ids)} "
            f"{why}. Nothing was changed; fix or delete those jobs (e.g. `sqlq jobs delete "
            "--id ...`) and run the migration again."
        )


def upgrade() -> None:
    dialect = _dialect()
    if dialect == "postgresql":
        _refuse_rows(
            " OR ".join(f"{column} ~ :nul" for column in COLUMNS),
            "hold the character NUL (\\u0000) in a string, which JSONB cannot store",
            {"nul": _PG_NUL_ESCAPE},
        )
        for column in COLUMNS:
            op.execute(
                f"ALTER TABLE sqlq_jobs ALTER COLUMN {column} TYPE JSONB "
                f"USING CAST({column} AS JSONB)"
            )
        settings = ", ".join(f"{name} = {value}" for name, value in AUTOVACUUM.items())
        op.execute(f"ALTER TABLE sqlq_jobs SET ({settings})")
    elif dialect in ("mysql", "mariadb"):
        _refuse_rows(
            " OR ".join(
                f"({column} IS NOT NULL AND NOT JSON_VALID({column}))" for column in COLUMNS
            ),
            "are not valid JSON",
        )
        op.execute(
            "ALTER TABLE sqlq_jobs " + ", ".join(f"MODIFY {column} JSON NULL" for column in COLUMNS)
        )
    # SQLite: TEXT already, read by its JSON functions as it is.


def downgrade() -> None:
    dialect = _dialect()
    if dialect == "postgresql":
        op.execute(f"ALTER TABLE sqlq_jobs RESET ({', '.join(AUTOVACUUM)})")
        for column in COLUMNS:
            op.execute(
                f"ALTER TABLE sqlq_jobs ALTER COLUMN {column} TYPE TEXT "
                f"USING CAST({column} AS TEXT)"
            )
    elif dialect in ("mysql", "mariadb"):
        op.execute(
            "ALTER TABLE sqlq_jobs " + ", ".join(f"MODIFY {column} TEXT NULL" for column in COLUMNS)
        )
