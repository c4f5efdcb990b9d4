"""Faults on a real database: errors injected mid-transaction, connections killed by the
server, heartbeats that cannot get through, and a fork after the engine was used.

Errors are injected with SQLAlchemy ``before_cursor_execute`` listeners that raise just
before a chosen statement: the statements before it really ran inside the same
transaction, so these tests prove the rollback, not a mock's idea of it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy
from sqlalchemy import event, text

import sqlq_orm
from sqlq_orm import JobStatus, Worker
from sqlq_orm.db.backends import backend_for
from sqlq_orm.ops.invariants import check
from tests.support.aio_bridge import async_url
from tests.support.faultkit import GIVE_UP_SECONDS, UPDATE_JOBS_SET, PauseAfter
from tests.support.pgbouncer import engine_options

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


EVENT_INSERT = r"^INSERT INTO sqlq_job_events"
ATTEMPT_INSERT = r"^INSERT INTO sqlq_job_attempts"


class InjectedFaultError(Exception):
    """Raised by the fault injector; never raised by sqlq_orm itself."""


@contextmanager
def fault_before(engine, pattern: str, *, skip: int = 0) -> Iterator[list[str]]:
    """Raise :class:`InjectedFaultError` instead of running the (skip+1)-th statement that
    matches ``pattern``; yields the list of statements that ran before it."""
    regex = re.compile(pattern, re.IGNORECASE)
    seen: list[str] = []
    state = {"left": skip, "fired": False}

    def listener(conn, cursor, statement, parameters, context, executemany):
        flat = " ".join(statement.split())
        if not state["fired"] and regex.search(flat):
            if state["left"] == 0:
                state["fired"] = True
                raise InjectedFaultError(f"injected before: {flat[:60]}")
            state["left"] -= 1
        seen.append(flat)

    event.listen(engine, "before_cursor_execute", listener)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert state["fired"], f"no statement matching {pattern!r} ran"


def job_state(queue, job_id):
    job = queue.get_job(job_id)
    return {
        "status": job.status,
        "claimed_by": job.claimed_by,
        "has_token": job.lease_token is not None,
        "attempt_count": job.attempt_count,
        "retry_count": job.retry_count,
        "attempts": [(a.attempt, a.status) for a in job.attempts],
        "events": [e.event for e in sqlq_orm.job_timeline(queue, job_id).events],
    }


# ------------------------------------------------------- errors inside a transaction


@contextmanager
def fault_after(engine, pattern: str) -> Iterator[None]:
    """Raise :class:`InjectedFaultError` right after the first statement matching
    ``pattern`` ran (its transaction still open)."""
    regex = re.compile(pattern, re.IGNORECASE)
    state = {"fired": False}

    def listener(conn, cursor, statement, parameters, context, executemany):
        if not state["fired"] and regex.search(" ".join(statement.split())):
            state["fired"] = True
            raise InjectedFaultError(f"injected after: {statement[:60]}")

    event.listen(engine, "after_cursor_execute", listener)
    try:
        yield
    finally:
        event.remove(engine, "after_cursor_execute", listener)
    assert state["fired"], f"no statement matching {pattern!r} ran"


@pytest.mark.parametrize("start", [False, True], ids=["claim", "claim_and_start"])
def test_error_after_the_claim_update_leaves_the_job_queued_with_no_partial_rows(queue, start):
    # Right after the claim's UPDATE: on SQLite before its attempt rows and events are
    # written; on PostgreSQL, which writes them in the same statement, before commit.
    job = queue.enqueue("t")
    untouched = job_state(queue, job.id)

    with (
        pytest.raises(InjectedFaultError),
        fault_after(queue.engine, UPDATE_JOBS_SET + " status"),
    ):
        queue.claim("worker-a", start=start)

    assert job_state(queue, job.id) == untouched
    assert [lease.job_id for lease in queue.claim("worker-b")] == [job.id]
    assert check(queue) == []


def test_error_while_closing_the_attempt_keeps_the_lease_and_success_can_be_retried(queue):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    before = job_state(queue, lease.job_id)

    with (
        pytest.raises(InjectedFaultError),
        fault_before(queue.engine, ATTEMPT_INSERT),
    ):
        queue.succeed(lease)

    assert job_state(queue, lease.job_id) == before
    queue.succeed(lease)
    assert queue.get_job(lease.job_id).status == JobStatus.SUCCEEDED.value
    assert check(queue) == []


def test_error_midway_through_a_sweep_batch_rolls_the_whole_batch_back(queue, clock):
    for _ in range(4):
        queue.enqueue("t")
    leases = queue.claim("worker-a", limit=4, start=True)
    clock.advance(3600)
    before = [job_state(queue, lease.job_id) for lease in leases]

    # The third job's guarded update fails: two jobs were already moved in this batch
    # (the sweeper writes the batch's attempts and events together after the updates).
    # Where the batch's updates are one statement (PostgreSQL), the write after it
    # fails instead, with all four jobs moved.
    one_update = queue.sql.end_runs_from_arrays is not None
    pattern, skip = (ATTEMPT_INSERT, 0) if one_update else (r"^UPDATE sqlq_jobs", 2)
    with (
        pytest.raises(InjectedFaultError),
        fault_before(queue.engine, pattern, skip=skip),
    ):
        queue.sweep(batch_size=10)

    assert [job_state(queue, lease.job_id) for lease in leases] == before
    assert queue.sweep().expired == 4
    assert check(queue) == []


def test_error_writing_the_enqueued_event_leaves_no_job(queue):
    with (
        pytest.raises(InjectedFaultError),
        fault_before(queue.engine, EVENT_INSERT),
    ):
        queue.enqueue("t", {"k": 1})

    assert sum(queue.counts_by_status().values()) == 0


# ----------------------------------------------------------------------------- fork


def _backend_id(connection) -> object:
    # Which server connection this is: the backend pid on PostgreSQL; on SQLite the
    # sqlite3 connection object's id in this process.
    if connection.dialect.name == "postgresql":
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    return id(connection.connection.dbapi_connection)


def test_forked_child_gets_its_own_connections_and_the_parent_keeps_working(engine, clock):
    queue = sqlq_orm.Queue(engine, clock=clock)
    job = queue.enqueue("t")
    with engine.connect() as connection:
        parent_backend = _backend_id(connection)
    read_fd, write_fd = os.pipe()

    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        status = 1
        try:
            with engine.connect() as connection:
                child_backend = _backend_id(connection)
            (lease,) = queue.claim("child", start=True)
            queue.succeed(lease)
            status = 0 if child_backend != parent_backend or engine.dialect.name == "sqlite" else 2
        finally:
            os.write(write_fd, str(status).encode())
            os._exit(status)
    os.close(write_fd)
    _, exit_status = os.waitpid(pid, 0)
    child_said = os.read(read_fd, 10).decode()
    os.close(read_fd)

    assert (os.waitstatus_to_exitcode(exit_status), child_said) == (0, "0")
    with engine.connect() as connection:
        assert _backend_id(connection) == parent_backend  # the same pooled connection
    assert queue.get_job(job.id).status == JobStatus.SUCCEEDED.value
    assert queue.enqueue("t").created
    assert check(queue) == []


def test_a_child_forked_beside_a_running_event_loop_leaves_its_async_connections_alone(
    engine, db_url, loop_thread
):
    """The fork guard drops the child's copies of pooled connections. Collected there,
    an asyncio driver's connection closed its transport through the inherited event
    loop, whose epoll instance the parent shares: the parent's loop stopped hearing the
    socket, and its next query on it waited forever (aiomysql)."""
    url = async_url(db_url, "async")
    async_engine = sqlq_orm.create_async_engine(url, **engine_options(db_url))
    queue = sqlq_orm.AsyncQueue(async_engine)
    loop_thread.run(queue.enqueue("t"))  # a pooled connection, its socket watched
    pid = os.fork()
    if pid == 0:  # the child: let the collector run, never return into pytest
        gc.collect()
        os._exit(0)
    _, exit_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(exit_status) == 0

    counts = loop_thread.run(asyncio.wait_for(queue.counts_by_status(), 10))
    assert counts[JobStatus.QUEUED.value] == 1
    loop_thread.run(async_engine.dispose())


# ------------------------------------------------------------------- worker helpers


def wait_for(condition, what: str):
    deadline = time.monotonic() + GIVE_UP_SECONDS
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


@contextmanager
def worker_running(worker: Worker) -> Iterator[Worker]:
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop(immediate=True)
        thread.join(GIVE_UP_SECONDS)
    assert not thread.is_alive()


def gated_handler():
    """A handler that announces it started and then waits for the test's go-ahead."""
    started, go = threading.Event(), threading.Event()

    def handler(ctx):
        started.set()
        if not go.wait(GIVE_UP_SECONDS):
            raise RuntimeError("the test never let the handler finish")

    return handler, started, go


