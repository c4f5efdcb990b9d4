"""The scheduler: enqueues the slots of recurring schedules, each exactly once.

:class:`~sqlq_orm.scheduler.scheduler.Scheduler` ties schedules declared in code
(``registry.periodic(...)``, :class:`~sqlq_orm.core.schedule.Schedule`) to a queue:
``tick()`` registers them on first use and enqueues whatever is due. Workers run it in
a thread (:mod:`sqlq_orm.worker.scheduling`); any number of processes may tick at once.

May import: everything below the worker (layer 6, beside it; it never imports the
worker or the CLI).
"""

from sqlq_orm.scheduler.scheduler import Scheduler

__all__ = ["Scheduler"]
