"""The :class:`Scheduler`: register schedules once, then tick."""

from __future__ import annotations

from collections.abc import Iterable

from sqlq_orm.core.schedule import Schedule
from sqlq_orm.errors import InvalidInput
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import TickResult


class Scheduler:
    """Enqueues the due slots of ``schedules`` on ``queue``, each slot exactly once.

    ``tick()`` is safe to call from any number of processes and machines at once,
    whatever their clocks say: time is the queue's clock, and each slot is claimed by
    a compare-and-set in the same transaction as its job. A tick with nothing due is
    one indexed read (no write lock).
    """

    def __init__(self, queue: Queue, schedules: Iterable[Schedule]) -> None:
        self.queue = queue
        self.schedules: dict[str, Schedule] = {}
        for schedule in schedules:
            if not isinstance(schedule, Schedule):
                raise InvalidInput(f"expected a Schedule (registry.periodic), got {schedule!r}")
            if schedule.name in self.schedules:
                raise InvalidInput(f"two schedules are named {schedule.name!r}; names are unique")
            self.schedules[schedule.name] = schedule
        self._registered = False

    def register(self) -> None:
        """Upsert the schedules into the schedules table (``tick`` does it once itself)."""
        self.queue.register_schedules(self.schedules.values())
        self._registered = True

    def tick(self) -> TickResult:
        """Enqueue every slot that is due now; return what was done."""
        if not self.schedules:
            return TickResult()
        if not self._registered:
            self.register()
        return self.queue.enqueue_due_slots(self.schedules)
