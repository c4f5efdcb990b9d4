""":func:`drain`: run every ready job now, in this process, as a worker would.

::

    signup(email="a@example.com")            # enqueues send_welcome
    result = drain(queue, registry)
    assert result.succeeded == 1

The jobs run through the worker's own path
(:func:`sqlq_orm.worker.in_process.run_ready_jobs`): the same middleware, failure
classification, retry policies and task backoffs, snoozes, results and dependencies
(a child runs after its parents, in the same drain). With ``with_scheduled=True``
the jobs due later (delayed, retried, snoozed) are made due by moving the queue's
:class:`~sqlq_orm.PinnedClock` forward to each in turn, so a test sees a job retried
to its end without sleeping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from sqlq_orm.core import validation
from sqlq_orm.db.clock import PinnedClock
from sqlq_orm.errors import InvalidInput
from sqlq_orm.queue.queue import Queue
from sqlq_orm.schema.mixins import QUEUE_MAX
from sqlq_orm.schema.states import JobStatus
from sqlq_orm.worker.handlers import Handler, HandlerRegistry
from sqlq_orm.worker.in_process import InProcessRun, run_ready_jobs

_IDS_PER_READ = 500

DEFAULT_MAX_JOBS = 10_000
"""The most runs one drain makes unless told otherwise: a job that snoozes or is
re-enqueued for ever stops the drain with an error instead of hanging the test."""


@dataclass(frozen=True)
class DrainedRun:
    """One run a drain made: the job, the attempt, what it came to and where the job
    went (``status`` after the run: QUEUED again for a retry or a snooze)."""

    job_id: int
    type: str
    queue: str
    attempt: int
    outcome: str
    """``succeeded``, ``failed``, ``retried``, ``snoozed`` or ``cancelled``."""
    status: str
    error_code: str | None = None
    error_detail: str | None = None


@dataclass
class DrainResult:
    """What :func:`drain` did: counts of runs by outcome, the runs in order, and the
    jobs as they stand afterwards (each once, by id)."""

    succeeded: int = 0
    failed: int = 0
    """Runs that failed with no retry left (or not retryable): the job is FAILED."""
    retried: int = 0
    """Runs that failed and will run again."""
    snoozed: int = 0
    cancelled: int = 0
    """Runs whose job was cancelled while it ran (their outcome discarded)."""
    runs: list[DrainedRun] = field(default_factory=list)
    jobs: list[Any] = field(default_factory=list)
    """The jobs that ran (``Queue.get_job`` rows, in the order they first ran)."""

    @property
    def count(self) -> int:
        """How many runs the drain made."""
        return len(self.runs)

    def __str__(self) -> str:
        return (
            f"{self.count} run(s): {self.succeeded} succeeded, {self.failed} failed, "
            f"{self.retried} retried, {self.snoozed} snoozed, {self.cancelled} cancelled"
        )


def drain(
    queue: Queue,
    registry: HandlerRegistry | Mapping[str, Handler],
    *,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    max_jobs: int | None = None,
) -> DrainResult:
    """Run the ready jobs of ``queues`` (default: every queue that has jobs) in this
    thread until none is ready; return what happened.

    ``registry`` holds the handlers (a :class:`~sqlq_orm.TaskRegistry` or any
    :class:`~sqlq_orm.HandlerRegistry`). ``with_scheduled=True`` also runs the jobs
    due later, moving the queue's :class:`~sqlq_orm.PinnedClock` forward to each
    (a queue on the database's clock is refused: pin one). ``max_jobs`` caps the runs
    (default :data:`DEFAULT_MAX_JOBS`, past which an error says a job keeps coming
    back); a drain stopped by ``max_jobs`` returns quietly.
    """
    if not isinstance(queue, Queue):
        raise InvalidInput(
            f"drain runs jobs from a sqlq_orm.Queue, got {queue!r}; for an app on an "
            "AsyncQueue, make a Queue on the same database: Queue(sqlq_orm.create_engine(url))"
        )
    handlers = registry if isinstance(registry, HandlerRegistry) else HandlerRegistry(registry)
    clock = queue.clock
    if with_scheduled and not isinstance(clock, PinnedClock):
        raise InvalidInput(
            "drain(with_scheduled=True) moves the queue's clock to the jobs due later: "
            "make the queue with clock=sqlq_orm.PinnedClock(...) (the sqlq_clock fixture)"
        )
    limit = None if max_jobs is None else validation.require_int("max_jobs", max_jobs, minimum=1)
    cap = DEFAULT_MAX_JOBS if limit is None else limit
    result = DrainResult()
    seen: dict[int, None] = {}
    while len(result.runs) < cap:
        names = _queue_names(queue, queues)
        if not names:
            break
        ran = run_ready_jobs(queue, handlers, queues=names, max_jobs=cap - len(result.runs))
        for run in ran:
            _count(result, queue, run)
            seen.setdefault(run.job_id, None)
        if ran:
            continue  # its runs may have readied jobs (children, retries due at once)
        if not with_scheduled:
            break
        due_in = queue.seconds_until_next_job(names)
        if due_in is None or due_in <= 0:
            break  # nothing later; or due, yet not claimable (a paused queue, a full key)
        assert isinstance(clock, PinnedClock)
        clock.advance(due_in)
    if limit is None and len(result.runs) >= cap:
        raise InvalidInput(
            f"drain made {cap} runs and jobs are still ready: a job keeps snoozing or "
            "enqueueing more; pass max_jobs= to stop after that many runs"
        )
    result.jobs = _jobs(queue, list(seen))
    return result


def _jobs(queue: Queue, ids: list[int]) -> list[Any]:
    """The jobs ``ids`` with their attempts and events loaded (as ``Queue.get_job``
    gives one), in a query per :data:`_IDS_PER_READ`."""
    model = queue.models.job
    found: dict[int, Any] = {}
    with queue.session() as session:
        for start in range(0, len(ids), _IDS_PER_READ):
            statement = (
                select(model)
                .where(model.id.in_(ids[start : start + _IDS_PER_READ]))
                .options(selectinload(model.attempts), selectinload(model.events))
            )
            found.update((job.id, job) for job in session.scalars(statement))
    return [found[job_id] for job_id in ids if job_id in found]


def _status(queue: Queue, job_id: int) -> str:
    jobs = queue.tables.jobs
    with queue.read() as connection:
        status = connection.execute(select(jobs.c.status).where(jobs.c.id == job_id)).scalar()
    return str(getattr(status, "value", status))


def _queue_names(queue: Queue, queues: Sequence[str] | None) -> list[str]:
    if queues is not None:
        names = [queues] if isinstance(queues, str) else list(queues)
        for name in names:
            validation.require_name("queue", name, QUEUE_MAX)
        return names
    jobs = queue.tables.jobs
    with queue.read() as connection:
        return list(
            connection.execute(
                select(jobs.c.queue)
                .where(jobs.c.status == JobStatus.QUEUED.value)
                .distinct()
                .order_by(jobs.c.queue)
            ).scalars()
        )


def _count(result: DrainResult, queue: Queue, run: InProcessRun) -> None:
    status = _status(queue, run.job_id)
    outcome = run.outcome
    if outcome is None or status == JobStatus.CANCELLED.value:
        kind = "cancelled"
    elif outcome.snoozed:
        kind = "snoozed"
    elif status == JobStatus.SUCCEEDED.value:
        kind = "succeeded"
    elif status == JobStatus.FAILED.value:
        kind = "failed"
    else:
        kind = "retried"
    setattr(result, kind, getattr(result, kind) + 1)
    result.runs.append(
        DrainedRun(
            job_id=run.job_id,
            type=run.type,
            queue=run.queue,
            attempt=run.attempt,
            outcome=kind,
            status=status,
            error_code=None if outcome is None else outcome.error_code,
            error_detail=None if outcome is None else outcome.error_detail,
        )
    )
