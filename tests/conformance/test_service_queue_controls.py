"""Pausing and resuming queues: stored in the database, obeyed by every claim."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm import InvalidInput, SqlqError
from sqlq_orm.ops.render.prometheus import render_stats_prometheus
from sqlq_orm.ops.render.stats import render_stats_text
from sqlq_orm.schema.models import Job, JobAttempt, JobEvent, WorkerRecord
from tests.support.queue_helpers import event_names, is_sqlite, job_row, second_engine


def test_a_paused_queue_is_skipped_by_the_claim_and_runs_again_once_resumed(queue):
    job = queue.enqueue("a")
    other = queue.enqueue("b", queue="mail")

    assert queue.pause_queue("default") is True

    assert queue.claim("w", limit=5) == []
    assert [lease.job_id for lease in queue.claim("w", queues=["default", "mail"], limit=5)] == [
        other.id
    ]
    assert queue.paused_queues() == ["default"]
    assert queue.resume_queue("default") is True
    assert queue.paused_queues() == []
    assert [lease.job_id for lease in queue.claim("w", limit=5)] == [job.id]


def test_a_merged_claim_skips_only_the_paused_queues(queue, engine):
    jobs = {name: queue.enqueue("t", queue=name).id for name in ("q1", "q2", "q3")}
    queue.pause_queue("q2")

    claimed = queue.claim("w", queues=["q1", "q2", "q3"], limit=10, start=True)

    assert sorted(lease.job_id for lease in claimed) == sorted([jobs["q1"], jobs["q3"]])
    assert job_row(engine, jobs["q2"]).status == "QUEUED"


def test_jobs_already_claimed_finish_normally_after_a_pause(queue, engine):
    job = queue.enqueue("a")
    (lease,) = queue.claim("w", start=True)

    queue.pause_queue("default")
    queue.heartbeat(lease)
    queue.succeed(lease)

    assert job_row(engine, job.id).status == "SUCCEEDED"
    assert event_names(engine, job.id) == ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]


def test_jobs_can_be_enqueued_into_a_paused_queue_and_wait(queue, engine):
    queue.pause_queue("default")
    job = queue.enqueue("a")

    assert queue.claim("w") == []
    assert job_row(engine, job.id).status == "QUEUED"
    assert queue.seconds_until_next_job(["default"]) is None  # an idle worker sleeps


def test_pausing_twice_keeps_the_first_pause_time_and_resuming_a_running_queue_does_nothing(
    queue, clock
):
    assert queue.resume_queue("default") is False
    assert queue.pause_queue("default", actor="alice") is True
    first = queue.queue_states()[0]
    clock.advance(60)

    assert queue.pause_queue("default", actor="bob") is False

    (state,) = queue.queue_states()
    assert (state.name, state.paused, state.paused_at, state.changed_by) == (
        "default", True, first.paused_at, "bob",
    )  # fmt: skip
    assert state.paused_at == clock.now() - 60
    assert queue.resume_queue("default", actor="carol") is True
    (state,) = queue.queue_states()
    assert (state.paused, state.paused_at, state.changed_by) == (False, None, "carol")


def test_the_pause_is_data_every_queue_object_on_the_database_obeys(queue, db_url, clock):
    queue.enqueue("a")
    queue.pause_queue("default")
    elsewhere = second_engine(db_url)
    try:
        other = sqlq_orm.Queue(elsewhere, clock=clock)  # another process, or a restart
        assert other.paused_queues() == ["default"]
        assert other.claim("w") == []
        other.resume_queue("default")
        assert len(queue.claim("w")) == 1
    finally:
        elsewhere.dispose()


def test_stats_and_metrics_show_the_paused_queues(queue):
    queue.enqueue("a")
    queue.pause_queue("default")
    queue.pause_queue("empty")

    stats = queue.stats()

    assert stats.paused_queues == ["default", "empty"]
    text = render_stats_text(stats)
    assert "default (paused)" in text
    assert "paused queues (no job of theirs starts): default, empty" in text
    metrics = render_stats_prometheus(stats)
    assert 'sqlq_queue_paused{queue="default"} 1' in metrics
    assert 'sqlq_queue_paused{queue="empty"} 1' in metrics


def test_a_resume_wakes_the_watchers_of_that_queue(queue, engine):
    if not isinstance(queue, sqlq_orm.Queue):
        pytest.skip("watch_for_jobs is synchronous only (SYNC_ONLY)")
    queue.pause_queue("default")
    woken = threading.Event()
    watch = queue.watch_for_jobs(["default"], woken, listen=False)
    try:
        queue.pause_queue("other")
        assert not woken.is_set()
        queue.resume_queue("default")
        assert woken.is_set()
    finally:
        watch.close()


@pytest.mark.parametrize("name", ["", "x" * 101, 7, None])
def test_a_bad_queue_name_is_refused_and_nothing_is_written(queue, name):
    with pytest.raises(InvalidInput, match="name"):
        queue.pause_queue(name)
    assert queue.queue_states() == []


def test_the_claim_ignores_a_lock_another_transaction_holds_on_the_pause(queue, engine, db_url):
    """A claim must never treat a control row it cannot lock as absent: on MariaDB a
    locking read with SKIP LOCKED would skip it, and claim from a paused queue."""
    if is_sqlite(engine):
        pytest.skip("SQLite has one writer at a time: there is no row lock to hold")
    queue.enqueue("a")
    queue.pause_queue("default")
    holder = second_engine(db_url)
    try:
        with holder.begin() as connection:
            connection.execute(
                sqlalchemy.select(sqlq_orm.QueueControl.__table__).with_for_update()
            ).all()
            claimed = queue.claim("w")
        assert claimed == []
    finally:
        holder.dispose()


def test_models_without_a_control_table_claim_as_before_and_refuse_a_pause(engine, clock):
    models = sqlq_orm.Models(job=Job, attempt=JobAttempt, event=JobEvent, worker=WorkerRecord)
    queue = sqlq_orm.Queue(engine, models=models, clock=clock)
    queue.enqueue("a")

    with pytest.raises(SqlqError, match="QueueControlMixin"):
        queue.pause_queue("default")
    assert queue.paused_queues() == []
    assert len(queue.claim("w")) == 1
