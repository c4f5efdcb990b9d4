"""Pruning deletes exactly what the retention policy lets go, in batches, with no orphans."""

from __future__ import annotations

import os

import pytest
import sqlalchemy
from sqlalchemy import func, select

import sqlq_orm
from sqlq_orm.errors import InvalidInput, SqlqError
from sqlq_orm.ops.retention import RetentionPolicy, run_maintenance
from sqlq_orm.schema.models import Base
from tests.conformance.test_observability import DAY, NOW, build_known_queue
from tests.support.factories import JobEventFactory, JobFactory, WorkerFactory


@pytest.fixture
def known(session, queue, clock):
    clock.set(NOW)
    return build_known_queue(session)


def _job_ids(queue) -> set[int]:
    with queue.read() as connection:
        return set(connection.execute(select(queue.tables.jobs.c.id)).scalars())


def _orphans(queue) -> int:
    """Attempts and events whose job is gone (must always be 0)."""
    t = queue.tables
    with queue.read() as connection:
        return sum(
            connection.execute(
                select(func.count())
                .select_from(child)
                .where(child.c.job_id.not_in(select(t.jobs.c.id)))
            ).scalar_one()
            for child in (t.attempts, t.events)
        )


def _child_rows(queue, job_id: int) -> int:
    t = queue.tables
    with queue.read() as connection:
        return sum(
            connection.execute(
                select(func.count()).select_from(child).where(child.c.job_id == job_id)
            ).scalar_one()
            for child in (t.attempts, t.events)
        )


DUE = ("ok_31d", "ok_40d", "cancelled_31d", "failed_91d")


def test_prune_deletes_only_jobs_past_their_status_retention(queue, known):
    before = _job_ids(queue)
    assert _child_rows(queue, known["ok_31d"]) == 3  # attempt, ENQUEUED, SUCCEEDED

    result = queue.prune()

    assert result.jobs == {"SUCCEEDED": 2, "CANCELLED": 1, "FAILED": 1}
    assert result.complete and not result.dry_run
    assert _job_ids(queue) == before - {known[name] for name in DUE}
    assert _child_rows(queue, known["ok_31d"]) == 0
    assert _orphans(queue) == 0


def test_prune_interrupted_after_one_batch_resumes_where_it_stopped(queue, known):
    first = queue.prune(batch_size=1, max_batches=1)

    assert (first.jobs["SUCCEEDED"], first.total_jobs, first.complete) == (1, 1, False)
    assert known["ok_40d"] not in _job_ids(queue)  # oldest first
    assert _orphans(queue) == 0

    second = queue.prune(batch_size=1)

    assert second.jobs == {"SUCCEEDED": 1, "CANCELLED": 1, "FAILED": 1}
    assert second.complete and second.batches == 3
    assert not _job_ids(queue) & {known[name] for name in DUE}
    assert _orphans(queue) == 0


def test_prune_never_touches_queued_claimed_or_running_jobs(session, queue, clock):
    clock.set(NOW)
    ancient = NOW - 1000 * DAY
    # Unfinished jobs with a finished_at set (a manual retry leaves none, but a
    # host app could): the status alone must protect them.
    held = {
        JobFactory(status="QUEUED", finished_at=ancient).id,
        JobFactory(claimed=True, finished_at=ancient, lease_expires_at=ancient).id,
        JobFactory(running=True, finished_at=ancient, lease_expires_at=ancient).id,
    }
    session.commit()
    everything = RetentionPolicy(succeeded_days=0, failed_days=0, cancelled_days=0)

    result = queue.prune(everything)

    assert result.total_jobs == 0
    assert _job_ids(queue) == held


def test_dry_run_counts_what_is_due_and_writes_nothing(queue, known):
    before = _job_ids(queue)
    policy = RetentionPolicy(heartbeat_event_days=1, worker_days=0)

    result = queue.prune(policy, dry_run=True)

    assert result.dry_run
    assert result.jobs == {"SUCCEEDED": 2, "CANCELLED": 1, "FAILED": 1}
    assert result.workers == 2
    assert _job_ids(queue) == before
    assert len(queue.stats().workers) == 2


def test_keep_forever_skips_a_status(queue, known):
    result = queue.prune(RetentionPolicy(failed_days=-1))

    assert result.jobs == {"SUCCEEDED": 2, "CANCELLED": 1, "FAILED": 0}
    assert known["failed_91d"] in _job_ids(queue)


