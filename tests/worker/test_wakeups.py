"""Wake-ups: an idle worker starts a new job without waiting out its poll interval.

Every worker here polls only every 30 s, and every wait for a job gives up after 10 s:
a job that runs in time was started by a wake-up (an enqueue in this process, another
process's commit heard by the database, or a scheduled job falling due), not by a poll.
Watches built with ``listen=False`` hear only this process, so what they miss is
asserted at once: an in-process wake-up is sent synchronously when the enqueue commits.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm import HandlerRegistry, Worker
from tests.support.backends import engine_for
from tests.support.worker_helpers import (
    running,
    status_is,
    wait_until,
)

SLOW_POLL = {
    "poll_interval": 30.0,
    "lease_seconds": 90,  # heartbeats every 30 s: on SQLite no commit of the worker's
    "sweep_interval": None,  # own wakes it within a test's 10 s
    "install_signal_handlers": False,
}
SLOW_PROCESS = ("--poll", "30", "--lease", "90", "--no-sweep")
WAKE_LIMIT = 10.0
"""Well below the 30 s poll: reaching a job within it takes a wake-up."""
SETTLE = 0.5
"""Time for a worker that just finished a job to ask once more and find nothing."""


def echo_registry() -> HandlerRegistry:
    return HandlerRegistry({"echo": lambda ctx: None})


def idle_after_first_job(queue: sqlq_orm.Queue) -> None:
    """Wait until the worker ran a first job and went back to waiting for more."""
    first = queue.enqueue("echo")
    wait_until(status_is(queue, first.id, "SUCCEEDED"), "the first job", timeout=WAKE_LIMIT)
    time.sleep(SETTLE)


# ------------------------------------------------------------------ in-process


def test_idle_worker_starts_a_job_enqueued_in_the_same_process(live_queue):
    worker = Worker(live_queue, echo_registry(), **SLOW_POLL)
    with running(worker):
        idle_after_first_job(live_queue)
        job = live_queue.enqueue("echo")
        wait_until(status_is(live_queue, job.id, "SUCCEEDED"), "the job", timeout=WAKE_LIMIT)


def test_idle_worker_starts_a_job_committed_in_the_callers_session(live_queue, engine):
    worker = Worker(live_queue, echo_registry(), **SLOW_POLL)
    with running(worker):
        idle_after_first_job(live_queue)
        with Session(engine) as session:
            live_queue.enqueue("echo", session=session)
            session.rollback()
            job = live_queue.enqueue("echo", session=session)
            session.commit()
        wait_until(status_is(live_queue, job.id, "SUCCEEDED"), "the job", timeout=WAKE_LIMIT)
    assert live_queue.counts_by_status()["SUCCEEDED"] == 2
    assert worker.stats.claimed == 2


def test_a_scheduled_job_is_started_when_it_falls_due(live_queue):
    worker = Worker(live_queue, echo_registry(), **SLOW_POLL)
    with running(worker):
        idle_after_first_job(live_queue)
        job = live_queue.enqueue("echo", delay=2)
        wait_until(status_is(live_queue, job.id, "SUCCEEDED"), "the job", timeout=WAKE_LIMIT)
    row = live_queue.get_job(job.id)
    assert row.started_at >= row.run_at


def test_enqueue_wakes_the_watchers_of_its_queue_only(queue):
    default, mail = threading.Event(), threading.Event()
    watches = [
        queue.watch_for_jobs(["default"], default, listen=False),
        queue.watch_for_jobs(["mail", "sms"], mail, listen=False),
    ]
    try:
        queue.enqueue("echo", queue="mail")
        assert (default.is_set(), mail.is_set()) == (False, True)

        mail.clear()
        queue.enqueue_many([{"type": "echo"}, {"type": "echo", "queue": "sms"}])
        assert (default.is_set(), mail.is_set()) == (True, True)
    finally:
        for watch in watches:
            watch.close()


def test_a_session_enqueue_wakes_on_commit_and_a_rolled_back_one_wakes_nobody(queue, engine):
    woken = threading.Event()
    watch = queue.watch_for_jobs(["default"], woken, listen=False)
    try:
        with Session(engine) as session:
            queue.enqueue("echo", session=session)
            queue.enqueue_many([{"type": "echo"}], session=session)
            session.rollback()
            assert not woken.is_set()
            assert queue.counts_by_status()["QUEUED"] == 0

            queue.enqueue("echo", session=session)
            assert not woken.is_set()  # not before the caller commits
            session.commit()
            assert woken.is_set()

            woken.clear()
            queue.enqueue("echo", session=session)  # the same session, a new transaction
            session.commit()
            assert woken.is_set()
    finally:
        watch.close()
    assert queue.counts_by_status()["QUEUED"] == 2


def test_savepoints_in_the_callers_session_neither_wake_nor_forget(queue, engine):
    woken = threading.Event()
    watch = queue.watch_for_jobs(["default"], woken, listen=False)
    try:
        with Session(engine) as session:
            queue.enqueue("echo", session=session)
            with session.begin_nested():
                queue.enqueue("echo", session=session)
            assert not woken.is_set()  # a released savepoint commits nothing yet
            savepoint = session.begin_nested()
            queue.enqueue("echo", session=session)
            savepoint.rollback()
            session.commit()
            assert woken.is_set()  # the outer transaction's jobs were not forgotten
    finally:
        watch.close()
    assert queue.counts_by_status()["QUEUED"] == 2


def test_a_manual_retry_wakes_the_watchers_of_the_jobs_queue(queue):
    job = queue.enqueue("echo", queue="mail")
    queue.cancel(job.id)
    woken = threading.Event()
    watch = queue.watch_for_jobs(["mail"], woken, listen=False)
    try:
        queue.retry(job.id)
        assert woken.is_set()
    finally:
        watch.close()


def test_an_enqueue_through_another_engine_wakes_this_queues_watchers(queue, db_url):
    other_engine = engine_for(db_url)
    woken = threading.Event()
    watch = queue.watch_for_jobs(["default"], woken, listen=False)
    try:
        sqlq_orm.Queue(other_engine).enqueue("echo")
        assert woken.is_set()
    finally:
        watch.close()
        other_engine.dispose()


def test_seconds_until_next_job_reads_the_queues_clock(queue, clock):
    assert queue.seconds_until_next_job(["default"]) is None
    queue.enqueue("echo", delay=5)
    queue.enqueue("echo", queue="mail", delay=2)
    assert queue.seconds_until_next_job(["default"]) == 5
    assert queue.seconds_until_next_job(["default", "mail"]) == 2
    clock.advance(7)
    assert queue.seconds_until_next_job(["default"]) == -2


# -------------------------------------------------------------- other processes


def commit_from_elsewhere(queue: sqlq_orm.Queue, db_url: str) -> None:
    """What another process's enqueue looks like to a listener: a commit, and on
    PostgreSQL the enqueue's notification, from a connection outside this queue."""
    engine = sqlalchemy.create_engine(db_url)
    try:
        with engine.begin() as connection:
            if queue.sql.notify_jobs is not None:
                connection.execute(
                    queue.sql.notify_jobs,
                    {"p_channel": queue.sql.wake_channel, "p_queue": "default"},
                )
            else:
                connection.exec_driver_sql("CREATE TABLE IF NOT EXISTS touched (x INTEGER)")
                connection.exec_driver_sql("INSERT INTO touched VALUES (1)")
    finally:
        engine.dispose()


