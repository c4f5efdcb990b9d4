"""``sqlq_orm.testing.perform``: a task's function run now, without a queue or a
database, after the same argument check and JSON round trip as ``enqueue``."""

from __future__ import annotations

import dataclasses

import pytest

import sqlq_orm
from sqlq_orm.tasks.middleware import TaskMiddleware
from sqlq_orm.testing import perform, perform_async, perform_call


@dataclasses.dataclass
class Window:
    start: str
    days: int


registry = sqlq_orm.TaskRegistry()
seen: list[object] = []


class Around(TaskMiddleware):
    def around_run(self, task, ctx, proceed):
        seen.append(f"around {task.name} job {ctx.job_id}")
        return proceed()


registry.add_middleware(Around())


@registry.task(name="report")
def report(window: Window, title: str = "Report") -> dict[str, object]:
    assert isinstance(window, Window)  # rebuilt from its JSON, as on a worker
    return {"title": title, "until": window.days}


@registry.task(name="inspect", max_retries=5, queue="inspections")
def inspect_ctx(ctx: sqlq_orm.JobContext, n: int) -> list[object]:
    return [ctx.job_id, ctx.attempt, ctx.retry_count, ctx.queue, dict(ctx.columns), n]


@registry.task(name="refuse")
def refuse(kind: str) -> None:
    if kind == "job":
        raise sqlq_orm.JobError("PAYMENT:DECLINED", "card declined", retryable=False)
    if kind == "snooze":
        raise sqlq_orm.Snooze(30)
    raise KeyError(kind)


@registry.task(name="clash")
def clash(attempt: int) -> int:
    return attempt


@registry.task(name="fetch")
async def fetch(url: str) -> str:
    return url.upper()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    seen.clear()


def test_perform_returns_the_result_through_the_codecs_and_runs_the_middleware():
    assert perform(report, Window("2024-01-01", 7)) == {"title": "Report", "until": 7}
    assert perform(report, window=Window("2024-01-01", 3), title="T", job_id=9) == {
        "title": "T",
        "until": 3,
    }
    assert seen == ["around report job 1", "around report job 9"]


def test_perform_checks_the_arguments_as_enqueue_does():
    with pytest.raises(sqlq_orm.InvalidInput, match="cannot take these arguments"):
        perform(report)  # type: ignore[call-arg]
    with pytest.raises(sqlq_orm.InvalidInput, match="'title'"):
        perform(report, Window("2024-01-01", 1), title=object())  # type: ignore[arg-type]
    assert seen == []  # nothing ran


def test_the_context_takes_job_id_attempt_and_columns():
    got = perform(inspect_ctx, 4, job_id=12, attempt=3, columns={"tenant": "acme"})
    assert got == [12, 3, 2, "inspections", {"tenant": "acme"}, 4]
    assert perform(inspect_ctx, n=1) == [1, 1, 0, "inspections", {}, 1]


def test_job_error_snooze_and_plain_exceptions_propagate_as_raised():
    with pytest.raises(sqlq_orm.JobError) as declined:
        perform(refuse, "job")
    assert (declined.value.code, declined.value.retryable) == ("PAYMENT:DECLINED", False)
    with pytest.raises(sqlq_orm.Snooze):
        perform(refuse, "snooze")
    with pytest.raises(KeyError, match="other"):
        perform(refuse, "other")


def test_a_parameter_named_like_a_context_keyword_goes_through_perform_call():
    with pytest.raises(sqlq_orm.InvalidInput, match="perform_call"):
        perform(clash, attempt=2)
    assert perform_call(clash, (), {"attempt": 2}, attempt=5) == 2


def test_an_async_task_runs_on_a_loop_of_its_own_or_is_awaited():
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    def as_a_test_would() -> tuple[str, str]:
        return perform(fetch, "a"), asyncio.run(perform_async(fetch, ("b",)))

    # On a thread of its own: in the whole suite an earlier test has left the main
    # thread marked as running an event loop (not found yet), where asyncio.run refuses.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(as_a_test_would).result(timeout=30) == ("A", "B")
