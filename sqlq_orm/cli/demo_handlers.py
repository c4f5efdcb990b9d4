"""The handlers the demo's worker processes run (``sqlq_orm.cli.demo_handlers:registry``).

Each stands for a kind of job a real app has; their behaviour comes from the payload,
so the demo's outcome is predictable and its report easy to check.
"""

from __future__ import annotations

import os
import signal
import time

from sqlq_orm.errors import JobError
from sqlq_orm.worker.handlers import HandlerRegistry, JobContext

registry = HandlerRegistry()


@registry.handler("resize_image")
def resize_image(ctx: JobContext) -> str:
    """Fast: a few milliseconds of work; returns where the result went."""
    time.sleep(ctx.payload.get("ms", 10) / 1000)
    return f"file:///thumbnails/{ctx.job_id}.png"


@registry.handler("generate_report")
def generate_report(ctx: JobContext) -> None:
    """Slow but cooperative: works in steps and stops early once told to."""
    for _ in range(int(ctx.payload.get("steps", 10))):
        if ctx.sleep(0.1):
            return


@registry.handler("export_archive")
def export_archive(ctx: JobContext) -> None:
    """Takes a couple of seconds: long enough to lose its worker in the middle."""
    ctx.sleep(float(ctx.payload.get("seconds", 2.0)))


@registry.handler("charge_card")
def charge_card(ctx: JobContext) -> None:
    """Fails with a classified error when the card is declined (no retry helps)."""
    if ctx.payload.get("declined"):
        raise JobError(
            "PAYMENT:CARD_DECLINED",
            f"card of order {ctx.payload['order']} declined",
            retryable=False,
        )


@registry.handler("sync_inventory")
def sync_inventory(ctx: JobContext) -> None:
    """The upstream API times out on the first attempt; the retry goes through."""
    if ctx.attempt == 1:
        raise JobError("TIMEOUT:UPSTREAM_API", "inventory API did not answer within 5s")


@registry.handler("import_csv")
def import_csv(ctx: JobContext) -> None:
    """A bug: an unhandled exception on every attempt."""
    row: dict[str, str] = {"name": "widget"}
    ctx.payload["sku"] = row["sku"]  # KeyError: the handler's author forgot a column


@registry.handler("render_video")
def render_video(ctx: JobContext) -> None:
    """The poison job: takes its whole worker process down, every time (like a segfault)."""
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
