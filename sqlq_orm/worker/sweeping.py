"""When to sweep, and a sweeper loop for a process that does nothing else.

A sweep (:meth:`~sqlq_orm.queue.queue.Queue.sweep`) takes back expired leases and ends
jobs past their max runtime. Workers sweep on a jittered schedule so that a dead
worker's jobs come back without anyone watching; ``sqlq sweep --loop`` runs
:func:`run_sweeper` on its own.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.errors import InvalidInput, SqlqError
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.sweeper import RetryDelays
from sqlq_orm.queue.types import SweepResult
from sqlq_orm.worker.outcomes import one_line

log = logging.getLogger("sqlq_orm.worker")

DEFAULT_SWEEP_INTERVAL = (10.0, 30.0)
"""Seconds between in-worker sweeps, drawn at random in this range (spreads workers out)."""

_STOP_POLL = 0.1  # how often a waiting sweeper looks at should_stop()


class SweepSchedule:
    """Jittered intervals between sweeps: a number, or a ``(low, high)`` range."""

    def __init__(self, interval: float | tuple[float, float], rng: random.Random | None = None):
        low, high = (interval, interval) if isinstance(interval, (int, float)) else interval
        if not 0 < low <= high:
            raise InvalidInput(
                f"sweep interval must be a positive number or a (low, high) range with "
                f"0 < low <= high, got {interval!r}"
            )
        self.low, self.high = float(low), float(high)
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """Seconds until the next sweep."""
        return self._rng.uniform(self.low, self.high)


def sweep_once(
    queue: Queue, actor: str, retry_delays: RetryDelays | None = None
) -> SweepResult | None:
    """Sweep once; a failure (database locked or down) is logged and gives None.
    ``retry_delays``: job types' own waits before a retry (see ``Queue.sweep``)."""
    try:
        return queue.sweep(actor=actor, retry_delays=retry_delays)
    except (SQLAlchemyError, SqlqError) as exc:
        log.warning("sweep failed (%s); trying again later", one_line(str(exc)))
        return None


def run_sweeper(
    queue: Queue,
    interval: float | tuple[float, float],
    *,
    should_stop: Callable[[], bool],
    actor: str = "sweeper",
    on_sweep: Callable[[SweepResult], None] | None = None,
) -> SweepResult:
    """Sweep, then wait a jittered interval, until ``should_stop()``; return the totals.

    A sweep that fails (database locked or down) is logged and tried again next time.
    """
    schedule = SweepSchedule(interval)
    total = SweepResult()
    while not should_stop():
        result = sweep_once(queue, actor)
        if result is not None:
            total += result
            if on_sweep is not None:
                on_sweep(result)
        deadline = time.monotonic() + schedule.next_delay()
        while not should_stop() and time.monotonic() < deadline:
            time.sleep(min(_STOP_POLL, max(0.0, deadline - time.monotonic())))
    return total
