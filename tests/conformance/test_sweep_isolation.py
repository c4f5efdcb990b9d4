"""One job the database refuses to end never stops the sweep of the others.

The refusal is real: a trigger on the jobs table raises for one job's status change
(as a driver error on a huge fan-out, or a broken row, would), on every database.
"""

from __future__ import annotations

import logging

import pytest

from sqlq_orm import JobStatus
from tests.support.faultkit import is_mysql

TRIGGERS = {
    "sqlite": [
        "CREATE TRIGGER poison BEFORE UPDATE OF status ON sqlq_jobs "
        "WHEN OLD.id = {id} AND NEW.status <> OLD.status "
        "BEGIN SELECT RAISE(ABORT, 'poisoned job'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF OLD.id = {id} AND NEW.status <> OLD.status THEN "
        "RAISE EXCEPTION 'poisoned job'; END IF; RETURN NEW; END $$",
        "CREATE TRIGGER poison BEFORE UPDATE ON sqlq_jobs FOR EACH ROW EXECUTE FUNCTION poison()",
    ],
    "mysql": [
        "CREATE TRIGGER poison BEFORE UPDATE ON sqlq_jobs FOR EACH ROW "
        "BEGIN IF OLD.id = {id} AND NEW.status <> OLD.status THEN "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poisoned job'; END IF; END"
    ],
}


def poison(engine, job_id: int) -> None:
    statements = TRIGGERS["mysql" if is_mysql(engine) else engine.dialect.name]
    with engine.begin() as connection:
        for statement in statements:
            connection.exec_driver_sql(statement.replace("{id}", str(job_id)))


def test_a_job_the_database_refuses_to_end_does_not_stop_the_sweep(engine, queue, clock, caplog):
    for _ in range(3):
        queue.enqueue("t", max_retries=0)
    poisoned, *others = [lease.job_id for lease in queue.claim("worker-a", limit=3, start=True)]
    poison(engine, poisoned)
    clock.advance(3600)

    with caplog.at_level(logging.WARNING, logger="sqlq_orm"):
        result = queue.sweep()

    assert (result.expired, result.failed) == (2, 2)
    assert [queue.get_job(i).status for i in others] == [JobStatus.FAILED.value] * 2
    assert queue.get_job(poisoned).status == JobStatus.RUNNING.value
    assert any(
        f"job {poisoned} could not be swept" in record.getMessage() for record in caplog.records
    )


def test_a_sweep_that_cannot_read_raises(engine, queue):
    engine.dispose()
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE sqlq_job_attempts")
        connection.exec_driver_sql("DROP TABLE sqlq_job_events")
        connection.exec_driver_sql("DROP TABLE sqlq_job_dependencies")
        connection.exec_driver_sql("DROP TABLE sqlq_jobs")
    with pytest.raises(Exception, match="sqlq_jobs"):
        queue.sweep()
