"""Running ready jobs one at a time in the calling thread, through the worker's own path.

:func:`run_ready_jobs` is what :func:`sqlq_orm.testing.drain` and a task registry's
inline mode run on: it claims one job at a time (so a child whose parents just
succeeded is claimed after them), builds its run as the worker does
(:func:`~sqlq_orm.worker.runs.run_for`), calls its handler through the
:class:`~sqlq_orm.worker.execution.JobExecutor` (an ``async def`` handler awaited on an
event loop kept for the whole call) and records the outcome through the
:class:`~sqlq_orm.worker.completer.Completer`, without its thread. So the middleware,
failure classification, retry policies, snoozes, results and dependencies are the
worker's, not a copy of them. There is no heartbeat: the jobs are claimed with a long
lease (:data:`IN_PROCESS_LEASE_SECONDS`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlq_orm.queue.queue import Queue
from sqlq_orm.worker.completer import Completer
from sqlq_orm.worker.execution import JobExecutor
from sqlq_orm.worker.handlers import HandlerRegistry
from sqlq_orm.worker.outcomes import Outcome
from sqlq_orm.worker.prefetch import PrefetchGauge
from sqlq_orm.worker.runs import JobRun, RunTable, run_for
from sqlq_orm.worker.stats import WorkerStats

IN_PROCESS_WORKER_ID = "sqlq-in-process"
"""The worker id the jobs run in this process are claimed under."""

IN_PROCESS_LEASE_SECONDS = 3600
"""How long a job run in this process is leased for: no heartbeat renews it, and a
handler under a debugger must not lose its job."""


@dataclass(frozen=True)
class InProcessRun:
    """One job run by :func:`run_ready_jobs`: its claim and what its handler came to
    (``outcome`` None: the run was discarded, e.g. the job was cancelled meanwhile)."""

    job_id: int
    type: str
    queue: str
    attempt: int
    outcome: Outcome | None


class _RecordingCompleter(Completer):
    """The completer without a thread, remembering the outcome it recorded last."""

    last: Outcome | None = None

    def submit(self, run: JobRun, outcome: Outcome) -> None:
        self.last = outcome
        super().submit(run, outcome)

    def _until_recorded(
        self, pending: list[tuple[JobRun, Outcome]], record: Callable[[list[Any]], None]
    ) -> None:
        # Once: a database error is the caller's to see (a test's failure), not retried
        # for as long as the in-process lease lasts.
        if pending:
            record(pending)


def run_ready_jobs(
    queue: Queue,
    handlers: HandlerRegistry,
    *,
    queues: Sequence[str],
    max_jobs: int | None = None,
    worker_id: str = IN_PROCESS_WORKER_ID,
) -> list[InProcessRun]:
    """Claim and run the ready jobs of ``queues`` one by one until none is ready (or
    ``max_jobs`` ran); return the runs in order. A job that becomes ready meanwhile (a
    retry due at once, a child whose parent succeeded) runs too."""
    runs = RunTable(capacity=1, max_abandoned=0, slot_freed=threading.Event())
    stats = WorkerStats()
    completer = _RecordingCompleter(queue, runs, stats, retry_pause=0.1, threaded=False)
    executor = JobExecutor(
        handlers, runs, stats, completer, PrefetchGauge(0, 1), worker_id=worker_id
    )
    shutdown = threading.Event()
    loop: asyncio.AbstractEventLoop | None = None
    done: list[InProcessRun] = []
    try:
        while max_jobs is None or len(done) < max_jobs:
            leased_at = time.monotonic()
            leases = queue.claim(
                worker_id,
                queues=queues,
                limit=1,
                lease_seconds=IN_PROCESS_LEASE_SECONDS,
                start=True,
            )
            if not leases:
                break
            [lease] = leases
            run = run_for(
                lease,
                handlers,
                worker_id=worker_id,
                lease_seconds=IN_PROCESS_LEASE_SECONDS,
                leased_at=leased_at,
                shutdown=shutdown,
            )
            runs.add(run)
            completer.last = None
            if run.on_loop:
                if loop is None:
                    loop = asyncio.new_event_loop()
                loop.run_until_complete(executor.execute_async(run))
            else:
                executor.execute(run)
            runs.finished(run)
            done.append(
                InProcessRun(lease.job_id, lease.type, lease.queue, lease.attempt, completer.last)
            )
    finally:
        if loop is not None:
            for cleanup in handlers.loop_cleanups:
                loop.run_until_complete(cleanup())
            loop.close()
    return done
