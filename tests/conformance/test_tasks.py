"""Tasks (issue 24, items 1-2) on every backend, enqueued through ``Queue`` (sync) and
``AsyncQueue`` (async), run by a real worker: typed arguments reach the function as
real parameters, the context comes to a parameter that asks for it, ``async def``
tasks run on the worker's loop, a call that does not bind writes nothing, and a job
whose stored arguments no longer bind fails once with its own error code."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import sqlq_orm
import sqlq_orm.tasks
from sqlq_orm import AsyncJobContext, InvalidInput, JobContext, TaskRegistry
from sqlq_orm.ops.render.timeline import render_timeline_text
from sqlq_orm.tasks import ARGUMENTS_DO_NOT_BIND, RESULT_DOES_NOT_MATCH
from tests.support.aio_bridge import FLAVOURS, LoopThread, async_url
from tests.support.worker_helpers import running


@dataclasses.dataclass(frozen=True)
class Address:
    street: str
    city: str


class Tasks:
    """A TaskRegistry bound to the flavour's queue, and calls made the flavour's way."""

    def __init__(self, engine: Any, flavour: str, db_url: str, loop: LoopThread) -> None:
        self.flavour = flavour
        self.loop = loop
        self.queue = sqlq_orm.Queue(engine)  # the worker's, and the test's reads
        self.async_engine = None
        if flavour == "sync":
            self.registry = TaskRegistry(self.queue)
        else:
            self.async_engine = sqlq_orm.create_async_engine(async_url(db_url, flavour))
            self.registry = TaskRegistry(sqlq_orm.AsyncQueue(self.async_engine))

    def enqueue(self, task: sqlq_orm.Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
        if self.flavour == "sync":
            return task.enqueue(*args, **kwargs)
        return self.loop.run(task.enqueue_async(*args, **kwargs))

    def enqueue_many(self, task: sqlq_orm.Task[Any, Any], calls: list[dict[str, Any]]) -> Any:
        if self.flavour == "sync":
            return task.enqueue_many(calls)
        return self.loop.run(task.enqueue_many_async(calls))

    def drain(self) -> sqlq_orm.WorkerStats:
        worker = sqlq_orm.Worker(
            self.queue, self.registry, queues=["default", "mail"], burst=True,
            install_signal_handlers=False, sweep_interval=None, poll_interval=0.05,
        )  # fmt: skip
        return worker.run()

    def result(self, task: sqlq_orm.Task[Any, Any], job_id: int) -> Any:
        if self.flavour == "sync":
            return task.result(job_id)
        return self.loop.run(task.result_async(job_id))

    def wait(self, task: sqlq_orm.Task[Any, Any], job_id: int, timeout: float) -> Any:
        if self.flavour == "sync":
            return task.wait(job_id, timeout)
        return self.loop.run(task.wait_async(job_id, timeout))

    def job_count(self) -> int:
        with self.queue.read() as connection:
            return int(
                connection.execute(
                    select(func.count()).select_from(self.queue.models.job.__table__)
                ).scalar_one()
            )


@pytest.fixture(params=FLAVOURS)
def tasks(request: pytest.FixtureRequest, engine: Any, db_url: str) -> Iterator[Tasks]:
    loop = LoopThread()
    made = Tasks(engine, request.param, db_url, loop)
    yield made
    if made.async_engine is not None:
        loop.run(made.async_engine.dispose())
    loop.close()


def test_a_task_runs_with_its_typed_arguments_and_the_context_it_asks_for(tasks):
    calls: list[tuple[int, int, Address, list[Address], str]] = []

    @tasks.registry.task()
    def deliver(ctx: JobContext, address: Address, stops: list[Address], note: str = "-") -> None:
        calls.append((ctx.job_id, ctx.attempt, address, stops, note))

    home, shop = Address("1 Main St", "Springfield"), Address("2 Side St", "Shelbyville")
    job = tasks.enqueue(deliver, home, stops=[shop])

    assert job.created
    tasks.drain()

    assert calls == [(job.id, 1, home, [shop], "-")]
    assert tasks.queue.get_job(job.id).status == "SUCCEEDED"


def test_an_async_task_is_awaited_on_the_workers_loop(tasks):
    seen: list[tuple[str, str, type]] = []

    @tasks.registry.task(queue="mail")
    async def fetch(ctx: AsyncJobContext, url: str, *, retries: int = 0) -> None:
        await asyncio.sleep(0)
        seen.append((url, threading.current_thread().name, type(ctx)))
        assert retries == 2

    job = tasks.enqueue(fetch, "https://example.com/feed", retries=2)
    tasks.drain()

    assert [(url, kind) for url, _, kind in seen] == [("https://example.com/feed", AsyncJobContext)]
    assert tasks.queue.get_job(job.id).queue == "mail"
    assert tasks.queue.get_job(job.id).status == "SUCCEEDED"


def _deep_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "args, kwargs, named",
    [
        ((), {}, "missing a required argument: 'address'"),
        ((Address("a", "b"),), {"urgent": True}, "unexpected keyword argument 'urgent'"),
        ((Address("a", "b"),), {"note": {1, 2}}, "argument 'note'"),
        # Issue 34 item 14: 5,000 levels raised RecursionError, not InvalidInput.
        ((Address("a", "b"),), {"note": _deep_list(5000)}, "nested more than 31 levels"),
        ((Address("a", "b"),), {"note": _deep_list(31)}, "payload is nested 32 levels"),
    ],
    ids=["missing", "unexpected", "not-json", "5000-deep", "32-deep"],
)
def test_a_call_that_does_not_bind_writes_nothing(tasks, args, kwargs, named):
    @tasks.registry.task()
    def deliver(address: Address, note: Any = None) -> None:
        pass

    with pytest.raises(InvalidInput, match=named):
        tasks.enqueue(deliver, *args, **kwargs)
    assert tasks.job_count() == 0


def test_options_override_the_decorators_defaults_per_call(tasks):
    @tasks.registry.task(queue="mail", priority=1, max_retries=7)
    def send(to: str) -> None:
        pass

    plain = tasks.enqueue(send, "a@example.com")
    urgent = tasks.enqueue(send.options(priority=9, queue="default", delay=3600), "b@example.com")

    plain_row, urgent_row = tasks.queue.get_job(plain.id), tasks.queue.get_job(urgent.id)
    assert (plain_row.queue, plain_row.priority, plain_row.max_retries) == ("mail", 1, 7)
    assert (urgent_row.queue, urgent_row.priority, urgent_row.max_retries) == ("default", 9, 7)
    assert urgent_row.run_at >= plain_row.run_at + 3599


def test_a_dedupe_key_from_the_arguments_names_one_job(tasks):
    @tasks.registry.task(dedupe_key=lambda user_id: f"welcome-{user_id}")
    def welcome(user_id: int) -> None:
        pass

    first = tasks.enqueue(welcome, 42)
    again = tasks.enqueue(welcome, user_id=42)
    other = tasks.enqueue(welcome, 43)

    assert (first.created, again.created, again.id) == (True, False, first.id)
    assert other.created and other.id != first.id


def test_rate_key_and_dedupe_period_come_from_the_decorator_and_the_arguments(tasks):
    @tasks.registry.task(rate_key=lambda tenant, user: f"tenant:{tenant}", dedupe_period=3600)
    def digest(tenant: int, user: int) -> None:
        pass

    one = tasks.enqueue(digest, 1, user=7)
    many = tasks.enqueue_many(digest.options(dedupe_key="digest:8"), [{"tenant": 2, "user": 8}])
    plain = tasks.enqueue(digest.options(rate_key="shared", dedupe_period=None), 3, 9)

    rows = [tasks.queue.get_job(job.id) for job in (one, *many, plain)]
    assert [(row.rate_key, row.dedupe_period) for row in rows] == [
        ("tenant:1", None),  # a period without a dedupe key is not stored
        ("tenant:2", 3600),
        ("shared", None),
    ]


def test_enqueue_many_binds_every_call_before_writing_any(tasks):
    ran: list[str] = []

    @tasks.registry.task()
    def send(to: str, subject: str = "Hello") -> None:
        ran.append(f"{to}/{subject}")

    with pytest.raises(InvalidInput, match="call #2: .*missing a required argument: 'to'"):
        tasks.enqueue_many(send, [{"to": "a"}, {"to": "b"}, {"subject": "no one"}])
    assert tasks.job_count() == 0

    jobs = tasks.enqueue_many(send, [{"to": "a"}, {"to": "b", "subject": "Hi"}])
    tasks.drain()

    assert len(jobs) == 2 and sorted(ran) == ["a/Hello", "b/Hi"]


def test_a_task_enqueued_in_the_callers_transaction_rolls_back_with_it(tasks):
    @tasks.registry.task()
    def send(to: str) -> None:
        pass

    if tasks.flavour == "sync":
        with Session(tasks.queue.engine) as session:
            send.options(session=session).enqueue("a")
            session.rollback()
        with Session(tasks.queue.engine) as session:
            kept = send.options(session=session).enqueue("b")
            session.commit()
    else:

        async def in_transactions() -> Any:
            async with AsyncSession(tasks.async_engine) as session:
                await send.options(session=session).enqueue_async("a")
                await session.rollback()
            async with AsyncSession(tasks.async_engine) as session:
                made = await send.options(session=session).enqueue_async("b")
                await session.commit()
            return made

        kept = tasks.loop.run(in_transactions())

    assert tasks.job_count() == 1
    assert tasks.queue.get_job(kept.id).status == "QUEUED"


def test_a_job_whose_stored_arguments_no_longer_bind_fails_once_with_its_own_code(tasks):
    @tasks.registry.task(max_retries=5)
    def send(to: str, subject: str) -> None:  # a deploy added subject, dropped cc
        raise AssertionError("must not be called")

    stale = tasks.queue.enqueue(send.name, {"to": "a", "cc": "b"}, max_retries=5)
    tasks.drain()

    job = tasks.queue.get_job(stale.id)
    assert job.status == "FAILED"
    assert job.error_code == ARGUMENTS_DO_NOT_BIND
    assert "no parameter 'cc'" in job.error_detail
    assert len(job.attempts) == 1


# -- results (item 4) ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Receipt:
    order: int
    lines: list[Address]


def test_a_tasks_return_value_is_its_result_rebuilt_by_the_annotation(tasks):
    @tasks.registry.task()
    def bill(order: int, to: Address) -> Receipt:
        return Receipt(order, [to])

    @tasks.registry.task()
    async def count(words: list[str]) -> int:
        return len(words)

    @tasks.registry.task()
    def nothing() -> None:
        pass

    home = Address("1 Main St", "Springfield")
    billed, counted, empty = (
        tasks.enqueue(bill, 7, home),
        tasks.enqueue(count, ["a", "b"]),
        tasks.enqueue(nothing),
    )
    with pytest.raises(sqlq_orm.ResultNotReady, match="QUEUED"):
        tasks.result(bill, billed.id)
    tasks.drain()

    assert tasks.result(bill, billed.id) == Receipt(7, [home])
    assert tasks.wait(count, counted.id, timeout=5) == 2
    assert tasks.result(nothing, empty.id) is None
    assert tasks.queue.result(billed.id) == {"order": 7, "lines": [dataclasses.asdict(home)]}
    shown = sqlq_orm.job_timeline(tasks.queue, billed.id)  # what sqlq show prints
    assert shown.job.result == {"order": 7, "lines": [dataclasses.asdict(home)]}
    assert shown.job.payload == {"order": 7, "to": dataclasses.asdict(home)}  # by name
    # JSONB keeps an object's keys in its own order (docs/howto/postgresql-production.md),
    # so no order here.
    lines = render_timeline_text(shown).splitlines()
    (result_line,) = [line for line in lines if line.startswith("  result ")]
    assert result_line.startswith("  result {") and '"order":7' in result_line


class Stop(TypedDict):
    street: str
    minutes: int


def test_a_result_that_does_not_match_its_annotation_fails_the_job(tasks):
    # Issue 34 item 6: it ended SUCCEEDED, and wait then raised a raw TypeError.
    @tasks.registry.task(max_retries=3)
    def bill(order: int) -> Receipt:
        return {"bogus": order}  # type: ignore[return-value]

    job = tasks.enqueue(bill, 7)
    tasks.drain()

    row = tasks.queue.get_job(job.id)
    assert (row.status, row.error_code, len(row.attempts)) == (
        "FAILED", RESULT_DOES_NOT_MATCH, 1,
    )  # fmt: skip
    assert "does not match its return annotation Receipt" in row.error_detail
    with pytest.raises(sqlq_orm.JobFailed) as failed:
        tasks.wait(bill, job.id, timeout=5)
    assert failed.value.error_code == RESULT_DOES_NOT_MATCH


def test_a_stored_result_that_does_not_match_the_annotation_raises_a_sqlq_error(tasks):
    # A result stored before results were checked (or before the annotation changed):
    # wait and result raise ResultDoesNotMatch, never a raw TypeError.
    @tasks.registry.task()
    def bill(order: int) -> Receipt:
        return Receipt(order, [])

    job = tasks.enqueue(bill, 7)
    (lease,) = tasks.queue.claim("w", start=True)
    tasks.queue.succeed(lease, result={"bogus": 1})

    with pytest.raises(sqlq_orm.ResultDoesNotMatch, match=f"job {job.id}'s stored result"):
        tasks.wait(bill, job.id, timeout=5)
    with pytest.raises(sqlq_orm.SqlqError, match="return annotation of task '.*bill'"):
        tasks.result(bill, job.id)


def test_arguments_that_do_not_match_their_annotations_are_refused_at_enqueue(tasks):
    # Issue 34 item 6: Order("not-an-int", 5) and TypedDicts of the wrong types were
    # accepted and stored.
    @tasks.registry.task()
    def deliver(address: Address, stops: list[Stop], attempts: int = 1) -> None:
        pass

    home = Address("1 Main St", "Springfield")
    bad_calls = [
        ((Address(1, "Springfield"),), {"stops": []}, "address.street must be str, got int 1"),  # type: ignore[arg-type]
        ((home,), {"stops": [{"street": "x", "minutes": "5"}]}, "stops[0]['minutes'] must be int"),
        ((home,), {"stops": [{"street": "x"}]}, "stops[0] (Stop) is missing the key 'minutes'"),
        ((home,), {"stops": [], "attempts": "2"}, "attempts must be int, got str '2'"),
        (({"street": "1 Main St", "city": "S"},), {"stops": []}, "address must be Address"),
    ]
    for args, kwargs, problem in bad_calls:
        with pytest.raises(InvalidInput, match=re.escape(problem)):
            tasks.enqueue(deliver, *args, **kwargs)
    with pytest.raises(InvalidInput, match=r"call #1: .*attempts must be int"):
        tasks.enqueue_many(
            deliver,
            [{"address": home, "stops": []}, {"address": home, "stops": [], "attempts": 1.5}],
        )

    assert tasks.job_count() == 0
    tasks.enqueue(deliver, home, [{"street": "x", "minutes": 5}], attempts=2)
    assert tasks.job_count() == 1


def test_the_result_of_a_failed_job_raises_with_its_error_code(tasks):
    @tasks.registry.task(max_retries=0)
    def explode() -> int:
        raise sqlq_orm.JobError("UPSTREAM:REFUSED", "the API said no")

    job = tasks.enqueue(explode)
    tasks.drain()

    with pytest.raises(sqlq_orm.JobFailed) as failed:
        tasks.wait(explode, job.id, timeout=5)
    assert (failed.value.status, failed.value.error_code) == ("FAILED", "UPSTREAM:REFUSED")
    assert failed.value.error_detail == "the API said no"


def test_a_wait_that_runs_out_of_time_says_where_the_job_is(tasks):
    @tasks.registry.task()
    def later() -> int:
        return 1

    job = tasks.enqueue(later.options(delay=3600))
    with pytest.raises(sqlq_orm.WaitTimeout, match=f"job {job.id} is still QUEUED"):
        tasks.wait(later, job.id, timeout=0.05)
    with pytest.raises(sqlq_orm.JobNotFound):
        tasks.wait(later, job.id + 1000, timeout=1)


@pytest.mark.parametrize("timeout", [float("nan"), -1, -0.5, float("-inf"), "5", None, True])
def test_a_wait_timeout_that_is_not_a_number_of_seconds_is_refused(tasks, timeout):
    # Issue 34 item 15: wait(timeout=nan) never returned (a NaN deadline is never
    # reached). Refused before anything is read, sync and async alike.
    @tasks.registry.task()
    def later() -> int:
        return 1

    job = tasks.enqueue(later.options(delay=3600))
    with pytest.raises(InvalidInput, match="timeout must be a number of seconds >= 0"):
        tasks.wait(later, job.id, timeout=timeout)


def test_wait_returns_once_a_worker_finishes_the_job(tasks):
    @tasks.registry.task()
    def square(n: int) -> int:
        return n * n

    worker = sqlq_orm.Worker(
        tasks.queue, tasks.registry, install_signal_handlers=False, poll_interval=0.05,
        sweep_interval=None,
    )  # fmt: skip
    with running(worker):
        job = tasks.enqueue(square, 12)
        assert tasks.wait(square, job.id, timeout=30) == 144


def _pauses_a_minute_apart(tasks: Tasks, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Make ``wait`` read its job a minute apart: only news can end it in time. The
    list says, for each pause, whether a wake-up ended it."""
    for pause_name in ("_FIRST_PAUSE", "_LONGEST_PAUSE", "_LONGEST_PAUSE_LISTENING"):
        monkeypatch.setattr(sqlq_orm.queue.results, pause_name, 60.0)
    waiting = tasks.queue if tasks.flavour == "sync" else tasks.registry.async_queue.sync_queue
    pause, woken = waiting._pause, []

    def pause_and_record(seconds: float, wake: threading.Event) -> None:
        pause(seconds, wake)
        woken.append(wake.is_set())

    monkeypatch.setattr(waiting, "_pause", pause_and_record)
    return woken


