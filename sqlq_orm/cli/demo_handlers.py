"""The tasks the demo's worker processes run (``sqlq_orm.cli.demo_handlers:registry``).

Each stands for a kind of job a real app has, written the way an app writes one: a
typed function, ``@registry.task``, enqueued with ``.enqueue(...)`` (the demo binds
the registry to its queue). Their behaviour comes from their arguments, so the
demo's outcome is predictable and its report easy to check. The job types keep the
short names (``name=``) the report talks about.
"""

from __future__ import annotations

import os
import signal
import time

from sqlq_orm.errors import JobError
from sqlq_orm.tasks.registry import TaskRegistry
from sqlq_orm.worker.handlers import JobContext

registry = TaskRegistry()
"""Unbound here: a worker only runs the tasks; the demo binds it to enqueue them."""


@registry.task(name="resize_image")
def resize_image(image: str, ms: int = 10) -> str:
    """Fast: a few milliseconds of work; returns where the thumbnail went (its result)."""
    time.sleep(ms / 1000)
    return f"file:///thumbnails/{os.path.splitext(image)[0]}.png"


@registry.task(name="generate_report")
def generate_report(ctx: JobContext, steps: int = 10) -> None:
    """Slow but cooperative: works in steps and stops early once told to."""
    for _ in range(steps):
        if ctx.sleep(0.1):
            return


@registry.task(name="export_archive", priority=10)
def export_archive(ctx: JobContext, seconds: float = 2.0) -> None:
    """Takes a couple of seconds: long enough to lose its worker in the middle."""
    ctx.sleep(seconds)


@registry.task(name="charge_card")
def charge_card(order: int, declined: bool = False) -> None:
    """Fails with a classified error when the card is declined (no retry helps)."""
    if declined:
        raise JobError("PAYMENT:CARD_DECLINED", f"card of order {order} declined", retryable=False)


@registry.task(name="sync_inventory", max_retries=2, backoff=1)
def sync_inventory(ctx: JobContext, warehouse: int) -> None:
    """The upstream API times out on the first attempt; the retry (1 s later, the
    task's own backoff) goes through."""
    if ctx.attempt == 1:
        raise JobError("TIMEOUT:UPSTREAM_API", "inventory API did not answer within 5s")


@registry.task(name="import_csv", max_retries=1)
def import_csv(file: str) -> None:
    """A bug: an exception on every attempt (``EXCEPTION:KEY_ERROR``)."""
    row: dict[str, str] = {"name": "widget"}
    print(file, row["sku"])  # KeyError: the task's author forgot a column


@registry.task(name="render_video", queue="media", max_retries=2)
def render_video(video: str) -> None:
    """The poison job: takes its whole worker process down, every time (like a segfault)."""
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
