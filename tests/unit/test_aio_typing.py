"""AsyncQueue's operations as a user's type checker sees them (issue 22, item 11): the
``Queue`` method's own parameters, and an awaitable of its result. Runs mypy --strict
on a small user file, as an IDE or CI would."""

from __future__ import annotations

from pathlib import Path

from tests.support.mypy_check import flagged_and_expected

USER_FILE = """
import sqlq_orm
from sqlalchemy.ext.asyncio import AsyncSession


async def place_order(queue: sqlq_orm.AsyncQueue, session: AsyncSession) -> int:
    job = await queue.enqueue("send_receipt", {"order": 1}, priority=5, session=session)
    created: bool = job.created
    jobs = await queue.enqueue_many([sqlq_orm.JobSpec("a"), {"type": "b"}])
    first: sqlq_orm.EnqueuedJob = jobs[0]
    await queue.cancel(first, reason="changed my mind")
    assert created
    return job.id


async def mistakes(queue: sqlq_orm.AsyncQueue) -> None:
    await queue.enqueue("t", priority="high")  # MISTAKE priority
    await queue.enqueue("t", delay="soon")  # MISTAKE delay
    await queue.enqueue(42)  # MISTAKE type
    await queue.cancel(1, actr="me")  # MISTAKE keyword
    await queue.claim("w", limit="10")  # MISTAKE limit
    not_awaited: sqlq_orm.EnqueuedJob = queue.enqueue("t")  # MISTAKE coroutine
"""


def test_mypy_sees_queues_typed_parameters_on_asyncqueue(tmp_path: Path):
    flagged, mistakes, output = flagged_and_expected(tmp_path, "user_app.py", USER_FILE)
    assert flagged == mistakes, output