def skip_without_a_listener(queue: sqlq_orm.Queue) -> None:
    if queue.dialect.open_wake_listener is None:
        pytest.skip(f"{queue.dialect.title} has no cross-process wake-ups: its workers poll")


def test_a_listener_hears_commits_from_other_connections(queue, db_url):
    skip_without_a_listener(queue)
    woken = threading.Event()
    watch = queue.watch_for_jobs(["default"], woken)
    try:
        # A listener wakes its worker once connected: jobs may have come meanwhile.
        assert woken.wait(WAKE_LIMIT), "the listener never connected"
        woken.clear()
        commit_from_elsewhere(queue, db_url)
        assert woken.wait(WAKE_LIMIT), "the listener did not hear the commit"
    finally:
        watch.close()
    assert not watch.listening


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_killed_listener_connection_reconnects_and_hears_again(queue, db_url, caplog):
    woken = threading.Event()
    watch = queue.watch_for_jobs(["default"], woken)
    try:
        assert woken.wait(WAKE_LIMIT), "the listener never connected"
        woken.clear()
        with queue.engine.begin() as connection:
            killed = connection.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %%' AND datname = current_database() "
                "AND pid <> pg_backend_pid()"
            ).all()
        assert killed == [(True,)]
        assert woken.wait(WAKE_LIMIT), "the listener did not reconnect"
        woken.clear()
        commit_from_elsewhere(queue, db_url)
        assert woken.wait(WAKE_LIMIT), "the reconnected listener did not hear the commit"
    finally:
        watch.close()
    assert "wake-up listener failed" in caplog.text


@pytest.mark.slow
def test_an_idle_worker_process_starts_a_job_enqueued_by_another_process(live_queue, processes):
    skip_without_a_listener(live_queue)
    worker = processes.worker("worker-a", *SLOW_PROCESS)
    first = live_queue.enqueue("echo")
    wait_until(status_is(live_queue, first.id, "SUCCEEDED"), "the first job", timeout=30)
    time.sleep(SETTLE)

    job = live_queue.enqueue("echo")

    wait_until(status_is(live_queue, job.id, "SUCCEEDED"), "the job", timeout=WAKE_LIMIT)
    assert worker.poll() is None


@pytest.mark.slow
def test_an_idle_worker_process_starts_a_scheduled_job_when_it_falls_due(live_queue, processes):
    skip_without_a_listener(live_queue)
    processes.worker("worker-a", *SLOW_PROCESS)
    first = live_queue.enqueue("echo")
    wait_until(status_is(live_queue, first.id, "SUCCEEDED"), "the first job", timeout=30)
    time.sleep(SETTLE)

    job = live_queue.enqueue("echo", delay=2)

    wait_until(status_is(live_queue, job.id, "SUCCEEDED"), "the job", timeout=WAKE_LIMIT)
