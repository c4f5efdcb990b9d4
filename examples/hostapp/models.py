"""The app's models: its own declarative base, its ``orders``, and sqlq's tables bound to it.

sqlq's mixins give the queue's tables; binding them to this base puts them in this
app's metadata (so its Alembic autogenerate sees them) and lets the job row carry the
app's own columns: ``tenant_id`` and a reference to the order a job is about.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqlq_orm import (
    JobAttemptMixin,
    JobDependencyMixin,
    JobEventMixin,
    JobMixin,
    Models,
    QueueControlMixin,
    ScheduleMixin,
    WorkerMixin,
)


class Base(DeclarativeBase):
    """The app's base, with the app's naming convention (sqlq's tables keep their
    own explicit names; the app's columns on them follow this convention)."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[str] = mapped_column(String(40))


class Job(JobMixin, Base):
    tenant_id: Mapped[int | None] = mapped_column(index=True)
    order_id: Mapped[int | None] = mapped_column(ForeignKey("orders.id", ondelete="SET NULL"))


class JobAttempt(JobAttemptMixin, Base):
    pass


class JobEvent(JobEventMixin, Base):
    pass


class Worker(WorkerMixin, Base):
    pass


class Schedule(ScheduleMixin, Base):
    pass


class JobDependency(JobDependencyMixin, Base):
    pass


class QueueControl(QueueControlMixin, Base):
    pass


MODELS = Models(
    job=Job,
    attempt=JobAttempt,
    event=JobEvent,
    worker=Worker,
    schedule=Schedule,
    dependency=JobDependency,
    queue_control=QueueControl,
)
"""What ``sqlq_orm.Queue(engine, models=MODELS)`` needs to use these tables."""
