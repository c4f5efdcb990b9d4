"""What a Worker refuses before it starts: a database its threads would not share."""

from __future__ import annotations

import pytest

import sqlq_orm
from sqlq_orm import HandlerRegistry, InvalidInput, Queue, Worker


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_a_worker_on_an_in_memory_sqlite_database_is_refused_with_the_way_out(url):
    engine = sqlq_orm.create_engine(url)
    sqlq_orm.migrate.upgrade(engine)
    queue = Queue(engine)

    with pytest.raises(InvalidInput, match="in-memory SQLite database.*use a file"):
        Worker(queue, HandlerRegistry(), worker_id="worker-a")

    engine.dispose()


def test_a_queue_alone_on_an_in_memory_database_still_works():
    # One thread, one connection: enqueue and claim see the same database.
    engine = sqlq_orm.create_engine("sqlite://")
    sqlq_orm.migrate.upgrade(engine)
    queue = Queue(engine)

    job = queue.enqueue("t")

    assert [lease.job_id for lease in queue.claim("worker-a")] == [job.id]
    engine.dispose()
