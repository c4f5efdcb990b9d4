"""Which tables the queue works on: :class:`Models` (mapped classes) and :class:`Tables`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import MetaData, Table


@dataclass(frozen=True)
class Tables:
    """The tables the queue works on (the library's, or a host app's).

    ``schedules`` is None when the models name no schedule model: recurring schedules
    are then unavailable (a host app binds :class:`~sqlq_orm.schema.mixins.ScheduleMixin`
    to use them). ``dependencies`` is None likewise when the models name no dependency
    model: ``depends_on`` is then refused (bind
    :class:`~sqlq_orm.schema.mixins.JobDependencyMixin` to use it). ``queues`` is None
    when the models name no queue-control model: queues cannot be paused then (bind
    :class:`~sqlq_orm.schema.controls.QueueControlMixin`).
    """

    jobs: Table
    attempts: Table
    events: Table
    workers: Table
    schedules: Table | None = None
    dependencies: Table | None = None
    queues: Table | None = None


@dataclass(frozen=True)
class Models:
    """The mapped classes the queue works with; a host app passes its own.

    ``schedule`` (a class bound from :class:`~sqlq_orm.schema.mixins.ScheduleMixin`)
    is optional: without it the queue runs no recurring schedules. ``dependency`` (a
    class bound from :class:`~sqlq_orm.schema.mixins.JobDependencyMixin`) is optional
    too: without it jobs cannot ``depends_on`` others. ``queue_control`` (bound from
    :class:`~sqlq_orm.schema.controls.QueueControlMixin`) is optional: without it
    queues cannot be paused.
    """

    job: Any
    attempt: Any
    event: Any
    worker: Any
    schedule: Any = None
    dependency: Any = None
    queue_control: Any = None

    @classmethod
    def default(cls) -> Models:
        """The library's own models (tables ``sqlq_*``)."""
        # Imported on first use: mapping them loads SQLAlchemy's PostgreSQL and MySQL
        # dialects (their index options), which an app that passes its own models, or
        # only imports the package, need not pay for.
        from sqlq_orm.schema.models import (
            Job,
            JobAttempt,
            JobDependency,
            JobEvent,
            QueueControl,
            ScheduleRecord,
            WorkerRecord,
        )

        return cls(
            job=Job,
            attempt=JobAttempt,
            event=JobEvent,
            worker=WorkerRecord,
            schedule=ScheduleRecord,
            dependency=JobDependency,
            queue_control=QueueControl,
        )

    def tables(self, schema: str | None = None) -> Tables:
        """The tables behind the models; with ``schema``, copies of them in that schema
        (foreign keys between them pointing there too), for statements that name it."""
        if schema is not None:
            return _tables_in_schema(self, schema)

        def table(model: Any) -> Table:
            return model.__table__  # type: ignore[no-any-return]

        return Tables(
            jobs=table(self.job),
            attempts=table(self.attempt),
            events=table(self.event),
            workers=table(self.worker),
            schedules=None if self.schedule is None else table(self.schedule),
            dependencies=None if self.dependency is None else table(self.dependency),
            queues=None if self.queue_control is None else table(self.queue_control),
        )


@cache
def _tables_in_schema(models: Models, schema: str) -> Tables:
    # One copy per (models, schema) in a process: the statements built on it are
    # cached by SQLAlchemy per table object.
    plain = models.tables()
    metadata = MetaData(naming_convention=plain.jobs.metadata.naming_convention)

    def copy(table: Table | None) -> Table | None:
        return None if table is None else table.to_metadata(metadata, schema=schema)

    jobs = copy(plain.jobs)
    attempts = copy(plain.attempts)
    events = copy(plain.events)
    workers = copy(plain.workers)
    assert jobs is not None and attempts is not None and events is not None
    assert workers is not None
    return Tables(
        jobs=jobs,
        attempts=attempts,
        events=events,
        workers=workers,
        schedules=copy(plain.schedules),
        dependencies=copy(plain.dependencies),
    )
