"""Every query that stats, show, claim, sweep and prune run is served by an index.

Each statement is run under ``EXPLAIN`` exactly as the library runs it (same
statement object, same parameters): a cursor hook prefixes the SQL, so parameter
processing is SQLAlchemy's own. SQLite: ``EXPLAIN QUERY PLAN``; a ``SCAN`` of a queue
table without ``USING ... INDEX`` is a full scan. PostgreSQL: ``EXPLAIN`` with
``enable_seqscan = off`` for the transaction, so tiny test tables still show the
index the planner would use at scale; a ``Seq Scan`` then means no index can serve.
The claim must also read the backlog in index order: no ``USE TEMP B-TREE FOR ORDER
BY`` (SQLite) and no ``Sort`` node (PostgreSQL).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from sqlq_orm.ops.retention import PruneQueries
from sqlq_orm.ops.stats import StatsQueries
from sqlq_orm.ops.timeline import TimelineQueries
from tests.conformance.test_observability import NOW

QUEUE_TABLES = "sqlq_jobs|sqlq_job_attempts|sqlq_job_events"
FULL_SCAN = {
    "sqlite": re.compile(rf"^SCAN ({QUEUE_TABLES})\b(?!.*\bUSING\b)"),
    "postgresql": re.compile(rf"Seq Scan on ({QUEUE_TABLES})\b"),
}
SORTS_BACKLOG = {
    "sqlite": re.compile(r"USE TEMP B-TREE FOR ORDER BY"),
    "postgresql": re.compile(r"\bSort\b"),
}


@pytest.fixture(autouse=True)
def _plans_this_module_can_read(db_url):
    if db_url.startswith("mysql"):
        pytest.skip("reads SQLite's and PostgreSQL's EXPLAIN output; MariaDB's is not parsed")


def explain(engine: Engine, statement: Any, params: dict[str, Any] | None = None) -> list[str]:
    """The plan of ``statement`` as lines of text; nothing is executed."""
    dialect = engine.dialect.name
    prefix = "EXPLAIN QUERY PLAN " if dialect == "sqlite" else "EXPLAIN "
    plan: list[str] = []

    def add_prefix(conn, cursor, statement, parameters, context, executemany):
        return prefix + statement, parameters

    def keep_plan(conn, cursor, statement, parameters, context, executemany):
        plan.extend(str(row[-1] if dialect == "sqlite" else row[0]) for row in cursor.fetchall())

    with engine.connect() as connection:
        if dialect == "postgresql":
            connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        event.listen(connection, "before_cursor_execute", add_prefix, retval=True)
        event.listen(connection, "after_cursor_execute", keep_plan)
        connection.execute(statement, params or {})
        connection.rollback()
    return plan


def _full_scans(engine: Engine, named: list[tuple[str, Any]]) -> dict[str, list[str]]:
    pattern = FULL_SCAN[engine.dialect.name]
    found = {}
    for name, statement in named:
        plan = explain(engine, statement)
        if any(pattern.search(line.strip()) for line in plan):
            found[name] = plan
    return found


def test_stats_show_and_prune_queries_never_scan_a_queue_table_in_full(queue):
    queue.enqueue_many([{"type": "resize"}] * 20)
    named = (
        StatsQueries(queue.tables, NOW, queue.dialect).all()
        + TimelineQueries(queue.tables).all()
        + PruneQueries(queue.tables, queue.dialect).all(NOW)
    )

    offenders = _full_scans(queue.engine, named)

    assert len(named) == 23
    assert offenders == {}


def test_claim_and_sweep_use_indexes_and_the_claim_reads_the_backlog_in_order(queue):
    queue.enqueue_many([{"type": "resize", "priority": n % 3} for n in range(20)])
    claim_params = {
        "p_queues": ["default"],
        "p_limit": 10,
        "p_worker": "w-1",
        "p_lease_seconds": 30,
        "tokens": queue.dialect.bind_tokens(["t"] * 10),
    }
    by_lease = {"p_id": 1, "p_token": "t", "p_status": "RUNNING", "p_code": "A:B", "p_detail": None}
    statements = {
        "claim": (queue.sql.claim, claim_params),
        "claim_and_start": (queue.sql.claim_and_start, claim_params),
        "sweep.expired_leases": (queue.sql.expired_leases, {"p_limit": 100}),
        "sweep.past_deadline": (queue.sql.past_deadline, {"p_limit": 100}),
        "sweep.requeue_for_retry": (queue.sql.requeue_for_retry, {**by_lease, "p_delay": 10}),
        "sweep.fail": (queue.sql.fail, by_lease),
    }
    full_scan = FULL_SCAN[queue.engine.dialect.name]
    sorts = SORTS_BACKLOG[queue.engine.dialect.name]

    plans = {name: explain(queue.engine, st, params) for name, (st, params) in statements.items()}

    scanning = {n: p for n, p in plans.items() if any(full_scan.search(x.strip()) for x in p)}
    # On PostgreSQL the claim also writes its history (CTEs "history_N", after the
    # claim's own); sorting the claimed batch there to number its events is fine.
    sorting = {
        n: p
        for n, p in plans.items()
        if n.startswith("claim") and _sorts_backlog(_before_history(p), sorts)
    }
    assert scanning == {}
    assert sorting == {}


def _sorts_backlog(plan: list[str], sorts: re.Pattern[str]) -> bool:
    """Whether a sort in the claim's plan reads anything but the picked rows.

    The claim ranks the rows it picked (at most ``p_limit``) per concurrency key, which
    sorts them; what must never be sorted is the backlog the candidates come from.
    The sort's input is the line before it on SQLite, the first node below it on
    PostgreSQL."""
    for index, line in enumerate(plan):
        if not sorts.search(line):
            continue
        if line.startswith("USE TEMP B-TREE"):
            source = plan[index - 1] if index else ""
        else:
            source = next((x for x in plan[index + 1 :] if "->" in x), "")
        if not re.search(r"\b(SCAN|CTE Scan on) picked\b", source):
            return True
    return False


def _before_history(plan: list[str]) -> list[str]:
    """The plan lines of the claim itself, without the CTEs writing its history."""
    for index, line in enumerate(plan):
        if re.match(r"\s*CTE history_", line):
            return plan[:index]
    return plan


def test_the_plan_check_flags_a_query_no_index_serves(queue):
    jobs = queue.tables.jobs
    # error_detail: no index holds it (payload would do too, but is JSONB on PostgreSQL).
    unindexed = select(jobs.c.id).where(jobs.c.error_detail == "x").order_by(jobs.c.payload_ref)

    offenders = _full_scans(queue.engine, [("unindexed", unindexed)])

    assert list(offenders) == ["unindexed"]
    assert any(
        SORTS_BACKLOG[queue.engine.dialect.name].search(line) for line in offenders["unindexed"]
    )


# sqlq_0012: which index each query of the held set, the sweep and the per-type stats
# reads. The partial lease and deadline indexes hold only the jobs with a lease or a
# deadline, so a query must imply their WHERE to use them; a plan that silently fell
# back to another status-leading index would still pass the full-scan checks above.
EXPECTED_INDEXES = {
    "stats.oldest_held": {"ix_sqlq_jobs_lease"},
    "stats.held_by_worker": {"ix_sqlq_jobs_lease"},
    "stats.expired_leases": {"ix_sqlq_jobs_lease"},
    "stats.past_deadline": {"ix_sqlq_jobs_deadline"},
    "timeline.held_by": {"ix_sqlq_jobs_lease"},
    "sweep.expired_leases": {"ix_sqlq_jobs_lease"},
    # RUNNING, past its deadline, lease still live: both partial indexes imply it, and
    # SQLite picks either from one run to the next (main chose the lease one).
    "sweep.past_deadline": {"ix_sqlq_jobs_deadline", "ix_sqlq_jobs_lease"},
    "stats.retry_distribution": {"ix_sqlq_jobs_status_type"},
    "stats.counts_by_type": {"ix_sqlq_jobs_status_type"},
    # sqlq_0014: the finished and failure-code indexes are partial too.
    "stats.failed_by_code": {"ix_sqlq_jobs_failed_code"},
    "stats.retrying_by_code": {"ix_sqlq_jobs_failed_code"},
    "stats.throughput": {"ix_sqlq_jobs_finished"},
    "stats.oldest_finished": {"ix_sqlq_jobs_finished"},
    "prune.count_jobs": {"ix_sqlq_jobs_finished"},
}
COVERED = {"stats.retry_distribution", "stats.counts_by_type", "stats.failed_by_code"}
"""Answered from the index alone (SQLite: ``COVERING INDEX``): no job row is read."""
SQLITE_INDEX = re.compile(r"USING (COVERING )?INDEX (\w+)")


@pytest.fixture
def _sqlite_plans(db_url):
    # PostgreSQL's choice among indexes on a table of a few rows follows no statistics
    # worth the name (seen: ix_*_failed_code for the deadline sweep); its plans at
    # 300,000 rows are in bench/README.md (issue 27, the job table's indexes). Skipped
    # before the queue fixture makes a database for nothing.
    if not db_url.startswith("sqlite"):
        pytest.skip("which index PostgreSQL picks on a tiny table says nothing")


def test_the_held_set_sweep_and_type_stats_read_the_index_made_for_them(_sqlite_plans, queue):
    queue.enqueue_many([{"type": "resize", "max_runtime_seconds": 60}] * 20)
    queue.claim("w-1", limit=5, start=True)
    stats = dict(StatsQueries(queue.tables, NOW, queue.dialect).all())
    stats.update(PruneQueries(queue.tables, queue.dialect).all(NOW))
    statements = {
        **{
            name: (stats[name], None)
            for name in EXPECTED_INDEXES
            if name.startswith(("stats.", "prune."))
        },
        "timeline.held_by": (TimelineQueries(queue.tables).held_by("w-1"), None),
        "sweep.expired_leases": (queue.sql.expired_leases, {"p_limit": 100}),
        "sweep.past_deadline": (queue.sql.past_deadline, {"p_limit": 100}),
    }

    plans = {name: explain(queue.engine, st, params) for name, (st, params) in statements.items()}

    read = {name: _indexes_read(plan) for name, plan in plans.items()}
    elsewhere = {
        name: plans[name]
        for name, wanted in EXPECTED_INDEXES.items()
        if not wanted & {index for _, index in read[name]}
    }
    row_reads = {
        name: plans[name]
        for name in COVERED
        if not any(covering and index in EXPECTED_INDEXES[name] for covering, index in read[name])
    }
    assert elsewhere == {}
    assert row_reads == {}


def _indexes_read(plan: list[str]) -> set[tuple[bool, str]]:
    """(covering, index name) of each index a SQLite plan reads."""
    return {(bool(m.group(1)), m.group(2)) for line in plan for m in SQLITE_INDEX.finditer(line)}
