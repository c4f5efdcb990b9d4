"""Fill a queue's tables with a large finished history, fast, in raw SQL.

Going through the service would take minutes per million jobs; one
``INSERT ... SELECT`` over a generated series takes seconds. The rows obey every
CHECK constraint of the schema: terminal jobs with ``finished_at`` and no lease, one
closed attempt per job, and an ENQUEUED plus a terminal event per job. Statuses are
mostly SUCCEEDED, with 5% FAILED (ten error codes) and 1% CANCELLED, over ten types,
finished two seconds apart (a million jobs span ~23 days).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Engine

_SERIES = {
    # SQLite: a recursive CTE counting 1..N.
    "sqlite": (
        "WITH RECURSIVE series(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM series WHERE n < {n}) ",
        "series",
    ),
    # PostgreSQL: generate_series.
    "postgresql": ("", "generate_series(1, {n}) AS series(n)"),
}

_NOW = {
    "sqlite": "CAST(strftime('%s', 'now') AS INTEGER)",
    "postgresql": "CAST(FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP)) AS BIGINT)",
}

_STATUS = (
    "CASE WHEN n % 20 = 0 THEN 'FAILED' WHEN n % 100 = 1 THEN 'CANCELLED' ELSE 'SUCCEEDED' END"
)


def _payload(dialect: str) -> str:
    as_text = "'{\"n\":' || CAST(n AS VARCHAR(12)) || '}'"
    # PostgreSQL's payload column is JSONB (sqlq_0010): text needs the cast there.
    return f"CAST({as_text} AS JSONB)" if dialect == "postgresql" else as_text


def fill_finished_history(engine: Engine, jobs: int) -> None:
    """Add ``jobs`` finished jobs, their attempts and their events to the tables."""
    dialect = engine.dialect.name
    prefix, source = _SERIES[dialect]
    source = source.format(n=jobs)
    prefix = prefix.format(n=jobs)
    now = _NOW[dialect]
    start = f"({now} - {2 * jobs} + n * 2)"
    insert_jobs = (
        f"{prefix}INSERT INTO sqlq_jobs (queue, type, status, priority, payload, created_at,"
        " run_at, claimed_at, started_at, heartbeat_at, finished_at, claimed_by,"
        " attempt_count, retry_count, max_retries, error_code, error_detail)"
        f" SELECT 'default', 'type_' || CAST(n % 10 AS VARCHAR(4)), {_STATUS}, 0,"
        f" {_payload(dialect)},"
        f" {start}, {start}, {start} + 1, {start} + 1, {start} + 1, {start} + 3,"
        " 'filler-worker', 1, 0, 3,"
        " CASE WHEN n % 20 = 0 THEN 'FILL:CODE_' || CAST(n % 7 AS VARCHAR(2)) END,"
        " CASE WHEN n % 20 = 0 THEN 'filled failure' END"
        f" FROM {source}"
    )
    # Only the rows just added (they are the newest ids), so this also works on a
    # table that already holds jobs.
    new_rows = f"id > (SELECT coalesce(max(id), 0) - {jobs} FROM sqlq_jobs)"
    insert_attempts = (
        "INSERT INTO sqlq_job_attempts (job_id, attempt, worker_id, started_at, finished_at,"
        " status, error_code, error_detail)"
        " SELECT id, 1, claimed_by, started_at, finished_at, status, error_code, error_detail"
        f" FROM sqlq_jobs WHERE {new_rows}"
    )
    insert_enqueued = (
        "INSERT INTO sqlq_job_events (job_id, ts, event, actor, detail)"
        " SELECT id, created_at, 'ENQUEUED', 'system', NULL"
        f" FROM sqlq_jobs WHERE {new_rows}"
    )
    insert_finished = (
        "INSERT INTO sqlq_job_events (job_id, ts, event, actor, detail)"
        " SELECT id, finished_at, status, claimed_by, NULL"
        f" FROM sqlq_jobs WHERE {new_rows}"
    )
    with engine.begin() as connection:
        # text(): SQLAlchemy escapes the modulo signs for psycopg's paramstyle.
        for statement in (insert_jobs, insert_attempts, insert_enqueued, insert_finished):
            connection.execute(text(statement))
    # Fresh planner statistics (and on PostgreSQL a visibility map, so index-only
    # scans work), as a long-lived database would have after autovacuum.
    if dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql(
                "VACUUM ANALYZE sqlq_jobs, sqlq_job_attempts, sqlq_job_events"
            )
    else:
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
            connection.commit()


def add_expired_leases(engine: Engine, count: int, worker: str = "gone-worker") -> list[int]:
    """Add ``count`` RUNNING jobs whose lease expired 10 minutes ago (open attempts).

    Returns their ids, so a bench can delete them afterwards.
    """
    now = _NOW[engine.dialect.name]
    with engine.begin() as connection:
        before = connection.exec_driver_sql(
            "SELECT coalesce(max(id), 0) FROM sqlq_jobs"
        ).scalar_one()
        for number in range(count):
            connection.exec_driver_sql(
                "INSERT INTO sqlq_jobs (queue, type, status, priority, created_at, run_at,"
                " claimed_at, started_at, heartbeat_at, lease_expires_at, claimed_by,"
                " lease_token, attempt_count, retry_count, max_retries)"
                f" VALUES ('default', 'expired', 'RUNNING', 0, {now} - 900, {now} - 900,"
                f" {now} - 900, {now} - 900, {now} - 900, {now} - 600, '{worker}',"
                f" 'expired-token-{number}', 1, 0, 3)"
            )
        ids = [
            row[0]
            for row in connection.exec_driver_sql(
                f"SELECT id FROM sqlq_jobs WHERE id > {int(before)} ORDER BY id"
            )
        ]
        connection.exec_driver_sql(
            "INSERT INTO sqlq_job_attempts (job_id, attempt, worker_id, started_at, status)"
            f" SELECT id, 1, claimed_by, started_at, 'RUNNING' FROM sqlq_jobs"
            f" WHERE id > {int(before)}"
        )
    return ids


def delete_jobs(engine: Engine, ids: list[int]) -> None:
    """Delete jobs (their attempts and events go with them: ON DELETE CASCADE)."""
    if not ids:
        return
    with engine.begin() as connection:
        connection.exec_driver_sql(
            f"DELETE FROM sqlq_jobs WHERE id BETWEEN {min(ids)} AND {max(ids)}"
        )