def test_prune_drops_old_heartbeat_events_only_when_asked(session, queue, clock):
    clock.set(NOW)
    job = JobFactory(running=True, lease_expires_at=NOW + 30)
    old = {JobEventFactory(job=job, event="HEARTBEAT", ts=NOW - 3 * DAY).id for _ in range(3)}
    kept = {
        JobEventFactory(job=job, event="HEARTBEAT", ts=NOW - 60).id,
        JobEventFactory(job=job, event="CLAIMED", ts=NOW - 3 * DAY).id,
    }
    session.commit()

    untouched = queue.prune()
    trimmed = queue.prune(RetentionPolicy(heartbeat_event_days=1), batch_size=2)

    assert untouched.heartbeat_events == 0
    assert (trimmed.heartbeat_events, trimmed.batches) == (3, 2)
    with queue.read() as connection:
        left = set(connection.execute(select(queue.tables.events.c.id)).scalars())
    assert left == kept
    assert not left & old


def test_prune_drops_workers_not_seen_for_the_policy_days(session, queue, clock):
    clock.set(NOW)
    WorkerFactory(id="w-old", last_seen_at=NOW - 8 * DAY)
    WorkerFactory(id="w-recent", last_seen_at=NOW - 6 * DAY)
    session.commit()

    result = queue.prune()

    assert result.workers == 1
    assert [w.id for w in queue.stats().workers] == ["w-recent"]


def test_prune_refuses_when_sqlite_does_not_enforce_foreign_keys(tmp_path, clock):
    # Something after sqlq's hooks turns enforcement off: deleting would orphan rows.
    engine = sqlq_orm.create_engine(f"sqlite:///{tmp_path / 'plain.db'}")

    @sqlalchemy.event.listens_for(engine, "connect")
    def foreign_keys_off(dbapi_connection, record):
        dbapi_connection.execute("PRAGMA foreign_keys = OFF")

    Base.metadata.create_all(engine)
    queue = sqlq_orm.Queue(engine, clock=clock)
    job = queue.enqueue("resize")
    (lease,) = queue.claim("w-1", start=True)
    queue.succeed(lease)
    clock.advance(40 * DAY)

    with pytest.raises(SqlqError, match="foreign keys are not enforced"):
        queue.prune()

    assert _job_ids(queue) == {job.id}
    engine.dispose()


def test_a_queue_on_a_plain_sqlite_engine_prunes_with_cascade(tmp_path, clock):
    # A host engine nobody configured: the queue installs sqlq's settings (and warns).
    raw_engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'plain.db'}")
    Base.metadata.create_all(raw_engine)
    with pytest.warns(sqlq_orm.SqlqWarning):
        queue = sqlq_orm.Queue(raw_engine, clock=clock)
    queue.enqueue("resize")
    (lease,) = queue.claim("w-1", start=True)
    queue.succeed(lease)
    clock.advance(40 * DAY)

    queue.prune()

    assert _job_ids(queue) == set()
    with raw_engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM sqlq_job_events").scalar() == 0
    raw_engine.dispose()


def test_retention_policy_rejects_bad_days_and_names_the_value():
    with pytest.raises(InvalidInput, match=r"failed_days must be .* or -1 to keep forever; got -2"):
        RetentionPolicy(failed_days=-2)
    with pytest.raises(InvalidInput, match="got '30'"):
        RetentionPolicy(succeeded_days="30")
    with pytest.raises(InvalidInput, match=r"unknown retention setting\(s\) \['queued_days'\]"):
        RetentionPolicy().with_days(queued_days=1)


def test_prune_rejects_a_bad_batch_size_and_writes_nothing(queue, known):
    before = _job_ids(queue)

    with pytest.raises(InvalidInput, match="batch_size must be >= 1, got 0"):
        queue.prune(batch_size=0)

    assert _job_ids(queue) == before


# ------------------------------------------------------------------ maintenance


def test_checkpoint_truncates_the_sqlite_wal(tmp_path, clock):
    path = tmp_path / "wal.db"
    engine = sqlq_orm.create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    queue = sqlq_orm.Queue(engine, clock=clock)
    queue.enqueue_many([{"type": "resize"}] * 50)
    assert os.path.getsize(f"{path}-wal") > 0

    (result,) = run_maintenance(queue, checkpoint=True)

    assert result.statement == "PRAGMA wal_checkpoint(TRUNCATE)"
    assert result.output[0][0] == 0  # not busy
    assert os.path.getsize(f"{path}-wal") == 0
    engine.dispose()


def test_vacuum_runs_outside_a_transaction_and_keeps_the_data(queue, known):
    (result,) = run_maintenance(queue, vacuum=True)

    # VACUUM on SQLite and PostgreSQL; OPTIMIZE TABLE (a rebuild) on MariaDB/MySQL.
    assert result.statement is not None
    assert result.statement.startswith(("VACUUM", "OPTIMIZE TABLE"))
    assert queue.stats().counts.total == 17


def test_maintenance_with_nothing_asked_does_nothing(queue):
    assert run_maintenance(queue) == []
