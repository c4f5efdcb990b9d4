"""The jobs a worker holds, the slots they take, and giving up on them.

Every job a worker claims becomes a :class:`JobRun` and takes a slot until its outcome
is recorded: waiting for a handler thread (prefetched), in its handler, or being
recorded. The :class:`RunTable` keeps the runs that hold a slot and the *abandoned*
ones whose handler may still be running (Python cannot kill a thread), and answers how
many slots are free: an abandoned run frees its slot at once, but at most
``max_abandoned`` such handlers may linger before further ones count against the slots
again (bounding the thread count at ``concurrency + max_abandoned``).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlq_orm.core.lease import Lease
from sqlq_orm.worker.handlers import AsyncJobContext, HandlerRegistry, JobContext

log = logging.getLogger("sqlq_orm.worker")


class RunState(enum.Enum):
    """Where a claimed job stands in this worker."""

    RUNNING = "running"  #: waiting for a handler thread, or in its handler; renewed
    FINISHING = "finishing"  #: the outcome is being reported; still renewed
    ABANDONED = "abandoned"  #: the worker gave up on it; its outcome is discarded
    DONE = "done"  #: the handler returned and its outcome was dealt with


@dataclass(eq=False)
class JobRun:
    """One claimed job in this worker: its lease, its handler's context, its thread."""

    lease: Lease
    context: JobContext
    state: RunState = RunState.RUNNING
    in_handler: bool = False
    """A handler thread (or task) is calling the job's handler right now."""
    detached: bool = False
    """Abandoned inside its handler: its thread (or task) left the pool's count and ends
    with the handler."""
    deadline: float | None = None
    """``time.monotonic()`` past which the job has run longer than its max runtime."""

    @property
    def on_loop(self) -> bool:
        """Whether the job's handler is an ``async def``, run as a task on the worker's
        event loop rather than on a handler thread."""
        return isinstance(self.context, AsyncJobContext)

    def describe(self) -> str:
        """``job 7 attempt 2 (send_email)``: how the log names this run."""
        return f"job {self.lease.job_id} attempt {self.lease.attempt} ({self.lease.type})"


def run_for(
    lease: Lease,
    handlers: HandlerRegistry,
    *,
    worker_id: str,
    lease_seconds: int,
    leased_at: float,
    shutdown: threading.Event,
) -> JobRun:
    """A claimed job as a run: its context (an :class:`AsyncJobContext` for an ``async
    def`` handler) and its max-runtime deadline, counted from ``leased_at``
    (``time.monotonic()`` before the claim was sent: never later than the database's)."""
    context_type = AsyncJobContext if handlers.is_coroutine(lease.type) else JobContext
    context = context_type(
        job_id=lease.job_id,
        attempt=lease.attempt,
        type=lease.type,
        queue=lease.queue,
        payload=None,  # decoded in the job's thread, where a corrupt one fails the job
        payload_ref=lease.payload_ref,
        worker_id=worker_id,
        retries_left=lease.retries_left,
        retry_count=lease.retry_count,
        lease_seconds=handlers.lease_seconds_of(lease.type) or lease_seconds,
        leased_at=leased_at,
        shutdown=shutdown,
        columns=lease.columns,
    )
    run = JobRun(lease=lease, context=context)
    if lease.max_runtime_seconds is not None and lease.started:  # else from its start
        run.deadline = leased_at + lease.max_runtime_seconds
        context._set_deadline(run.deadline)  # ctx.time_left
    return run


def count_stuck(runs: list[JobRun]) -> str:
    """``2 handler threads``, ``1 async task`` or ``1 handler thread and 2 async tasks``:
    what is still running in handlers the worker gave up on."""
    threads = sum(1 for run in runs if not run.on_loop)
    tasks = len(runs) - threads
    parts = [
        f"{count} {noun}{'s' if count != 1 else ''}"
        for count, noun in ((threads, "handler thread"), (tasks, "async task"))
        if count
    ]
    return " and ".join(parts)


def describe_stuck(run: JobRun) -> str:
    """A stuck run for the log: its job, and whether a thread or a task holds it."""
    if run.on_loop:
        return f"{run.describe()}: an async task that ignored its cancellation"
    return f"{run.describe()}: a handler thread"


