"""What queue calls take and return: JobSpec, EnqueuedJob, SweepResult and JobFailure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from sqlq_orm.core.lease import Lease


class EnqueuedJob(int):
    """A job that an enqueue call returned: the job's id, with whether the call made it.

    ``enqueue`` returns one; ``enqueue_many``, ``enqueue_chain`` and ``enqueue_fan_in``
    return a list of them. It *is* the id (an ``int``: compare it, store it, pass it to
    ``cancel``, ``get_job`` or ``depends_on``, put it in JSON), and carries ``id`` (the
    plain ``int``) and ``created``: False when a ``dedupe_key`` matched an unfinished
    job, whose id it then is. Immutable; equal to any int of the same value.
    """

    created: bool

    def __new__(cls, id: int, created: bool = True) -> EnqueuedJob:
        job = super().__new__(cls, id)
        object.__setattr__(job, "created", bool(created))
        return job

    @property
    def id(self) -> int:
        """The job's id, as a plain ``int``."""
        return int(self)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"EnqueuedJob is immutable (cannot set {name!r})")

    def __getnewargs__(self) -> tuple[int, bool]:  # type: ignore[override]
        return int(self), self.created

    def __repr__(self) -> str:
        return f"EnqueuedJob(id={int(self)}, created={self.created})"

    def __str__(self) -> str:  # f"job {job}" reads as it did with a plain id
        return int.__repr__(self)

    def __format__(self, spec: str) -> str:
        return int(self).__format__(spec)


@dataclass(frozen=True)
class JobSpec:
    """One job for :meth:`Queue.enqueue_many`; fields mean what they mean in ``enqueue``."""

    type: str
    payload: Any = None
    queue: str = "default"
    priority: int = 0
    run_at: Any = None
    delay: float | None = None
    max_retries: int | None = None
    max_runtime_seconds: int | None = None
    payload_ref: str | None = None
    dedupe_key: str | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    rate_key: str | None = None
    dedupe_period: int | None = None
    columns: Mapping[str, Any] = field(default_factory=dict)
    """Values for columns the host app added to its job model."""
    depends_on: Sequence[int] = ()
    """Ids of the jobs this one waits for (see :meth:`Queue.enqueue`)."""
    on_parent_failure: str = "cancel"
    """What this job does if a parent ends FAILED or CANCELLED: ``cancel`` or ``run``."""

    @classmethod
    def from_mapping(cls, job: Mapping[str, Any]) -> JobSpec:
        """A spec from a mapping: JobSpec's fields by name, any other key an app column."""
        known = {f.name for f in fields(cls)} - {"columns"}
        columns = {**job.get("columns", {}), **{k: v for k, v in job.items() if k not in known}}
        columns.pop("columns", None)
        return cls(**{k: v for k, v in job.items() if k in known}, columns=columns)


@dataclass(frozen=True)
class SweepResult:
    """What one :meth:`Queue.sweep` did."""

    expired: int = 0
    """Jobs whose lease had expired (their worker is gone or stuck)."""
    timed_out: int = 0
    """RUNNING jobs past their max runtime."""
    requeued: int = 0
    """Of those, how many went back to QUEUED for another attempt."""
    failed: int = 0
    """Of those, how many ended FAILED (retries spent)."""

    @property
    def total(self) -> int:
        return self.expired + self.timed_out

    def __add__(self, other: SweepResult) -> SweepResult:
        return SweepResult(
            self.expired + other.expired,
            self.timed_out + other.timed_out,
            self.requeued + other.requeued,
            self.failed + other.failed,
        )


@dataclass(frozen=True)
class JobFailure:
    """One failed run to record with :meth:`~sqlq_orm.Queue.fail_many`."""

    lease: Lease
    error_code: str
    error_detail: str | None = None
    retryable: bool = True
    retry_in: float | None = None
    """Seconds before the retry (if there is one), instead of the queue's retry policy."""


@dataclass(frozen=True)
class ScheduleState:
    """One row of the schedules table, as :meth:`Queue.list_schedules` returns it."""

    name: str
    type: str
    queue: str
    cron: str
    timezone: str
    last_slot_at: int | None
    """The newest slot a job was enqueued for (epoch seconds), None before the first."""
    next_slot_at: int
    """The next slot (epoch seconds): the schedule enqueues once the clock reaches it."""
    updated_at: int
    paused_at: int | None = None
    """When an operator paused it (:meth:`Queue.pause_schedule`); None while it runs."""


@dataclass(frozen=True)
class TickResult:
    """What one scheduler tick (:meth:`Queue.enqueue_due_slots`) did."""

    due: int = 0
    """Schedules this process knows that were due by the queue's clock."""
    claimed: int = 0
    """Of those, how many this process advanced (another scheduler took the rest)."""
    job_ids: tuple[int, ...] = ()
    """The jobs enqueued, one per slot."""
    skipped: int = 0
    """Schedules that passed over older missed slots (their ``missed`` policy)."""


@dataclass(frozen=True)
class QueueState:
    """One queue's operator state, as :meth:`Queue.queue_states` returns it."""

    name: str
    paused: bool
    paused_at: int | None
    """When it was paused (epoch seconds), None while it runs."""
    changed_by: str | None
    """Who last paused or resumed it, or changed its rate limit."""
    updated_at: int
    rate_limit: int | None = None
    """At most this many job starts per ``rate_period`` seconds, per ``rate_key``
    (None: no limit; see :meth:`Queue.set_rate_limit`)."""
    rate_period: int | None = None


@dataclass(frozen=True)
class BulkResult:
    """What a bulk action (:meth:`Queue.cancel_jobs`, ``retry_jobs``, ``discard_jobs``)
    did, or with ``dry_run`` would do."""

    action: str
    dry_run: bool
    matched: int
    """Jobs the filter selected among those the action applies to."""
    acted: int
    """Of those, the jobs cancelled, requeued or deleted (0 in a dry run)."""
    skipped: int
    """Matched, but another process changed them first (e.g. a worker finished one
    being cancelled, or another unfinished job holds a retried job's dedupe key)."""
    dependents: int
    """Other jobs cancelled because they waited for one acted on (``depends_on``);
    not predicted by a dry run."""
    batches: int
    complete: bool
    """False when ``max_batches`` stopped the run; running it again goes on."""
