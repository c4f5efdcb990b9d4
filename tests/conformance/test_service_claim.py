"""Claiming: which jobs, in what order, how many, and at what cost to the database.

Cost is checked without timing: by the plan the database chose (EXPLAIN), and on
SQLite by counting virtual-machine steps, which do not depend on machine speed.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import sqlalchemy

from sqlq_orm import InvalidInput, PinnedClock, Queue, SqlqError
from tests.conftest import PINNED_START as T0
from tests.support.aio_bridge import BlockingAsyncQueue
from tests.support.queue_helpers import count_events, is_sqlite, job_row, second_engine


def test_claim_takes_highest_priority_first_then_oldest(queue, clock):
    low = queue.enqueue("a", priority=0)
    clock.advance(1)
    high_newer = queue.enqueue("b", priority=5)
    high_older = queue.enqueue("c", priority=5, run_at=T0 - 60)
    clock.advance(1)
    middle = queue.enqueue("d", priority=2)

    picked = [queue.claim("worker-a")[0].job_id for _ in range(4)]

    assert picked == [high_older.id, high_newer.id, middle.id, low.id]


def test_claim_never_takes_more_than_limit_and_gives_each_lease_its_own_token(queue, engine):
    queue.enqueue_many([{"type": "a"} for _ in range(10)])

    leases = queue.claim("worker-a", limit=4, lease_seconds=45)

    assert len(leases) == 4
    assert len({lease.token for lease in leases}) == 4
    assert all(len(lease.token) >= 32 for lease in leases)
    assert queue.counts_by_status()["CLAIMED"] == 4
    assert count_events(engine, "CLAIMED") == 4
    for lease in leases:
        row = job_row(engine, lease.job_id)
        assert (row.status, row.claimed_by, row.lease_token) == ("CLAIMED", "worker-a", lease.token)
        # + 1: "now" is a whole second, truncated; a lease never ends early.
        assert (row.claimed_at, row.heartbeat_at, row.lease_expires_at) == (T0, T0, T0 + 46)
        assert lease.lease_expires_at == T0 + 46 and lease.attempt == 1


def test_claim_leaves_jobs_whose_run_at_has_not_come(queue, clock):
    later = queue.enqueue("a", delay=10)

    assert queue.claim("worker-a") == []
    clock.advance(10)
    assert queue.claim("worker-a") == []  # "now" is truncated: due a second later, never early
    clock.advance(1)
    assert [lease.job_id for lease in queue.claim("worker-a")] == [later.id]


def test_claim_from_several_queues_merges_them_in_claim_order(queue, clock):
    expected = []
    for n in range(12):
        job = queue.enqueue("a", queue=["mail", "sms", "push"][n % 3], priority=n % 4)
        expected.append((-(n % 4), n, job.id))
        clock.advance(1)
    queue.enqueue("a", queue="other", priority=99)
    clock.advance(1)
    want = [job_id for _, _, job_id in sorted(expected)]

    first = queue.claim("worker-a", queues=["mail", "sms", "push", "sms"], limit=5)
    rest = queue.claim("worker-a", queues=("push", "mail", "sms"), limit=100)

    # Leases come back sorted by job id; which jobs each claim took is the point.
    assert [lease.job_id for lease in first] == sorted(want[:5])
    assert [lease.job_id for lease in rest] == sorted(want[5:])
    assert {lease.queue for lease in first + rest} == {"mail", "sms", "push"}


def test_claim_with_one_queue_name_as_a_string(queue):
    job = queue.enqueue("a", queue="mail")
    assert [lease.job_id for lease in queue.claim("worker-a", queues="mail")] == [job.id]


def test_claim_event_records_attempt_and_lease_length(queue, engine):
    job = queue.enqueue("a")
    queue.claim("worker-a", lease_seconds=45)

    with engine.connect() as connection:
        detail = connection.exec_driver_sql(
            "SELECT detail FROM sqlq_job_events WHERE event = 'CLAIMED'"
        ).scalar_one()
    assert json.loads(detail) == {"attempt": 1, "lease_seconds": 45}
    assert job_row(engine, job.id).attempt_count == 0  # counted when it starts


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queues": []}, "at least one queue"),
        ({"queues": ["ok", ""]}, "queue must be a non-empty string, got ''"),
        ({"queues": 7}, "queues must be a queue name or a list of names, got 7"),
        ({"queues": [f"q{n}" for n in range(101)]}, "at most 100 queues, got 101"),
    ],
)
def test_claim_refuses_bad_queue_lists(queue, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        queue.claim("worker-a", **kwargs)


# ----------------------------------------------------------------- query cost


def _explain_claim(engine, queue: Queue, queues: list[str], explain: str) -> list:
    """Run a real claim, then ``explain`` the exact SQL and parameters it sent."""
    if isinstance(queue, BlockingAsyncQueue):
        pytest.skip("the plan is of the one claim statement, explained in the sync flavour")
    captured = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().startswith(("UPDATE", "WITH")) and "lease_token=" in statement:
            captured.append((statement, parameters))

    sqlalchemy.event.listen(engine, "before_cursor_execute", capture)
    try:
        queue.claim("probe", queues=queues, limit=5)
    finally:
        sqlalchemy.event.remove(engine, "before_cursor_execute", capture)
    ((statement, parameters),) = captured
    with engine.connect() as connection:
        driver_connection = connection.connection.driver_connection
        cursor = driver_connection.cursor()
        cursor.execute(f"{explain} {statement}", parameters)
        rows = cursor.fetchall()
        driver_connection.rollback()
    return rows


def _claim_plan(engine, queue: Queue, queues: list[str]) -> list[str]:
    """SQLite: the EXPLAIN QUERY PLAN lines of the claim statement."""
    return [row[3] for row in _explain_claim(engine, queue, queues, "EXPLAIN QUERY PLAN")]


@pytest.fixture
def sqlite_only(engine):
    if not is_sqlite(engine):
        pytest.skip("SQLite query plans (PostgreSQL's are checked separately)")


def test_sqlite_single_queue_claim_reads_the_index_in_order_without_sorting(
    sqlite_only, engine, queue
):
    queue.enqueue_many([{"type": "a", "priority": n % 3} for n in range(200)])

    plan = _claim_plan(engine, queue, ["default"])

    assert any("USING INDEX ix_sqlq_jobs_claim" in line for line in plan), plan
    assert not any(line.startswith("SCAN sqlq_jobs") for line in plan), plan
    _only_picked_rows_sorted(plan)


def _only_picked_rows_sorted(plan: list[str]) -> None:
    """Every sort in the plan sorts rows already picked (at most ``p_limit`` per
    queue: the concurrency keys' ranking, the merge of queues), never the backlog."""
    for before, line in zip(plan, plan[1:], strict=False):
        if "TEMP B-TREE" in line:
            assert before.startswith("SCAN ") and "sqlq_jobs" not in before, plan


def test_sqlite_multi_queue_claim_reads_each_queue_by_index(sqlite_only, engine, queue):
    queue.enqueue_many([{"type": "a", "queue": q} for q in ("x", "y", "z") for _ in range(50)])

    plan = _claim_plan(engine, queue, ["x", "y", "z"])

    searches = [line for line in plan if "USING INDEX ix_sqlq_jobs_claim" in line]
    assert len(searches) == 3, plan
    # Sorts of at most queues * limit picked rows only; never a scan of the table.
    _only_picked_rows_sorted(plan)
    assert not any(line.startswith("SCAN sqlq_jobs") for line in plan), plan


def _vm_steps_of_one_claim(db_url: str, queues: list[str]) -> int:
    """How many SQLite VM steps (in hundreds) one claim of 5 jobs takes."""
    engine = second_engine(db_url)
    steps = [0]

    def count(*_: object) -> int:
        steps[0] += 1
        return 0

    @sqlalchemy.event.listens_for(engine, "connect")
    def install(dbapi_connection, _record):
        dbapi_connection.set_progress_handler(count, 100)

    Queue(engine, clock=PinnedClock(T0)).claim("probe", queues=queues, limit=5)
    engine.dispose()
    return steps[0]


@pytest.mark.parametrize("queues", [["a"], ["a", "b"]], ids=["one-queue", "two-queues"])
def test_sqlite_claim_work_does_not_grow_with_the_backlog(sqlite_only, db_url, queue, queues):
    def grow_backlog_to(size: int) -> None:
        missing = size - queue.counts_by_status()["QUEUED"]
        queue.enqueue_many(
            [{"type": "a", "queue": "ab"[n % 2], "priority": n % 3} for n in range(missing)]
        )

    grow_backlog_to(1_000)
    small = _vm_steps_of_one_claim(db_url, queues)
    grow_backlog_to(20_000)
    large = _vm_steps_of_one_claim(db_url, queues)

    # Sorting or scanning the backlog would cost about 20 times as much.
    assert large <= 2 * small + 10, (small, large)


def _plan_nodes(node: dict) -> list[dict]:
    found = [node]
    for child in node.get("Plans", []):
        found.extend(_plan_nodes(child))
    return found


@pytest.mark.parametrize("queues", [["a"], ["a", "b", "c"]], ids=["one-queue", "three-queues"])
def test_postgresql_claim_locks_rows_read_by_index_with_no_sort_below_the_lock(
    engine, queue, queues
):
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL plans")
    queue.enqueue_many(
        [{"type": "a", "queue": "abc"[n % 3], "priority": n % 4} for n in range(6000)]
    )
    with engine.begin() as connection:
        connection.exec_driver_sql("ANALYZE sqlq_jobs")
    plan = _explain_claim(engine, queue, queues, "EXPLAIN (FORMAT JSON)")[0][0][0]["Plan"]

    lock_nodes = [n for n in _plan_nodes(plan) if n["Node Type"] == "LockRows"]
    assert len(lock_nodes) == len(queues)
    for lock in lock_nodes:
        below = _plan_nodes(lock)[1:]
        assert not any(n["Node Type"] == "Sort" for n in below), lock
        assert any(n.get("Index Name") == "ix_sqlq_jobs_claim" for n in below), lock


def test_the_database_clock_leases_from_the_servers_now(engine):
    real_clock_queue = Queue(engine)  # DatabaseClock: the default
    job = real_clock_queue.enqueue("a")
    (lease,) = real_clock_queue.claim("worker-a", lease_seconds=600)
    now = time.time()

    row = job_row(engine, job.id)
    slack = 5  # a correctness check across clocks, not a timing assertion
    assert abs(row.created_at - now) <= slack
    assert abs(lease.lease_expires_at - (now + 600)) <= slack
    assert row.lease_expires_at == lease.lease_expires_at == row.claimed_at + 600 + 1


def test_rows_changed_counts_the_rows_an_update_returning_changed(engine, queue):
    if not queue.dialect.update_returning:
        pytest.skip(f"{queue.dialect.title} has no UPDATE ... RETURNING")
    queue.enqueue_many([{"type": "a"} for _ in range(5)])
    jobs = sqlalchemy.table("sqlq_jobs", sqlalchemy.column("id"), sqlalchemy.column("priority"))
    with engine.begin() as connection:
        result = connection.execute(
            sqlalchemy.update(jobs).where(jobs.c.id <= 3).values(priority=1).returning(jobs.c.id)
        )
        rows = result.all()
        changed = queue.dialect.rows_changed(connection, result)

    assert (len(rows), changed) == (3, 3)


def test_a_claim_whose_rows_do_not_add_up_is_rolled_back_whole(engine, queue):
    queue.enqueue_many([{"type": "a"} for _ in range(3)])
    # Make the claim's own check see one row more than RETURNING gave back, as if a
    # claimed row had gone missing on the way: nothing may stay claimed.
    if not queue.dialect.update_returning:
        pytest.skip("locks the rows first: the emulation checks its own count (returning.py)")
    queue.sql.dialect = dataclasses.replace(queue.dialect, rows_changed=lambda c, r: 3)

    with pytest.raises(SqlqError, match=r"claim changed 3 row\(s\) but returned 2"):
        queue.claim("worker-a", limit=2)
    assert queue.counts_by_status()["QUEUED"] == 3
    assert count_events(engine, "CLAIMED") == 0