# -------------------------------------------------- PostgreSQL kills the connection


@pytest.fixture
def pg_url(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("pg_terminate_backend is PostgreSQL's")
    return db_url


def terminate_backends(observer, application_name: str, state: str | None = None) -> int:
    with observer.connect() as connection:
        killed = connection.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = :name AND state LIKE :state"
            ),
            {"name": application_name, "state": state or "%"},
        ).scalar_one()
        connection.commit()
    return int(killed)


def test_connection_killed_mid_transaction_the_worker_reconnects_and_finishes_once(pg_url):
    name = "sqlq-victim-mid-txn"
    worker_engine = sqlq_orm.create_engine(pg_url, connect_args={"application_name": name})
    observer = sqlq_orm.create_engine(pg_url)
    sqlq_orm.Base.metadata.create_all(observer)
    queue = sqlq_orm.Queue(worker_engine)
    job = queue.enqueue("gated")
    handler, started, go = gated_handler()
    worker = Worker(
        queue, {"gated": handler}, lease_seconds=10, poll_interval=0.05,
        sweep_interval=None, install_signal_handlers=False,
    )  # fmt: skip

    with (
        worker_running(worker),
        PauseAfter(worker_engine, r"SET status=\S+, result_ref=") as paused,
    ):
        wait_for(started.is_set, "the handler to start")
        go.set()
        paused.wait()  # the success UPDATE ran; its transaction is open
        assert terminate_backends(observer, name, state="idle in transaction") == 1
        paused.release()
        wait_for(lambda: queue.get_job(job.id).status == "SUCCEEDED", "the job to succeed")

    assert worker.stats.succeeded == 1
    assert [(a.attempt, a.status) for a in queue.get_job(job.id).attempts] == [(1, "SUCCEEDED")]
    assert check(queue) == []
    worker_engine.dispose()
    observer.dispose()