def test_wait_is_woken_by_the_finish_not_by_its_next_read(tasks, monkeypatch):
    woken = _pauses_a_minute_apart(tasks, monkeypatch)
    release = threading.Event()

    @tasks.registry.task()
    def square(n: int) -> int:
        release.wait(10)
        return n * n

    worker = sqlq_orm.Worker(
        tasks.queue, tasks.registry, install_signal_handlers=False, poll_interval=0.05,
        sweep_interval=None,
    )  # fmt: skip
    with running(worker):
        job = tasks.enqueue(square, 12)
        threading.Timer(0.2, release.set).start()  # finishes once the wait has read it
        assert tasks.wait(square, job.id, timeout=10) == 144
    # Every pause ended woken (SQLite's finish listener also wakes on other commits).
    assert woken and all(woken)


@pytest.fixture(params=FLAVOURS)
def listening_tasks(request: pytest.FixtureRequest, engine: Any, db_url: str) -> Iterator[Tasks]:
    """:func:`tasks`, async on PostgreSQL through psycopg (asyncpg engines' waits poll)."""
    if engine.dialect.name == "mysql":
        pytest.skip("MariaDB has no notifications: its waits poll")
    flavour = request.param
    if flavour == "async" and engine.dialect.name == "postgresql":
        flavour = "async-psycopg"
    loop = LoopThread()
    made = Tasks(engine, flavour, db_url, loop)
    yield made
    if made.async_engine is not None:
        loop.run(made.async_engine.dispose())
    loop.close()


