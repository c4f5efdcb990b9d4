"""Which tables the queue works on: :class:`Models` (mapped classes) and :class:`Tables`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table

from sqlq_orm.schema.models import (
    Job,
    JobAttempt,
    JobDependency,
    JobEvent,
    ScheduleRecord,
    WorkerRecord,
)


@dataclass(frozen=True)
class Tables:
    """The tables the queue works on (the library's, or a host app's).

    ``schedules`` is None when the models name no schedule model: recurring schedules
    are then unavailable (a host app binds :class:`~sqlq_orm.schema.mixins.ScheduleMixin`
    to use them). ``dependencies`` is None likewise when the models name no dependency
    model: ``depends_on`` is then refused (bind
    :class:`~sqlq_orm.schema.mixins.JobDependencyMixin` to use it).
    """

    jobs: Table
    attempts: Table
    events: Table
    workers: Table
    schedules: Table | None = None
    dependencies: Table | None = None


@dataclass(frozen=True)
class Models:
    """The mapped classes the queue works with; a host app passes its own.

    ``schedule`` (a class bound from :class:`~sqlq_orm.schema.mixins.ScheduleMixin`)
    is optional: without it the queue runs no recurring schedules. ``dependency`` (a
    class bound from :class:`~sqlq_orm.schema.mixins.JobDependencyMixin`) is optional
    too: without it jobs cannot ``depends_on`` others.
    """

    job: Any
    attempt: Any
    event: Any
    worker: Any
    schedule: Any = None
    dependency: Any = None

    @classmethod
    def default(cls) -> Models:
        """The library's own models (tables ``sqlq_*``)."""
        return cls(
            job=Job,
            attempt=JobAttempt,
            event=JobEvent,
            worker=WorkerRecord,
            schedule=ScheduleRecord,
            dependency=JobDependency,
        )

    def tables(self) -> Tables:
        """The tables behind the models."""

        def table(model: Any) -> Table:
            return model.__table__  # type: ignore[no-any-return]

        return Tables(
            jobs=table(self.job),
            attempts=table(self.attempt),
            events=table(self.event),
            workers=table(self.worker),
            schedules=None if self.schedule is None else table(self.schedule),
            dependencies=None if self.dependency is None else table(self.dependency),
        )