def test_every_connection_killed_while_a_job_runs_the_worker_recovers(pg_url):
    name = "sqlq-victim-idle"
    worker_engine = sqlq_orm.create_engine(pg_url, connect_args={"application_name": name})
    observer = sqlq_orm.create_engine(pg_url)
    sqlq_orm.Base.metadata.create_all(observer)
    queue = sqlq_orm.Queue(worker_engine)
    first = queue.enqueue("gated")
    handler, started, go = gated_handler()
    worker = Worker(
        queue, {"gated": handler, "echo": lambda ctx: None}, lease_seconds=10,
        poll_interval=0.05, sweep_interval=None, install_signal_handlers=False,
    )  # fmt: skip

    looking = sqlq_orm.Queue(observer)  # the test's own reads, on connections not killed

    with worker_running(worker):
        wait_for(started.is_set, "the handler to start")
        assert terminate_backends(observer, name) >= 1  # the pool's idle connections
        go.set()
        wait_for(lambda: looking.get_job(first.id).status == "SUCCEEDED", "the first job")
        later = looking.enqueue("echo")
        wait_for(lambda: looking.get_job(later.id).status == "SUCCEEDED", "a job claimed after")

    assert check(looking) == []
    worker_engine.dispose()
    observer.dispose()


# ------------------------------------------------------------- worker self-fencing