def test_wait_hears_a_finish_committed_by_another_process(listening_tasks, monkeypatch):
    tasks = listening_tasks
    woken = _pauses_a_minute_apart(tasks, monkeypatch)
    elsewhere = sqlq_orm.Queue(tasks.queue.engine)
    # As a worker in another process: its finishes wake nobody in this one.
    monkeypatch.setattr(elsewhere, "_finished", lambda job_ids: None)
    release = threading.Event()

    @tasks.registry.task()
    def square(n: int) -> int:
        release.wait(10)
        return n * n

    worker = sqlq_orm.Worker(
        elsewhere, tasks.registry, install_signal_handlers=False, poll_interval=0.05,
        sweep_interval=None,
    )  # fmt: skip
    with running(worker):
        job = tasks.enqueue(square, 12)
        threading.Timer(0.2, release.set).start()  # finishes once the wait has read it
        assert tasks.wait(square, job.id, timeout=10) == 144
    assert woken and all(woken)


def test_the_finish_listener_leaves_once_nobody_waits(listening_tasks, monkeypatch):
    from sqlq_orm.queue import finish_listener

    tasks = listening_tasks
    monkeypatch.setattr(finish_listener, "LINGER_SECONDS", 0.0)
    monkeypatch.setattr(finish_listener, "_SLICE", 0.01)

    @tasks.registry.task()
    def later() -> int:
        return 1

    used: list[Any] = []

    def finish_listener_used(context: Any) -> Any:
        listener = finish_listener.finish_listener(context)
        used.append(listener)
        return listener

    monkeypatch.setattr(sqlq_orm.queue.results, "finish_listener", finish_listener_used)
    job = tasks.enqueue(later.options(delay=3600))
    with pytest.raises(sqlq_orm.WaitTimeout):
        tasks.wait(later, job.id, timeout=0.05)
    (listener,) = used
    assert listener is not None

    listener._thread.join(timeout=10)
    assert not listener._thread.is_alive() and not listener.listening
    assert tasks.queue.context.wakeups not in finish_listener._LISTENERS


