"""The testing kit (``sqlq_orm.testing``) on every database: the assertions, drain,
inline mode, and the rolled-back-transaction pattern (SQLite, PostgreSQL)."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm.ops.invariants import check
from sqlq_orm.schema.models import Job, JobAttempt
from sqlq_orm.tasks.middleware import TaskMiddleware
from sqlq_orm.testing import (
    assert_enqueued,
    assert_not_enqueued,
    drain,
    enqueued_jobs,
    queue_in_transaction,
)
from tests.conformance.test_service_enqueue import _host_queue
from tests.support.backends import BACKENDS


@dataclasses.dataclass
class Address:
    street: str
    city: str


class Calls(TaskMiddleware):
    def __init__(self) -> None:
        self.runs: list[str] = []

    def around_run(self, task, ctx, proceed):
        self.runs.append(f"{task.name}#{ctx.job_id}.{ctx.attempt}")
        return proceed()


def make_registry(queue, **options) -> tuple[sqlq_orm.TaskRegistry, dict[str, object]]:
    registry = sqlq_orm.TaskRegistry(queue, **options)
    seen: dict[str, object] = {"order": [], "flaky": 0, "snoozes": 0}

    @registry.task(name="mail.welcome", queue="mail")
    def welcome(email: str, address: Address, vip: bool = False) -> str:
        seen["order"].append(f"welcome:{email}")
        return f"sent to {email} in {address.city}"

    @registry.task(name="flaky", max_retries=2, backoff=60)
    def flaky() -> None:
        seen["flaky"] += 1
        raise RuntimeError("down")

    @registry.task(name="sleepy")
    def sleepy() -> str:
        seen["snoozes"] += 1
        if seen["snoozes"] < 3:
            raise sqlq_orm.Snooze(30)
        return "awake"

    @registry.task(name="step")
    def step(n: int) -> int:
        seen["order"].append(f"step:{n}")
        return n

    seen["tasks"] = {"welcome": welcome, "flaky": flaky, "sleepy": sleepy, "step": step}
    return registry, seen


HOME = Address("1 Main St", "Springfield")


def test_assert_enqueued_matches_arguments_by_name_through_the_codec(queue):
    registry, seen = make_registry(queue)
    welcome = seen["tasks"]["welcome"]
    first = welcome.enqueue("a@example.com", HOME)
    welcome.options(queue="bulk").enqueue(
        "b@example.com", Address("2 Side St", "Shelbyville"), vip=True
    )

    [call] = assert_enqueued(welcome, args={"email": "a@example.com"})
    assert call.id == first and call.queue == "mail" and call.args["address"] == HOME
    assert_enqueued(welcome, args={"address": HOME})  # a dataclass equals the value stored
    assert_enqueued(welcome, args={"address": {"street": "1 Main St", "city": "Springfield"}})
    assert_enqueued(welcome, args={"vip": False}, count=1)  # a default left out matches
    assert_enqueued(welcome, queue="bulk", args={"vip": True})
    assert_enqueued(welcome, count=2)
    assert_not_enqueued(welcome, args={"email": "c@example.com"})
    assert_not_enqueued(welcome, args={"email": "a@example.com"}, queue="bulk")
    assert [job.args["email"] for job in enqueued_jobs(welcome)] == [
        "a@example.com",
        "b@example.com",
    ]
    assert enqueued_jobs("mail.welcome", on=queue, queue="bulk")[0].args["vip"] is True


def test_a_failed_assertion_lists_what_was_enqueued(queue):
    registry, seen = make_registry(queue)
    welcome = seen["tasks"]["welcome"]
    with pytest.raises(AssertionError, match="No job of type 'mail.welcome' is enqueued"):
        assert_enqueued(welcome)
    welcome.enqueue("a@example.com", HOME)
    with pytest.raises(AssertionError) as failed:
        assert_enqueued(welcome, args={"email": "z@example.com"}, queue="mail")
    message = str(failed.value)
    assert "with args email='z@example.com' on queue 'mail', found 0" in message
    assert "mail.welcome(email='a@example.com', address=Address(street='1 Main St'" in message
    assert "on queue 'mail'" in message
    with pytest.raises(AssertionError, match="exactly 2 job"):
        assert_enqueued(welcome, count=2)
    with pytest.raises(AssertionError, match="expected no job of type 'mail.welcome'"):
        assert_not_enqueued(welcome, args={"address": HOME})
    with pytest.raises(sqlq_orm.InvalidInput, match="pass on=queue"):
        assert_enqueued("mail.welcome")
    with pytest.raises(AssertionError) as misspelt:
        assert_enqueued("mail.welcom", on=queue)
    assert "Enqueued of other types:\n  - mail.welcome(email='a@example.com'" in str(misspelt.value)


def test_with_a_session_the_assertions_see_its_uncommitted_jobs(queue, engine):
    registry, seen = make_registry(queue)
    welcome = seen["tasks"]["welcome"]
    with Session(engine) as session:
        welcome.options(session=session).enqueue("a@example.com", HOME)
        assert_enqueued(welcome, session=session, args={"email": "a@example.com"})
        assert [j.args["email"] for j in enqueued_jobs(welcome, session=session)] == [
            "a@example.com"
        ]
        with pytest.raises(AssertionError, match="expected no job"):
            assert_not_enqueued(welcome, session=session)
        assert_not_enqueued(welcome)  # not committed: nobody else sees it
        session.rollback()
    assert_not_enqueued(welcome)


def test_app_columns_are_matched_shown_and_given_to_the_run(engine):
    host_queue = _host_queue(engine)
    registry = sqlq_orm.TaskRegistry(host_queue)
    tenants: list[str] = []

    @registry.task(name="bill")
    def bill(ctx: sqlq_orm.JobContext, amount: int) -> None:
        tenants.append(ctx.columns["tenant"])

    bill.options(columns={"tenant": "acme"}).enqueue(5)
    bill.options(columns={"tenant": "globex"}).enqueue(7)

    [acme] = assert_enqueued(bill, columns={"tenant": "acme"})
    assert (acme.args, acme.columns) == ({"amount": 5}, {"tenant": "acme"})
    assert_enqueued(bill, columns={"tenant": "globex"}, args={"amount": 7})
    assert_not_enqueued(bill, columns={"tenant": "initech"})
    with pytest.raises(AssertionError, match="'tenant': 'globex'"):
        assert_enqueued(bill, columns={"tenant": "initech"})
    assert drain(host_queue, registry).succeeded == 2
    assert tenants == ["acme", "globex"]


def test_drain_runs_ready_jobs_through_the_worker_path_with_middleware_and_results(queue):
    registry, seen = make_registry(queue)
    calls = registry.add_middleware(Calls())
    job = seen["tasks"]["welcome"].enqueue("a@example.com", HOME)
    later = seen["tasks"]["step"].options(delay=600).enqueue(9)

    result = drain(queue, registry)

    assert (result.succeeded, result.failed, result.retried, result.snoozed) == (1, 0, 0, 0)
    assert calls.runs == [f"mail.welcome#{job}.1"]
    assert seen["tasks"]["welcome"].result(job) == "sent to a@example.com in Springfield"
    assert [j.id for j in result.jobs] == [job] and result.jobs[0].status == "SUCCEEDED"
    assert_enqueued(seen["tasks"]["step"], args={"n": 9})  # not due: left for later
    assert drain(queue, registry, with_scheduled=True).succeeded == 1
    assert queue.get_job(later).status == "SUCCEEDED"


def test_drain_with_scheduled_retries_a_job_to_its_end_without_sleeping(queue, clock):
    registry, seen = make_registry(queue)
    job = seen["tasks"]["flaky"].enqueue()
    started = clock.now()

    assert drain(queue, registry).retried == 1  # the retry waits a minute
    result = drain(queue, registry, with_scheduled=True)

    assert (result.retried, result.failed, result.succeeded) == (1, 1, 0)
    assert [run.outcome for run in result.runs] == ["retried", "failed"]
    assert result.runs[-1].error_code == "EXCEPTION:RUNTIME_ERROR"
    assert seen["flaky"] == 3 and clock.now() - started >= 120
    row = queue.get_job(job)
    assert (row.status, row.retry_count, row.error_code) == ("FAILED", 2, "EXCEPTION:RUNTIME_ERROR")
    assert check(queue) == []  # recorded as a worker records it: `sqlq check` agrees


def test_drain_retries_a_plain_handler_by_the_queues_retry_policy(engine, clock):
    queue = sqlq_orm.Queue(engine, clock=clock, retry_policy=sqlq_orm.RetryPolicy(base_seconds=10))
    runs: list[int] = []

    def plain(ctx: sqlq_orm.JobContext) -> None:
        runs.append(ctx.attempt)
        if ctx.attempt < 3:
            raise sqlq_orm.JobError("NETWORK:TIMEOUT", "try again")

    job = queue.enqueue("plain", {"n": 1}, max_retries=5)
    assert_enqueued("plain", on=queue, args={"n": 1})
    result = drain(queue, {"plain": plain}, with_scheduled=True)
    assert (result.retried, result.succeeded, runs) == (2, 1, [1, 2, 3])
    assert queue.get_job(job).status == "SUCCEEDED"


def test_drain_follows_snoozes_and_dependencies_in_order(queue):
    registry, seen = make_registry(queue)
    step = seen["tasks"]["step"]
    first = step.enqueue(1)
    second = step.options(depends_on=[first]).enqueue(2)
    step.options(depends_on=[second]).enqueue(3)
    seen["tasks"]["sleepy"].enqueue()

    result = drain(queue, registry, with_scheduled=True)

    assert [o for o in seen["order"]] == ["step:1", "step:2", "step:3"]
    assert (result.succeeded, result.snoozed) == (4, 2)
    assert str(result) == "6 run(s): 4 succeeded, 0 failed, 0 retried, 2 snoozed, 0 cancelled"
    assert check(queue) == []  # recorded as a worker records it: `sqlq check` agrees


def test_drain_stops_at_max_jobs_and_names_its_queues(queue):
    registry, seen = make_registry(queue)
    for n in range(3):
        seen["tasks"]["step"].enqueue(n)
    seen["tasks"]["welcome"].enqueue("a@example.com", HOME)
    assert drain(queue, registry, queues=["mail"]).count == 1
    assert drain(queue, registry, max_jobs=2).count == 2
    assert drain(queue, registry).count == 1


def test_drain_counts_a_job_cancelled_while_it_ran(queue):
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(name="self.cancel")
    def cancel_myself(ctx: sqlq_orm.JobContext) -> None:
        queue.cancel(ctx.job_id, reason="changed my mind")

    job = cancel_myself.enqueue()
    result = drain(queue, registry)
    assert (result.cancelled, result.succeeded, result.runs[0].status) == (1, 0, "CANCELLED")
    assert queue.get_job(job).status == "CANCELLED"


def test_drain_with_scheduled_needs_a_pinned_clock(engine):
    queue = sqlq_orm.Queue(engine)
    with pytest.raises(sqlq_orm.InvalidInput, match="PinnedClock"):
        drain(queue, sqlq_orm.TaskRegistry(queue), with_scheduled=True)


def _attempts(queue, job_id: int) -> list[str]:
    with queue.session() as session:
        return [
            a.status for a in session.scalars(select(JobAttempt).where(JobAttempt.job_id == job_id))
        ]


def test_inline_mode_runs_a_task_when_it_is_committed_and_records_it(queue, engine):
    registry, seen = make_registry(queue, inline=True)
    welcome, flaky = seen["tasks"]["welcome"], seen["tasks"]["flaky"]

    job = welcome.enqueue("a@example.com", HOME)
    assert queue.get_job(job).status == "SUCCEEDED"
    assert welcome.result(job) == "sent to a@example.com in Springfield"
    assert _attempts(queue, job) == ["SUCCEEDED"]

    with pytest.raises(sqlq_orm.InvalidInput, match="address"):
        welcome.enqueue("b@example.com", address=object())  # type: ignore[arg-type]
    failing = flaky.enqueue()  # recorded as a worker records it; not raised here
    assert queue.get_job(failing).error_code == "EXCEPTION:RUNTIME_ERROR"

    with Session(engine) as session:
        pending = welcome.options(session=session).enqueue("c@example.com", HOME)
        assert seen["order"] == ["welcome:a@example.com"]  # not before the commit
        session.commit()
    assert queue.get_job(pending).status == "SUCCEEDED"
    with Session(engine) as session:
        welcome.options(session=session).enqueue("d@example.com", HOME)
        session.rollback()
    assert seen["order"] == ["welcome:a@example.com", "welcome:c@example.com"]


def test_inline_mode_as_a_block(queue):
    registry, seen = make_registry(queue)
    with registry.inline_mode():
        ran = seen["tasks"]["step"].enqueue(1)
        many = seen["tasks"]["step"].enqueue_many([{"n": 3}, {"n": 4}])
    waits = seen["tasks"]["step"].enqueue(2)
    assert queue.get_job(ran).status == "SUCCEEDED"
    assert [queue.get_job(job).status for job in many] == ["SUCCEEDED", "SUCCEEDED"]
    assert queue.get_job(waits).status == "QUEUED" and not registry.inline
    assert seen["order"] == ["step:1", "step:3", "step:4"]


@pytest.mark.parametrize("db_url", BACKENDS, indirect=True)
def test_the_rolled_back_transaction_pattern(engine, queue, clock):  # and MariaDB
    # The app's test fixture: one connection, an outer transaction rolled back at the
    # end, and the app's session committing savepoints inside it.
    connection = engine.connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint")
    in_test = queue_in_transaction(queue, connection)
    registry, seen = make_registry(in_test)
    try:
        job = seen["tasks"]["welcome"].options(session=session).enqueue("a@example.com", HOME)
        seen["tasks"]["flaky"].enqueue()
        seen["tasks"]["step"].options(concurrency_key="k", concurrency_limit=1).enqueue(1)
        session.commit()  # a savepoint: the outer transaction still holds it
        assert_enqueued(seen["tasks"]["welcome"], session=session, args={"email": "a@example.com"})
        assert_enqueued(seen["tasks"]["welcome"])  # through the queue in the transaction

        result = drain(in_test, registry, with_scheduled=True)

        assert (result.succeeded, result.retried, result.failed) == (2, 2, 1)
        assert seen["tasks"]["welcome"].result(job) == "sent to a@example.com in Springfield"
        assert check(in_test) == []  # `sqlq check` inside the transaction
        with Session(engine) as other:  # nobody else sees any of it
            assert other.scalar(select(func.count()).select_from(Job)) == 0
    finally:
        session.close()
        outer.rollback()
        connection.close()
    with Session(engine) as after:
        assert after.scalar(select(func.count()).select_from(Job)) == 0
    assert isinstance(engine, sqlalchemy.Engine)
