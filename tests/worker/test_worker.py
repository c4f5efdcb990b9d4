"""The worker in-process (a thread running ``Worker.run``) on a real database.

Handler outcomes, unknown types, corrupt payloads, hung handlers past their max
runtime, leases lost to cancellation, self-fencing when heartbeats cannot get through,
and graceful release. Process-level crashes are in ``test_worker_processes.py``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy
from sqlalchemy import select, update

import sqlq_orm
from sqlq_orm import HandlerRegistry, JobContext, JobError, Worker
from sqlq_orm.schema.models import Job, WorkerRecord
from tests.support.worker_helpers import job_row, running, status_is, wait_until

FAST = {"poll_interval": 0.05, "sweep_interval": None, "install_signal_handlers": False}


def events_of(queue: sqlq_orm.Queue, job_id: int) -> list[str]:
    """The job's timeline (a worker's attempt rows stand for CLAIMED, STARTED, SUCCEEDED)."""
    return [e.event for e in sqlq_orm.job_timeline(queue, job_id).events]


POOLS = pytest.mark.parametrize("pool", ["thread", "process"])
"""For the outcomes that must not depend on where the handler ran (the process pool's
crashes, kills and recycling are in ``test_process_pool.py``)."""


def burst(queue: sqlq_orm.Queue, registry: HandlerRegistry, **options) -> sqlq_orm.WorkerStats:
    """Run a worker until nothing is ready and nothing runs."""
    return Worker(queue, registry, burst=True, **{**FAST, **options}).run()


# ----------------------------------------------------------------- handler outcomes


@POOLS
def test_returning_handler_succeeds_and_a_returned_string_becomes_result_ref(queue, pool):
    registry = HandlerRegistry()
    registry.register("thumbnail", lambda ctx: f"s3://thumbs/{ctx.payload['image']}.png")
    job = queue.enqueue("thumbnail", {"image": "cat"})

    stats = burst(queue, registry, pool=pool)

    row = job_row(queue, job.id)
    assert (row.status, row.result_ref) == ("SUCCEEDED", "s3://thumbs/cat.png")
    assert stats.succeeded == 1
    assert events_of(queue, job.id) == ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]


def test_handler_gets_its_job_in_the_context(queue):
    seen: list[JobContext] = []
    registry = HandlerRegistry({"inspect": seen.append})
    job = queue.enqueue("inspect", {"k": [1, 2]}, queue="mail", payload_ref="s3://in/1")

    burst(queue, registry, queues=["mail"])

    (ctx,) = seen
    assert (ctx.job_id, ctx.attempt, ctx.type, ctx.queue) == (job.id, 1, "inspect", "mail")
    assert (ctx.payload, ctx.payload_ref, ctx.retries_left) == ({"k": [1, 2]}, "s3://in/1", 3)
    assert not ctx.should_stop


def test_handler_reads_the_app_columns_of_its_job_from_the_context(engine, clock):
    from tests.conformance.test_service_enqueue import HostAttempt, HostBase, HostEvent, HostJob

    HostBase.metadata.create_all(engine)
    models = sqlq_orm.Models(job=HostJob, attempt=HostAttempt, event=HostEvent, worker=WorkerRecord)
    host_queue = sqlq_orm.Queue(engine, clock=clock, models=models)
    seen: list[JobContext] = []
    host_queue.enqueue("bill", tenant="acme")
    host_queue.enqueue("bill")

    burst(host_queue, HandlerRegistry({"bill": seen.append}))

    assert sorted((ctx.columns["tenant"] or "") for ctx in seen) == ["", "acme"]
    assert all(set(ctx.columns) == {"tenant"} for ctx in seen)


def test_the_library_models_give_a_handler_no_app_columns(queue):
    seen: list[JobContext] = []
    queue.enqueue("inspect")

    burst(queue, HandlerRegistry({"inspect": seen.append}))

    assert [dict(ctx.columns) for ctx in seen] == [{}]


@POOLS
def test_non_retryable_job_error_fails_the_job_with_its_code_and_detail(queue, pool):
    registry = HandlerRegistry()

    @registry.handler("charge")
    def charge(ctx: JobContext) -> None:
        raise JobError("payment: card-declined", "card ending 4242 declined", retryable=False)

    job = queue.enqueue("charge")

    burst(queue, registry, pool=pool)

    row = job_row(queue, job.id)
    assert (row.status, row.error_code, row.error_detail) == (
        "FAILED", "PAYMENT:CARD_DECLINED", "card ending 4242 declined",
    )  # fmt: skip
    assert row.attempts[0].status == "FAILED"


@POOLS
def test_retryable_job_error_schedules_a_retry(queue, pool):
    def flaky(ctx: JobContext) -> None:
        raise JobError("TIMEOUT:UPSTREAM_API", "billing API did not answer in 5s")

    job = queue.enqueue("flaky")

    burst(queue, HandlerRegistry({"flaky": flaky}), pool=pool)

    row = job_row(queue, job.id)
    assert (row.status, row.retry_count, row.error_code) == ("QUEUED", 1, "TIMEOUT:UPSTREAM_API")
    assert events_of(queue, job.id)[-1] == "RETRY_SCHEDULED"


def test_plain_exception_is_unhandled_exception_with_a_one_line_detail_and_a_logged_traceback(
    queue, caplog
):
    def broken(ctx: JobContext) -> None:
        raise ValueError("row 17 has no 'email'\nsecond line of the message")

    job = queue.enqueue("broken")

    with caplog.at_level(logging.ERROR, logger="sqlq_orm.worker"):
        burst(queue, HandlerRegistry({"broken": broken}))

    row = job_row(queue, job.id)
    assert (row.status, row.error_code) == ("QUEUED", "INTERNAL:UNHANDLED_EXCEPTION")
    assert row.error_detail == "ValueError: row 17 has no 'email'"
    (record,) = [r for r in caplog.records if r.exc_info]
    assert "Traceback" in caplog.text and "def broken" not in row.error_detail
    assert record.exc_info[0] is ValueError


@POOLS
def test_timeout_error_escaping_a_handler_is_classified_as_timeout(queue, pool):
    def slow_upstream(ctx: JobContext) -> None:
        raise TimeoutError("read timed out")

    job = queue.enqueue("slow_upstream")

    burst(queue, HandlerRegistry({"slow_upstream": slow_upstream}), pool=pool)

    assert job_row(queue, job.id).error_code == "TIMEOUT:UNHANDLED"


@POOLS
def test_job_error_with_an_invalid_code_fails_the_job_instead_of_the_worker(queue, pool):
    def sloppy(ctx: JobContext) -> None:
        raise JobError("not a code", "oops")

    job = queue.enqueue("sloppy")

    burst(queue, HandlerRegistry({"sloppy": sloppy}), pool=pool)

    row = job_row(queue, job.id)
    assert (row.status, row.error_code) == ("FAILED", "INTERNAL:INVALID_ERROR_CODE")
    assert "'not a code'" in row.error_detail


@POOLS
def test_unknown_job_type_fails_that_job_and_the_worker_goes_on(queue, pool):
    unknown = queue.enqueue("no_such_type")
    known = queue.enqueue("echo")

    stats = burst(queue, HandlerRegistry({"echo": lambda ctx: None}), pool=pool)

    row = job_row(queue, unknown.id)
    assert (row.status, row.error_code) == ("FAILED", "INVALID_INPUT:UNKNOWN_JOB_TYPE")
    assert "'no_such_type'" in row.error_detail and "known: echo" in row.error_detail
    assert job_row(queue, known.id).status == "SUCCEEDED"
    assert (stats.succeeded, stats.failed) == (1, 1)


def test_corrupt_payload_fails_that_job_and_the_worker_goes_on(queue, engine):
    if engine.dialect.name != "sqlite":
        pytest.skip("the JSON column refuses text that is not JSON (test_hostile_input)")
    corrupt = queue.enqueue("echo", {"n": 1})
    healthy = queue.enqueue("echo", {"n": 2})
    with engine.begin() as connection:
        connection.execute(update(Job).where(Job.id == corrupt.id).values(payload='{"n": 1'))
    called: list[int] = []

    burst(queue, HandlerRegistry({"echo": lambda ctx: called.append(ctx.payload["n"])}))

    row = job_row(queue, corrupt.id)
    assert (row.status, row.error_code) == ("FAILED", "INVALID_INPUT:CORRUPT_PAYLOAD")
    assert job_row(queue, healthy.id).status == "SUCCEEDED"
    assert called == [2]


def test_a_burst_worker_leaves_once_its_last_job_is_recorded_not_a_poll_interval_later(queue):
    queue.enqueue("echo")
    worker = Worker(
        queue,
        HandlerRegistry({"echo": lambda ctx: None}),
        burst=True,
        concurrency=4,  # more free slots than jobs: the claim comes back short
        **{**FAST, "poll_interval": 3600.0},
    )
    done = threading.Event()
    thread = threading.Thread(target=lambda: (worker.run(), done.set()), daemon=True)
    thread.start()

    # Its one claim came back short of its free slots while the job still ran: it used
    # to sleep out the whole poll interval (here an hour) before looking again.
    left = done.wait(timeout=60)
    if not left:
        worker.request_stop(immediate=True)
    thread.join(timeout=10)
    assert left, "the burst worker waited out its poll interval after its last job"
    assert worker.stats.succeeded == 1


# ---------------------------------------------------------- losing and giving up jobs


def test_hung_handler_past_max_runtime_is_abandoned_and_timed_out_while_the_worker_serves_others(
    queue, clock
):
    contexts: list[JobContext] = []
    unhang = threading.Event()

    def hang(ctx: JobContext) -> None:
        contexts.append(ctx)
        unhang.wait(60)  # ignores its context on purpose: a truly stuck call

    registry = HandlerRegistry({"hang": hang, "echo": lambda ctx: None})
    hung = queue.enqueue("hang", max_runtime_seconds=60, max_retries=0)
    worker = Worker(
        queue, registry, concurrency=1, lease_seconds=120, heartbeat_interval=0.05, **FAST
    )
    try:
        with running(worker):
            wait_until(status_is(queue, hung.id, "RUNNING"), "the hung job to start")
            clock.advance(61)
            wait_until(lambda: contexts and contexts[0].runtime_exceeded, "max runtime noticed")
            other = queue.enqueue("echo")
            wait_until(
                status_is(queue, other.id, "SUCCEEDED"), "the only slot to serve another job"
            )

            swept = queue.sweep()
    finally:
        unhang.set()

    row = job_row(queue, hung.id)
    assert (swept.timed_out, row.status, row.error_code) == (1, "FAILED", "TIMEOUT:MAX_RUNTIME")
    assert contexts[0].should_stop and "max runtime" in contexts[0].stop_reason
    assert events_of(queue, hung.id)[-2:] == ["TIMED_OUT", "FAILED"]


def test_a_handler_spinning_in_python_past_its_max_runtime_is_interrupted_and_its_thread_returns(
    queue, clock
):
    spinners: list[threading.Thread] = []
    cleaned_up = threading.Event()

    def spin(ctx: JobContext) -> None:
        spinners.append(threading.current_thread())
        try:
            n = 0
            while True:  # never looks at its context, and swallows every Exception
                try:  # noqa: SIM105 - a careless handler, on purpose
                    n += 1
                except Exception:  # noqa: BLE001, S110
                    pass
        finally:
            cleaned_up.set()

    registry = HandlerRegistry({"spin": spin, "echo": lambda ctx: None})
    spinning = queue.enqueue("spin", max_runtime_seconds=60, max_retries=0)
    worker = Worker(
        queue, registry, concurrency=1, lease_seconds=120, heartbeat_interval=0.05, **FAST
    )
    with running(worker):
        wait_until(lambda: spinners, "the spinning job to start")
        threads_while_spinning = threading.active_count()
        clock.advance(61)  # the heartbeat is refused: past its max runtime

        wait_until(lambda: not spinners[0].is_alive(), "the spinning thread to return")
        assert threading.active_count() < threads_while_spinning
        assert worker._runs.over_budget() == []
        other = queue.enqueue("echo")
        wait_until(status_is(queue, other.id, "SUCCEEDED"), "the slot to serve another job")
        swept = queue.sweep()

    row = job_row(queue, spinning.id)
    assert cleaned_up.is_set()
    assert (swept.timed_out, row.status, row.error_code) == (1, "FAILED", "TIMEOUT:MAX_RUNTIME")
    assert worker.stats.discarded == 1
    assert events_of(queue, spinning.id)[-2:] == ["TIMED_OUT", "FAILED"]


def test_handlers_read_the_time_left_before_their_max_runtime_sync_and_async(queue):
    seen: dict[str, float | None] = {}

    def plain(ctx: JobContext) -> None:
        seen[ctx.payload["name"]] = ctx.time_left

    async def coroutine(ctx: JobContext) -> None:
        seen[ctx.payload["name"]] = ctx.time_left

    queue.enqueue("plain", {"name": "sync, 60s"}, max_runtime_seconds=60)
    queue.enqueue("coroutine", {"name": "async, 60s"}, max_runtime_seconds=60)
    queue.enqueue("plain", {"name": "sync, none"})
    queue.enqueue("coroutine", {"name": "async, none"})

    burst(queue, HandlerRegistry({"plain": plain, "coroutine": coroutine}), concurrency=2)

    assert seen["sync, none"] is None and seen["async, none"] is None
    assert 0 < seen["sync, 60s"] <= 60  # type: ignore[operator]
    assert 0 < seen["async, 60s"] <= 60  # type: ignore[operator]


def test_cancelling_a_running_job_tells_its_handler_to_stop_and_discards_its_outcome(queue):
    stopped = threading.Event()

    def patient(ctx: JobContext) -> None:
        while not ctx.sleep(0.05):
            pass
        stopped.set()

    job = queue.enqueue("patient")
    worker = Worker(queue, HandlerRegistry({"patient": patient}), heartbeat_interval=0.05, **FAST)
    with running(worker):
        wait_until(status_is(queue, job.id, "RUNNING"), "the job to start")
        queue.cancel(job.id, reason="customer closed the account")
        wait_until(stopped.is_set, "the handler to see should_stop")
        wait_until(lambda: worker.stats.discarded == 1, "the outcome to be discarded")

    assert job_row(queue, job.id).status == "CANCELLED"
    assert worker.stats.succeeded == 0
    assert "SUCCEEDED" not in events_of(queue, job.id)


@contextmanager
def write_lock_on(db_url: str, engine: sqlalchemy.Engine, job_id: int) -> Iterator[None]:
    """Block every write to the job from another connection (SQLite: the whole file)."""
    if engine.dialect.name == "sqlite":
        blocker = sqlite3.connect(engine.url.database, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
    else:
        with engine.connect() as connection, connection.begin():
            connection.execute(select(Job.id).where(Job.id == job_id).with_for_update())
            yield


def impatient_engine(db_url: str) -> sqlalchemy.Engine:
    """An engine whose writes give up on a held lock after about 50 ms (InnoDB: 1 s)."""
    if db_url.startswith("sqlite"):
        return sqlq_orm.create_engine(db_url, busy_timeout_ms=50)
    if db_url.startswith("mysql"):
        # InnoDB counts the wait in whole seconds: 1 is its shortest.
        return sqlq_orm.create_engine(
            db_url, connect_args={"init_command": "SET SESSION innodb_lock_wait_timeout = 1"}
        )
    return sqlq_orm.create_engine(db_url, connect_args={"options": "-c lock_timeout=50"})


def test_heartbeats_failing_for_longer_than_the_lease_self_fence_and_no_success_is_reported(
    queue, engine, db_url
):
    fenced = threading.Event()

    def careful(ctx: JobContext) -> None:
        wait_until(lambda: ctx.should_stop, "the worker to self-fence", timeout=30)
        fenced.set()  # returns normally: without the fence this would be a success

    job = queue.enqueue("careful")
    worker_engine = impatient_engine(db_url)
    worker = Worker(
        sqlq_orm.Queue(worker_engine),
        HandlerRegistry({"careful": careful}),
        lease_seconds=2,
        heartbeat_interval=0.2,
        **FAST,
    )
    try:
        with running(worker):
            wait_until(status_is(queue, job.id, "RUNNING"), "the job to start")
            with write_lock_on(db_url, engine, job.id):
                wait_until(fenced.is_set, "the handler to be told to stop")
            wait_until(lambda: worker.stats.discarded == 1, "the outcome to be discarded")
    finally:
        worker_engine.dispose()

    row = job_row(queue, job.id)
    assert row.status == "RUNNING" and row.attempts[0].status == "RUNNING"
    assert worker.stats.succeeded == 0
    assert "SUCCEEDED" not in events_of(queue, job.id)


def test_stop_with_a_grace_period_lets_quick_jobs_finish_and_releases_the_rest(queue):
    unhang = threading.Event()

    def quick(ctx: JobContext) -> None:
        wait_until(lambda: ctx.shutdown_requested, "shutdown", timeout=30)

    registry = HandlerRegistry({"quick": quick, "slow": lambda ctx: unhang.wait(60)})
    quick_job, slow_job = queue.enqueue("quick"), queue.enqueue("slow")
    worker = Worker(queue, registry, concurrency=2, grace_period=0.5, **FAST)
    try:
        with running(worker):
            wait_until(lambda: len(worker.running_jobs) == 2, "both jobs to run")
            worker.request_stop()
            wait_until(lambda: worker.stats.released == 1, "the slow job to be released")
    finally:
        unhang.set()

    assert job_row(queue, quick_job.id).status == "SUCCEEDED"
    slow = job_row(queue, slow_job.id)
    assert (slow.status, slow.retry_count, slow.attempts[0].status) == ("QUEUED", 0, "RELEASED")
    assert events_of(queue, slow_job.id)[-1] == "RELEASED"


def test_worker_registers_itself_while_running_and_deregisters_on_stop(queue, engine):
    worker = Worker(queue, HandlerRegistry(), worker_id="w-registry", **FAST)

    def registered() -> list[str]:
        with sqlalchemy.orm.Session(engine) as session:
            return list(session.scalars(select(WorkerRecord.id)))

    with running(worker):
        wait_until(lambda: registered() == ["w-registry"], "the worker row")

    assert registered() == []


def test_worker_sweeper_recovers_an_expired_lease_without_anyone_asking(queue, clock):
    job = queue.enqueue("echo")
    queue.claim("crashed-worker", lease_seconds=30, start=True)
    clock.advance(31)
    worker = Worker(
        queue, HandlerRegistry({"echo": lambda ctx: None}), **{**FAST, "sweep_interval": 0.05}
    )

    with running(worker):
        wait_until(lambda: "RECOVERED" in events_of(queue, job.id), "the sweeper")

    row = job_row(queue, job.id)
    assert row.attempts[0].error_code == "LEASE:EXPIRED"
    assert any(e.actor.startswith("sweeper@") for e in row.events if e.event == "RECOVERED")


# ----------------------------------------------------------------------- pure parts


def test_registering_two_handlers_for_one_type_is_refused():
    registry = HandlerRegistry({"send_email": lambda ctx: None})

    with pytest.raises(sqlq_orm.InvalidInput, match="'send_email' already has a handler"):
        registry.register("send_email", lambda ctx: None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:registry", "cannot import handlers module 'no_such_module_xyz'"),
        ("tests.support.handlers_for_tests:nothing", "has no attribute 'nothing'"),
        ("tests.support.handlers_for_tests:HOLD_LIMIT", "is a float, not a HandlerRegistry"),
    ],
)
def test_loading_handlers_names_what_is_wrong(spec, message):
    from sqlq_orm.worker.handlers import load_registry

    with pytest.raises(sqlq_orm.InvalidInput, match=message):
        load_registry(spec)


def test_worker_options_are_checked_before_anything_runs(queue):
    with pytest.raises(sqlq_orm.InvalidInput, match="heartbeat_interval must be"):
        Worker(queue, HandlerRegistry(), lease_seconds=3, heartbeat_interval=3)
    with pytest.raises(sqlq_orm.InvalidInput, match="prefetch must be >= 0, got -1"):
        Worker(queue, HandlerRegistry(), prefetch=-1)


# ------------------------------------------------------------ recurring schedules


def test_worker_runs_the_registrys_schedules_and_their_jobs(queue, clock):
    ran: list[int] = []
    registry = HandlerRegistry()
    registry.register("report", lambda ctx: ran.append(ctx.job_id))
    registry.periodic("* * * * *", "report", payload={"kind": "minutely"})

    with running(Worker(queue, registry, **FAST)):
        wait_until(queue.list_schedules, "the worker to register its schedule")
        clock.advance(60)
        wait_until(lambda: ran, "the scheduled job to run")

    (job_id,) = ran
    assert events_of(queue, job_id) == ["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED"]
    assert queue.list_schedules()[0].last_slot_at == job_row(queue, job_id).run_at


def test_worker_with_run_schedules_off_leaves_schedules_to_others(queue, clock):
    registry = HandlerRegistry({"report": lambda ctx: None})
    registry.periodic("* * * * *", "report")
    job = queue.enqueue("report")

    with running(Worker(queue, registry, run_schedules=False, **FAST)):
        wait_until(status_is(queue, job.id, "SUCCEEDED"), "the enqueued job to run")

    assert queue.list_schedules() == []