def _finish_notifies(engine: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The payloads (job ids, comma-separated) of the ``sqlq_done`` NOTIFYs ``engine``
    sends from now on (PostgreSQL), with no earlier test's finish listener lingering."""
    from sqlalchemy import event

    from sqlq_orm.queue import finish_listener

    if engine.dialect.name != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    monkeypatch.setattr(finish_listener, "LINGER_SECONDS", 0.0)
    monkeypatch.setattr(finish_listener, "_SLICE", 0.01)
    for lingering in list(finish_listener._LISTENERS.values()):  # earlier tests'
        lingering._thread.join(timeout=10)
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if "pg_notify" in statement and str(params["p_channel"]).startswith("sqlq_done"):
            sent.append(params["p_queue"])

    event.listen(engine, "before_cursor_execute", record)
    return sent


def _listening(queue: sqlq_orm.Queue, job_id: int) -> tuple[threading.Event, Any]:
    """Start this process's finish listener with a wait on ``job_id``; the queue then
    looks for listeners afresh, as a process that has not seen one yet would."""
    from sqlq_orm.queue import finish_listener

    woken = threading.Event()
    unsubscribe = queue.context.wakeups.wait_for_finish(job_id, woken)
    listener = finish_listener.finish_listener(queue.context)
    assert listener is not None and listener.ready.wait(10) and listener.listening
    queue.context.wakeups.finish_listeners_seen = (float("-inf"), False)
    return woken, unsubscribe


def test_a_finish_is_announced_only_while_a_process_listens_for_finishes(engine, monkeypatch):
    sent = _finish_notifies(engine, monkeypatch)
    queue = sqlq_orm.Queue(engine)

    def finish_one() -> int:
        job = queue.enqueue("t", {})
        (lease,) = queue.claim("w1", start=True)
        queue.succeed(lease)
        return job.id

    queue.context.wakeups.finish_listeners_seen = (float("-inf"), False)  # nothing learnt yet
    first = finish_one()
    assert sent == []  # nobody listens: no NOTIFY

    woken, unsubscribe = _listening(queue, first + 1)  # the next job's
    assert finish_one() == first + 1
    assert woken.wait(10) and sent == [f"{first + 1}"]
    unsubscribe()


def test_jobs_ended_by_a_parent_or_discarded_are_announced_too(engine, monkeypatch):
    """A child cancelled because its parent failed, and a discarded job: their waits
    are woken by the ending transaction, not by their next safety read."""
    from sqlq_orm.queue import finish_listener

    sent = _finish_notifies(engine, monkeypatch)
    queue = sqlq_orm.Queue(engine)
    parent, child = (job.id for job in queue.enqueue_chain([{"type": "t"}, {"type": "t"}]))
    doomed = queue.enqueue("t", {}).id

    woken, unsubscribe = _listening(queue, child)
    (lease,) = queue.claim("w1", start=True)
    assert lease.job_id == parent
    queue.fail(lease, "APP:BROKEN", retryable=False)
    assert woken.wait(10) and sorted(sent) == sorted([str(parent), str(child)])
    unsubscribe()

    woken, unsubscribe = _listening(queue, doomed)
    queue.discard(doomed)
    assert woken.wait(10) and sent[2:] == [str(doomed)]
    unsubscribe()
    for listener in list(finish_listener._LISTENERS.values()):  # gone before the reset
        listener._thread.join(timeout=10)


@pytest.mark.parametrize(
    "returned, problem",
    [({"when": {1, 2}}, "result must be JSON-serialisable"), ("x" * 70_000, "limit is 65536")],
)
def test_a_result_the_queue_cannot_store_fails_the_job_without_retry(tasks, returned, problem):
    @tasks.registry.task(max_retries=3)
    def odd() -> Any:
        return returned

    job = tasks.enqueue(odd)
    tasks.drain()

    row = tasks.queue.get_job(job.id)
    assert (row.status, row.error_code, len(row.attempts)) == (
        "FAILED",
        "INTERNAL:INVALID_RESULT",
        1,
    )
    assert problem in row.error_detail


# -- snooze (item 3) -------------------------------------------------------------------


def test_a_snoozing_task_runs_again_without_spending_a_retry(tasks):
    runs: list[int] = []

    @tasks.registry.task(max_retries=0)
    def poll(ctx: JobContext, url: str) -> str:
        runs.append(ctx.attempt)
        if len(runs) < 3:
            raise sqlq_orm.Snooze(0, "not ready yet")
        return "ready"

    job = tasks.enqueue(poll, "https://example.com/export")
    stats = tasks.drain()

    row = tasks.queue.get_job(job.id)
    assert (row.status, row.retry_count, stats.snoozed) == ("SUCCEEDED", 0, 2)
    assert [a.status for a in sorted(row.attempts, key=lambda a: a.attempt)] == [
        "SNOOZED", "SNOOZED", "SUCCEEDED",
    ]  # fmt: skip
    snoozes = [e for e in row.events if e.event == "SNOOZED"]
    assert len(snoozes) == 2 and "not ready yet" in str(snoozes[0].detail)
    assert tasks.result(poll, job.id) == "ready"
    assert sqlq_orm.invariants.check(tasks.queue) == []


def test_a_snooze_puts_the_job_back_with_its_run_at_pushed_out(tasks):
    @tasks.registry.task()
    def later() -> None:
        raise sqlq_orm.Snooze(3600)

    job = tasks.enqueue(later)
    before = tasks.queue.get_job(job.id).run_at
    tasks.drain()

    row = tasks.queue.get_job(job.id)
    assert (row.status, row.retry_count, row.lease_token) == ("QUEUED", 0, None)
    assert row.run_at >= before + 3599


def test_a_job_that_snoozes_past_the_cap_fails_with_snooze_limit(tasks):
    tasks.queue.max_snoozes = 2

    @tasks.registry.task(max_retries=5)
    def forever() -> None:
        raise sqlq_orm.Snooze(0)

    job = tasks.enqueue(forever)
    tasks.drain()

    row = tasks.queue.get_job(job.id)
    assert sqlq_orm.invariants.check(tasks.queue) == []
    assert (row.status, row.error_code) == ("FAILED", "SNOOZE:LIMIT")
    assert [a.status for a in sorted(row.attempts, key=lambda a: a.attempt)] == [
        "SNOOZED", "SNOOZED", "FAILED",
    ]  # fmt: skip


def test_a_snooze_with_a_lost_lease_changes_nothing(tasks):
    job = tasks.queue.enqueue("t")
    (lease,) = tasks.queue.claim("worker-1", start=True)
    tasks.queue.cancel(job.id)

    with pytest.raises(sqlq_orm.LeaseLost):
        tasks.queue.snooze(lease, 10)

    row = tasks.queue.get_job(job.id)
    assert row.status == "CANCELLED"
    assert [e.event for e in row.events if e.event == "SNOOZED"] == []


# -- per-task retry classification (item 5) ----------------------------------------------


class PaymentDeclined(Exception):
    pass


def test_a_plain_exception_fails_the_run_with_a_code_named_after_its_class(tasks):
    @tasks.registry.task(max_retries=3)
    def charge(amount: int) -> None:
        raise PaymentDeclined(f"card refused {amount}")

    job = tasks.enqueue(charge, 12)
    tasks.drain()

    row = tasks.queue.get_job(job.id)
    assert (row.status, row.retry_count) == ("QUEUED", 1)  # retried, with backoff
    assert row.error_code == "EXCEPTION:PAYMENT_DECLINED"
    assert row.error_detail == "PaymentDeclined: card refused 12"


@pytest.mark.parametrize(
    "options",
    [{"no_retry_on": PaymentDeclined}, {"retry_on": (TimeoutError, ConnectionError)}],
    ids=["no_retry_on", "retry_on"],
)
def test_exceptions_a_task_does_not_retry_fail_it_at_once(tasks, options):
    @tasks.registry.task(max_retries=3, **options)
    def charge(amount: int) -> None:
        raise PaymentDeclined("no")

    job = tasks.enqueue(charge, 12)
    tasks.drain()

    row = tasks.queue.get_job(job.id)
    assert (row.status, row.retry_count, row.error_code) == (
        "FAILED", 0, "EXCEPTION:PAYMENT_DECLINED",
    )  # fmt: skip


# -- middleware (item 6) -----------------------------------------------------------------


class Recorder(sqlq_orm.tasks.TaskMiddleware):
    def __init__(self, label: str, seen: list[str]) -> None:
        self.label = label
        self.seen = seen

    def around_enqueue(self, task, spec, proceed):
        self.seen.append(f"{self.label} enqueue {spec.payload}")
        return proceed(dataclasses.replace(spec, priority=spec.priority + 1))

    def around_run(self, task, ctx, proceed):
        self.seen.append(f"{self.label} run {ctx.job_id} in")
        try:
            return proceed()
        except Exception as exc:
            self.seen.append(f"{self.label} saw {type(exc).__name__}")
            raise
        finally:
            self.seen.append(f"{self.label} run {ctx.job_id} out")

    async def around_run_async(self, task, ctx, proceed):
        self.seen.append(f"{self.label} async {task.name.rsplit('.', 1)[-1]}")
        return await proceed()


def test_middleware_wraps_every_enqueue_and_run_first_added_outermost(tasks):
    seen: list[str] = []
    tasks.registry.add_middleware(Recorder("outer", seen))
    tasks.registry.add_middleware(Recorder("inner", seen))

    @tasks.registry.task(max_retries=0)
    def fragile(n: int) -> int:
        seen.append(f"called {n}")
        if n < 0:
            raise ValueError("negative")
        return n

    @tasks.registry.task()
    async def gentle(n: int) -> None:
        seen.append(f"awaited {n}")

    good = tasks.enqueue(fragile, 1)
    assert seen == ["outer enqueue {'n': 1}", "inner enqueue {'n': 1}"]
    assert tasks.queue.get_job(good.id).priority == 2  # each middleware changed the spec
    tasks.drain()
    assert seen[2:] == [
        f"outer run {good.id} in", f"inner run {good.id} in", "called 1",
        f"inner run {good.id} out", f"outer run {good.id} out",
    ]  # fmt: skip

    del seen[:]
    bad = tasks.enqueue(fragile, -1)
    tasks.enqueue(gentle, 5)
    tasks.drain()
    assert "inner saw ValueError" in seen and "outer saw ValueError" in seen
    assert tasks.queue.get_job(bad.id).error_code == "EXCEPTION:VALUE_ERROR"
    first = seen.index("outer async gentle")
    assert seen[first : first + 3] == ["outer async gentle", "inner async gentle", "awaited 5"]
