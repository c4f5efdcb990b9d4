"""Handlers for the worker processes the tests start.

``--handlers tests.support.handlers_for_tests:registry``.

Each one does one recognisable thing, driven by its payload, so a test can stage a
crash, a hang or a slow job without sleeping on the test's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from sqlq_orm import AsyncJobContext, JobContext, JobError
from sqlq_orm.worker.handlers import HandlerRegistry

registry = HandlerRegistry()

HOLD_LIMIT = 120.0
"""No test handler blocks longer than this, so a leaked process cannot linger forever."""


@registry.handler("echo")
def echo(ctx: JobContext) -> None:
    """Succeed at once."""


@registry.handler("hold")
def hold(ctx: JobContext) -> None:
    """On the attempts listed in ``on_attempts``, block until ``until_file`` exists.

    Ignores ``should_stop`` on purpose: it stands for a handler that is frozen or
    busy and comes back later believing it succeeded. Other attempts succeed at once.
    """
    if ctx.attempt not in ctx.payload.get("on_attempts", [1]):
        return
    release = Path(ctx.payload["until_file"])
    deadline = time.monotonic() + HOLD_LIMIT
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@registry.handler("span")
def span(ctx: JobContext) -> None:
    """Run for ``seconds``; append ``key start end`` (monotonic, ns) to ``log_file``.

    One ``write`` per line on a file opened for appending: lines from several
    processes never interleave. CLOCK_MONOTONIC is one clock for the whole machine,
    so the spans of different processes can be compared."""
    started = time.monotonic_ns()
    time.sleep(ctx.payload["seconds"])
    line = f"{ctx.payload['key']} {started} {time.monotonic_ns()}\n"
    with open(ctx.payload["log_file"], "a", encoding="utf-8") as log:
        log.write(line)


@registry.handler("finish_on_shutdown")
def finish_on_shutdown(ctx: JobContext) -> None:
    """Run until the worker starts shutting down, then finish well within the grace period."""
    deadline = time.monotonic() + HOLD_LIMIT
    while not ctx.shutdown_requested and time.monotonic() < deadline:
        time.sleep(0.05)


@registry.handler("ignore_shutdown")
def ignore_shutdown(ctx: JobContext) -> None:
    """A slow job that neither checks the context nor finishes within any grace period."""
    time.sleep(HOLD_LIMIT)


@registry.handler("stubborn_task")
async def stubborn_task(ctx: AsyncJobContext) -> None:
    """An ``async def`` that swallows its cancellation and carries on (a bug the worker
    must survive: it abandons the task like a stuck thread)."""
    deadline = time.monotonic() + HOLD_LIMIT
    while time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)


@registry.handler("poison")
def poison(ctx: JobContext) -> None:
    """Kill the whole worker process, every time (a segfault, the OOM killer...)."""
    os.kill(os.getpid(), signal.SIGKILL)


@registry.handler("declined")
def declined(ctx: JobContext) -> None:
    """Fail with a classified, non-retryable error."""
    raise JobError("PAYMENT:CARD_DECLINED", "card ending 4242 was declined", retryable=False)


scheduled = HandlerRegistry({"echo": echo})
"""``--handlers tests.support.handlers_for_tests:scheduled``: echo, and a schedule of it
(kept apart from ``registry`` so other tests' workers enqueue nothing on their own)."""
scheduled.periodic("0 3 * * *", "echo", name="nightly_echo", timezone="Europe/Paris")