@contextmanager
def write_lock_on_job(engine, job_id: int) -> Iterator[None]:
    """Hold a lock that keeps heartbeats for ``job_id`` from landing."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            # BEGIN IMMEDIATE, as the queue's writes begin: the single write lock.
            connection.execution_options(**backend_for(engine).write_options)
            connection.begin()
        else:
            connection.begin()
            connection.execute(
                text("SELECT id FROM sqlq_jobs WHERE id = :id FOR UPDATE"), {"id": job_id}
            )
        try:
            yield
        finally:
            connection.rollback()


def impatient_engine(db_url: str) -> sqlalchemy.Engine:
    """An engine whose writes give up after 0.2 s of waiting for a lock."""
    if db_url.startswith("sqlite"):
        return sqlq_orm.create_engine(db_url, busy_timeout_ms=200)
    if db_url.startswith("mysql"):
        # InnoDB counts the wait in whole seconds: 1 is its shortest.
        return sqlq_orm.create_engine(
            db_url, connect_args={"init_command": "SET SESSION innodb_lock_wait_timeout = 1"}
        )
    return sqlq_orm.create_engine(db_url, connect_args={"options": "-c lock_timeout=200"})


def test_worker_whose_heartbeats_fail_for_a_whole_lease_never_reports_success(engine, db_url):
    lease_seconds = 2
    worker_engine = impatient_engine(db_url)
    queue = sqlq_orm.Queue(worker_engine)
    job = queue.enqueue("gated")
    handler, started, go = gated_handler()
    worker = Worker(
        queue, {"gated": handler}, lease_seconds=lease_seconds, heartbeat_interval=0.25,
        poll_interval=0.05, sweep_interval=None, install_signal_handlers=False,
    )  # fmt: skip

    with worker_running(worker):
        wait_for(started.is_set, "the handler to start")
        with write_lock_on_job(engine, job.id):
            # No heartbeat can land while the lock is held; wait out a whole lease.
            blocked_since = time.monotonic()
            wait_for(lambda: time.monotonic() - blocked_since > lease_seconds + 0.5, "a lease")
        go.set()  # the handler returns believing it succeeded
        wait_for(lambda: worker.stats.discarded == 1, "the outcome to be discarded")

    assert worker.stats.succeeded == 0
    recorded = queue.get_job(job.id)
    assert [a.status for a in recorded.attempts] == ["RUNNING"]  # left for the sweeper
    assert "SUCCEEDED" not in [e.event for e in sqlq_orm.job_timeline(queue, job.id).events]
    assert check(queue) == []
    worker_engine.dispose()


# ------------------------------------------- MariaDB/MySQL: transactions rolled back


def test_succeed_rolled_back_by_a_lock_wait_timeout_runs_again_and_finishes_once(
    engine, db_url, queue
):
    if not queue.dialect.is_retryable(Exception(1205, "Lock wait timeout exceeded")):
        pytest.skip(f"{queue.dialect.title} has no errors it runs a transaction again after")
    worker_queue = sqlq_orm.Queue(impatient_engine(db_url), clock=queue.clock)
    worker_queue.enqueue("t")
    (lease,) = worker_queue.claim("worker-a", start=True)
    timeouts = []
    blocker = engine.connect()
    blocker.begin()
    blocker.execute(
        text("SELECT id FROM sqlq_jobs WHERE id = :id FOR UPDATE"), {"id": lease.job_id}
    )

    @event.listens_for(worker_queue.engine, "handle_error")
    def let_go_after_the_first_timeout(context):
        # The succeed timed out waiting for the row; the lock goes, and its rerun gets it.
        timeouts.append(context.original_exception.args[0])
        blocker.rollback()

    worker_queue.succeed(lease)

    blocker.close()
    assert timeouts == [1205]
    job = queue.get_job(lease.job_id)
    assert job.status == JobStatus.SUCCEEDED.value
    events = sqlq_orm.job_timeline(queue, lease.job_id).events
    assert [e.event for e in events].count("SUCCEEDED") == 1
    assert [(a.attempt, a.status) for a in job.attempts] == [(1, "SUCCEEDED")]
    assert check(queue) == []
    worker_queue.engine.dispose()
