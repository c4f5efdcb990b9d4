"""The library's own declarative base and the default concrete models.

Apps that want the tables under their own base bind the mixins instead
(see :mod:`sqlq_orm.schema.mixins`); everything in the service layer works with either.
"""

from __future__ import annotations

from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

from sqlq_orm.schema.controls import QueueControlMixin
from sqlq_orm.schema.mixins import (
    JobAttemptMixin,
    JobDependencyMixin,
    JobEventMixin,
    JobMixin,
    ScheduleMixin,
    WorkerMixin,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Names for anything not named explicitly (the mixins name everything they declare)."""


class Base(DeclarativeBase):
    """Declarative base of the default models, with a naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(JobMixin, Base):
    """A job's current state (table ``sqlq_jobs``)."""


class JobAttempt(JobAttemptMixin, Base):
    """One run of a job (table ``sqlq_job_attempts``)."""


class JobEvent(JobEventMixin, Base):
    """One entry of a job's timeline (table ``sqlq_job_events``)."""


class WorkerRecord(WorkerMixin, Base):
    """A registered worker process (table ``sqlq_workers``)."""


class ScheduleRecord(ScheduleMixin, Base):
    """A recurring schedule's progress (table ``sqlq_schedules``)."""


class JobDependency(JobDependencyMixin, Base):
    """One job waiting for another (table ``sqlq_job_dependencies``)."""


class QueueControl(QueueControlMixin, Base):
    """One queue's operator state, e.g. paused (table ``sqlq_queues``)."""


metadata = Base.metadata
