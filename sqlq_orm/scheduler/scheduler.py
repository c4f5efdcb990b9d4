"""The :class:`Scheduler`: register schedules once, then tick."""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlq_orm.core.schedule import Schedule
from sqlq_orm.errors import InvalidInput
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import TickResult

DEFAULT_REGISTER_INTERVAL = 300.0
"""Seconds between re-registrations of a running scheduler's schedules (an upsert each)."""


class Scheduler:
    """Enqueues the due slots of ``schedules`` on ``queue``, each slot exactly once.

    ``tick()`` is safe to call from any number of processes and machines at once,
    whatever their clocks say: time is the queue's clock, and each slot is claimed by
    a compare-and-set in the same transaction as its job. A tick with nothing due is
    one indexed read (no write lock). The schedules are registered (upserted) on the
    first tick and again every ``register_interval`` seconds, so a row removed or a
    table re-created while the process runs comes back.
    """

    def __init__(
        self,
        queue: Queue,
        schedules: Iterable[Schedule],
        *,
        register_interval: float = DEFAULT_REGISTER_INTERVAL,
    ) -> None:
        self.queue = queue
        self.schedules: dict[str, Schedule] = {}
        for schedule in schedules:
            if not isinstance(schedule, Schedule):
                raise InvalidInput(f"expected a Schedule (registry.periodic), got {schedule!r}")
            if schedule.name in self.schedules:
                raise InvalidInput(f"two schedules are named {schedule.name!r}; names are unique")
            self.schedules[schedule.name] = schedule
        self.register_interval = register_interval
        self._register_due = float("-inf")  # monotonic time of the next registration
        self._registered = False

    def register(self) -> None:
        """Upsert the schedules into the schedules table (``tick`` does it itself).

        The first registration writes this process's definitions (a changed cron
        takes effect); later ones only bring back rows that went missing, so a
        process still running old code never reverts what a newer one registered
        (see :meth:`~sqlq_orm.Queue.enqueue_due_slots`: the stored definition wins).
        """
        self.queue.register_schedules(self.schedules.values(), replace=not self._registered)
        self._registered = True
        self._register_due = time.monotonic() + self.register_interval

    def tick(self) -> TickResult:
        """Enqueue every slot that is due now; return what was done."""
        if not self.schedules:
            return TickResult()
        if time.monotonic() >= self._register_due:
            self.register()
        return self.queue.enqueue_due_slots(self.schedules)
