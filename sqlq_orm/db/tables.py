"""Which tables the queue works on: :class:`Models` (mapped classes) and :class:`Tables`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table

from sqlq_orm.schema.models import Job, JobAttempt, JobEvent, WorkerRecord


@dataclass(frozen=True)
class Tables:
    """The four tables the queue works on (the library's, or a host app's)."""

    jobs: Table
    attempts: Table
    events: Table
    workers: Table


@dataclass(frozen=True)
class Models:
    """The mapped classes the queue works with; a host app passes its own."""

    job: Any
    attempt: Any
    event: Any
    worker: Any

    @classmethod
    def default(cls) -> Models:
        """The library's own models (tables ``sqlq_*``)."""
        return cls(job=Job, attempt=JobAttempt, event=JobEvent, worker=WorkerRecord)

    def tables(self) -> Tables:
        """The tables behind the models."""

        def table(model: Any) -> Table:
            return model.__table__  # type: ignore[no-any-return]

        return Tables(
            jobs=table(self.job),
            attempts=table(self.attempt),
            events=table(self.event),
            workers=table(self.worker),
        )