class RunTable:
    """The runs holding a slot, the abandoned ones, and the free slots. Thread-safe.

    ``capacity`` is how many runs may hold a slot at once (the handler threads plus the
    prefetched jobs). ``slot_freed`` is set whenever a run gives its slot back, so the
    claim loop can wait on it instead of polling. ``handler_abandoned`` is called (with
    the table's lock held) for a run given up on while its handler runs, within the
    ``max_abandoned`` budget, so the handler pool can put a fresh thread in place of the
    one that is stuck with it.
    """

    def __init__(self, capacity: int, max_abandoned: int, slot_freed: threading.Event):
        self.capacity = capacity
        self.max_abandoned = max_abandoned
        self.slot_freed = slot_freed
        self.handler_abandoned: Callable[[JobRun], None] = lambda run: None
        self._lock = threading.Lock()
        self._runs: dict[int, JobRun] = {}  # jobs holding a slot (RUNNING / FINISHING)
        self._abandoned: list[JobRun] = []  # given up on inside their handler

    def add(self, run: JobRun) -> None:
        """``run`` takes a slot."""
        with self._lock:
            self._runs[run.lease.job_id] = run

    def add_many(self, runs: list[JobRun]) -> None:
        """Each of ``runs`` (a claim's batch) takes a slot."""
        with self._lock:
            for run in runs:
                self._runs[run.lease.job_id] = run

    def held(self) -> list[JobRun]:
        """The runs holding a slot right now (a snapshot)."""
        with self._lock:
            return list(self._runs.values())

    def job_ids(self) -> list[int]:
        """Ids of the jobs holding a slot, sorted."""
        with self._lock:
            return sorted(self._runs)

    def free_slots(self) -> int:
        """Slots a claim may fill: ``capacity`` less held runs and excess lingerers."""
        with self._lock:
            self._abandoned = [r for r in self._abandoned if r.in_handler]
            lingering = max(0, len(self._abandoned) - self.max_abandoned)
            return max(0, self.capacity - len(self._runs) - lingering)

    def over_budget(self) -> list[JobRun]:
        """The abandoned runs still alive, if more than ``max_abandoned``; else none.

        Past that budget every further stuck thread holds a slot for good: the worker
        can only get its capacity back by being restarted.
        """
        with self._lock:
            self._abandoned = [r for r in self._abandoned if r.in_handler]
            return list(self._abandoned) if len(self._abandoned) > self.max_abandoned else []

    def begin_handler(self, run: JobRun) -> bool:
        """A handler thread takes ``run``: True, unless it was given up on meanwhile."""
        with self._lock:
            if run.state is not RunState.RUNNING:
                return False
            run.in_handler = True
            return True

    def end_handler(self, run: JobRun) -> None:
        """``run``'s handler returned (or raised)."""
        with self._lock:
            run.in_handler = False

    def begin_finishing(self, run: JobRun) -> str | None:
        """Move a RUNNING run to FINISHING; else return why its outcome is discarded."""
        with self._lock:
            reason = run.context.stop_reason
            if run.state is RunState.RUNNING and reason is None:
                run.state = RunState.FINISHING
                return None
        return reason or "lease lost"

    def finished(self, run: JobRun) -> None:
        """The run's thread is done with it: give its slot back (if it still had one)."""
        self.finished_many([run])

    def finished_many(self, runs: list[JobRun]) -> None:
        """:meth:`finished` for a batch: one wake-up of the claim loop for all of them
        (a wake-up per job made it wake, look and sleep again once per job)."""
        with self._lock:
            for run in runs:
                if self._runs.get(run.lease.job_id) is run:
                    del self._runs[run.lease.job_id]
                if run.state is not RunState.ABANDONED:
                    run.state = RunState.DONE
        self.slot_freed.set()

    def abandon(self, run: JobRun, reason: str, *, runtime_exceeded: bool = False) -> bool:
        """Give up on a RUNNING job: stop it, free its slot; False if it was not RUNNING."""
        with self._lock:
            return self._abandon(run, reason, runtime_exceeded=runtime_exceeded)

    def abandon_all_running(self, reason: str, runs: list[JobRun] | None = None) -> list[JobRun]:
        """Give up on every RUNNING job (or those of ``runs``) at once; return them."""
        with self._lock:
            candidates = list(self._runs.values()) if runs is None else runs
            running = [run for run in candidates if run.state is RunState.RUNNING]
            for run in running:
                self._abandon(run, reason)
        return running

    def _abandon(self, run: JobRun, reason: str, *, runtime_exceeded: bool = False) -> bool:
        if run.state is not RunState.RUNNING:
            return False
        run.context._give_up(reason, runtime_exceeded=runtime_exceeded)
        run.state = RunState.ABANDONED
        self._runs.pop(run.lease.job_id, None)
        if run.in_handler:
            self._abandoned.append(run)
            lingering = sum(1 for r in self._abandoned if r.in_handler)
            if lingering <= self.max_abandoned:
                # Within the budget a fresh thread takes its place; past it, the stuck
                # thread keeps its place in the pool (the thread count stays bounded).
                self.handler_abandoned(run)
        self.slot_freed.set()
        log.warning("%s abandoned: %s", run.describe(), reason)
        return True
