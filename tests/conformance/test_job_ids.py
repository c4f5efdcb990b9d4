"""A job id names one job forever: the database never hands the same id out twice.

An app row, a log line or a ticket that holds a job id must never come to point at
another job. PostgreSQL's sequences and InnoDB's ``AUTO_INCREMENT`` never go back;
SQLite does (``max(id) + 1``) unless the table is ``AUTOINCREMENT`` (revision
``sqlq_0005``). What a database cannot promise is stated where it applies: on SQLite an
enqueue whose transaction rolled back also rolled back ``sqlite_sequence``, so its id
(given to the caller inside that transaction, never committed) comes again.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm.ops.retention import RetentionPolicy, run_maintenance

DAY = 86_400


def run_all(queue) -> None:
    for lease in queue.claim("worker-1", limit=100):
        queue.succeed(queue.start(lease))


def test_ids_of_pruned_newest_jobs_never_come_again(queue, clock):
    handed_out = [queue.enqueue("a").id for _ in range(3)]
    run_all(queue)
    clock.advance(31 * DAY)

    assert queue.prune(RetentionPolicy(succeeded_days=30)).total_jobs == 3
    run_maintenance(queue, vacuum=True)  # SQLite rewrites the file; InnoDB the table
    later = queue.enqueue("b").id

    assert later > max(handed_out)


def test_ids_of_deleted_newest_jobs_never_come_again_through_the_orm(queue, engine):
    first, newest = queue.enqueue("a").id, queue.enqueue("a").id
    with Session(engine) as session:
        session.delete(session.get(sqlq_orm.Job, newest))
        session.commit()

    assert queue.enqueue("b").id > newest > first


def test_an_id_given_inside_a_transaction_that_rolled_back(queue, engine):
    queue.enqueue("a")
    with Session(engine) as session:
        rolled_back = queue.enqueue("b", session=session).id
        session.rollback()

    later = queue.enqueue("c").id

    if engine.dialect.name == "sqlite":
        # The rollback took sqlite_sequence back with the job: a never-committed id
        # comes again (documented: docs/howto/retention.md "Job ids",
        # docs/explanation/guarantees.md).
        assert later == rolled_back
    else:
        assert later > rolled_back
