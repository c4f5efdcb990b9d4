"""Tasks as a user's type checker sees them (issue 24, item 2): ``enqueue`` has the
task function's own parameters (without a leading JobContext), so ``mypy --strict``
flags a wrong or missing argument at the call, not a worker at run time."""

from __future__ import annotations

from pathlib import Path

from tests.support.mypy_check import flagged_and_expected

USER_FILE = """
import dataclasses
import sqlq_orm
from sqlq_orm import AsyncJobContext, JobContext

registry = sqlq_orm.TaskRegistry()


@dataclasses.dataclass
class Point:
    x: int
    y: int


@registry.task(queue="mail")
def send_email(to: str, subject: str = "Hello") -> None:
    pass


@registry.task()
def with_context(ctx: JobContext, point: Point) -> int:
    return ctx.job_id + point.x


@registry.task()
async def fetch(ctx: AsyncJobContext, url: str) -> bytes:
    return b""


async def fine() -> None:
    job: sqlq_orm.EnqueuedJob = send_email.enqueue(to="a@example.com")
    send_email.enqueue("a@example.com", subject="Hi")
    send_email.options(delay=5, priority=3).enqueue(to="b@example.com")
    with_context.enqueue(Point(1, 2))
    await fetch.enqueue_async(url="https://example.com")
    spec: sqlq_orm.JobSpec = fetch.spec("https://example.com")
    result: sqlq_orm.Task[[Point], int] = with_context
    assert job and spec and result


def mistakes() -> None:
    send_email.enqueue(to=1)  # MISTAKE wrong type
    send_email.enqueue()  # MISTAKE missing argument
    send_email.enqueue(to="a", cc="b")  # MISTAKE unknown keyword
    with_context.enqueue(point=(1, 2))  # MISTAKE not a Point
    fetch.enqueue(url=b"x")  # MISTAKE bytes
    send_email.options(delay="soon").enqueue(to="a")  # MISTAKE option type
"""


def test_mypy_flags_wrong_and_missing_task_arguments(tmp_path: Path):
    flagged, mistakes, output = flagged_and_expected(tmp_path, "user_tasks.py", USER_FILE)
    assert flagged == mistakes, output
