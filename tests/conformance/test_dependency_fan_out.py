"""A parent with very many children ends like one with a few, on every database.

Children are named to the database in chunks, never one bind parameter per child:
PostgreSQL refuses a statement with more than 65,535, so a parent with 70,000
children could never finish before (its succeed raised, the children stayed WAITING).
The children are written in bulk here (the test is about the parent's end).
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, insert, select, update

from sqlq_orm import JobStatus
from sqlq_orm.ops.invariants import check
from sqlq_orm.queue.dependencies import CHUNK

MANY = CHUNK * 2 + 7  # three chunks on every database
BEYOND_POSTGRES_BINDS = 70_000


def parent_with_children(queue, clock, count: int, policy: str = "cancel") -> int:
    """A RUNNING parent and ``count`` WAITING children, written in bulk."""
    parent = queue.enqueue("parent", max_retries=0).id
    t = queue.tables
    now = clock.now()
    rows = [
        {"type": "child", "queue": "default", "status": JobStatus.WAITING.value,
         "pending_parents": 1, "created_at": now, "run_at": now}
        for _ in range(count)
    ]  # fmt: skip
    with queue.engine.begin() as connection:
        connection.execute(insert(t.jobs), rows)
        ids = (
            connection.execute(
                select(t.jobs.c.id).where(t.jobs.c.type == "child").order_by(t.jobs.c.id)
            )
            .scalars()
            .all()
        )
        connection.execute(
            insert(t.dependencies),
            [{"job_id": i, "depends_on_id": parent, "on_parent_failure": policy} for i in ids],
        )
        connection.execute(
            insert(t.events),
            [{"job_id": i, "ts": now, "event": "ENQUEUED", "actor": "system"} for i in ids],
        )
        connection.execute(update(t.jobs).where(t.jobs.c.id == parent).values(has_dependents=1))
    return parent


def children_by_status(queue) -> dict[str, int]:
    j = queue.tables.jobs.c
    with queue.read() as connection:
        rows = connection.execute(
            select(j.status, func.count()).where(j.type == "child").group_by(j.status)
        )
        return dict(rows.all())


def test_a_parent_with_many_children_succeeds_and_queues_them_all(queue, clock):
    parent_with_children(queue, clock, MANY)
    (lease,) = queue.claim("worker-a", start=True)

    queue.succeed(lease)

    assert children_by_status(queue) == {JobStatus.QUEUED.value: MANY}
    assert check(queue) == []


def test_a_parent_with_many_children_fails_and_cancels_them_all(queue, clock):
    parent_with_children(queue, clock, MANY)
    (lease,) = queue.claim("worker-a", start=True)

    queue.fail(lease, "UPSTREAM:DOWN", retryable=False)

    assert children_by_status(queue) == {JobStatus.CANCELLED.value: MANY}
    assert check(queue) == []


def test_cancelling_a_parent_with_many_run_children_releases_them_all(queue, clock):
    parent = parent_with_children(queue, clock, MANY, policy="run")

    queue.cancel(parent)

    assert children_by_status(queue) == {JobStatus.QUEUED.value: MANY}


def test_a_parent_with_70000_children_succeeds_on_postgresql(engine, queue, clock):
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's limit of 65,535 bind parameters per statement")
    parent_with_children(queue, clock, BEYOND_POSTGRES_BINDS)
    (lease,) = queue.claim("worker-a", start=True)

    queue.succeed(lease)

    assert children_by_status(queue) == {JobStatus.QUEUED.value: BEYOND_POSTGRES_BINDS}
