"""factory-boy factories for the default models, for building known fixtures fast.

Rows are written through the ORM (not the service), so tests can set up any state,
including ones the service would never produce, and the CHECK constraints still
apply. Call :func:`bind` with a session first (the ``session`` fixture does).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import factory
from factory.alchemy import SQLAlchemyModelFactory
from sqlalchemy.orm import Session

from sqlq_orm.db.tables import Models
from sqlq_orm.schema.models import Job, JobAttempt, JobEvent, WorkerRecord

T0 = 1_700_000_000


class _Base(SQLAlchemyModelFactory):
    class Meta:
        abstract = True
        sqlalchemy_session = None
        sqlalchemy_session_persistence = "flush"


class JobFactory(_Base):
    class Meta:
        model = Job

    queue = "default"
    type = factory.Sequence(lambda n: f"type_{n % 3}")
    status = "QUEUED"
    priority = 0
    payload = '{"n": 1}'
    created_at = T0
    run_at = T0
    attempt_count = 0
    retry_count = 0
    max_retries = 3

    class Params:
        claimed = factory.Trait(
            status="CLAIMED",
            claimed_by="worker-1",
            lease_token=factory.Sequence(lambda n: f"token-{n}"),
            claimed_at=T0 + 1,
            heartbeat_at=T0 + 1,
            lease_expires_at=T0 + 31,
        )
        running = factory.Trait(
            status="RUNNING",
            claimed_by="worker-1",
            lease_token=factory.Sequence(lambda n: f"token-{n}"),
            claimed_at=T0 + 1,
            started_at=T0 + 1,
            heartbeat_at=T0 + 1,
            lease_expires_at=T0 + 31,
            attempt_count=1,
        )
        succeeded = factory.Trait(status="SUCCEEDED", finished_at=T0 + 10, attempt_count=1)
        failed = factory.Trait(
            status="FAILED",
            finished_at=T0 + 10,
            attempt_count=1,
            error_code="INTERNAL:BUG",
            error_detail="boom",
        )
        cancelled = factory.Trait(status="CANCELLED", finished_at=T0 + 10)


class JobAttemptFactory(_Base):
    class Meta:
        model = JobAttempt

    job = factory.SubFactory(JobFactory, running=True)
    attempt = 1
    worker_id = "worker-1"
    started_at = T0 + 1
    status = "RUNNING"


class JobEventFactory(_Base):
    class Meta:
        model = JobEvent

    job = factory.SubFactory(JobFactory)
    ts = T0
    event = "ENQUEUED"
    actor = "system"


class WorkerFactory(_Base):
    class Meta:
        model = WorkerRecord

    id = factory.Sequence(lambda n: f"worker-{n}")
    hostname = "host-a"
    pid = factory.Sequence(lambda n: 1000 + n)
    queues = "default"
    concurrency = 1
    started_at = T0
    last_seen_at = T0


ALL = (JobFactory, JobAttemptFactory, JobEventFactory, WorkerFactory)


def bind(session: Session | None) -> None:
    """Point every factory at ``session`` (or detach them with ``None``)."""
    for factory_class in (_Base, *ALL):
        factory_class._meta.sqlalchemy_session = session


def factories_for(models: Models, session: Session) -> SimpleNamespace:
    """Factories like the ones above, for any set of models (a host app's own).

    Returns ``job``, ``attempt``, ``event`` and ``worker`` factory classes writing
    through ``session``; the attempt and event factories make their job with ``job``.
    """

    def subclass(base: type, model: Any, **attributes: Any) -> Any:
        meta = type("Meta", (), {"model": model, "sqlalchemy_session": session})
        return type(f"{model.__name__}Factory", (base,), {"Meta": meta, **attributes})

    job = subclass(JobFactory, models.job)
    return SimpleNamespace(
        job=job,
        attempt=subclass(
            JobAttemptFactory, models.attempt, job=factory.SubFactory(job, running=True)
        ),
        event=subclass(JobEventFactory, models.event, job=factory.SubFactory(job)),
        worker=subclass(WorkerFactory, models.worker),
    )
