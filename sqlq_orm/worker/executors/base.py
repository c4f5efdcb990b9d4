"""The executor seam: where a worker's claimed jobs run, behind one small interface.

The worker (the parent) keeps everything about a job but running its handler: the
claim, the prefetch, the heartbeats, the fenced finishes in groups, the sweeps, the
wake-ups and shutdown. An :class:`Executor` only *runs* jobs: it is handed a claim's
runs (:meth:`Executor.submit`), starts each one when a slot is free (the run's
``in_handler`` turning true is "accepted": the handler really started), tells the
worker how each ended by handing the outcome over (:meth:`RunServices.hand_over`),
and stops a run when asked (:meth:`Executor.detach`, :meth:`Executor.stop_at_deadline`).

Two implementations, chosen once when the worker starts: threads
(:mod:`~sqlq_orm.worker.executors.threads`, today's pool) and child processes
(:mod:`~sqlq_orm.worker.executors.processes`). No other module asks which one it has.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from sqlq_orm.core import validation
from sqlq_orm.worker.completer import Completer
from sqlq_orm.worker.handlers import HandlerRegistry
from sqlq_orm.worker.outcomes import Outcome
from sqlq_orm.worker.prefetch import PrefetchGauge
from sqlq_orm.worker.runs import JobRun, RunTable
from sqlq_orm.worker.starting import Starter
from sqlq_orm.worker.stats import WorkerStats

log = logging.getLogger("sqlq_orm.worker")


@dataclass(frozen=True)
class PoolLimits:
    """When a process pool replaces a child that did nothing wrong (recycling).

    ``max_jobs_per_child``: after that many jobs; ``max_memory_per_child``: once the
    resident memory the child added at its peak (over what it shared with the worker
    when forked) passes that many megabytes, checked after each job
    (the job in hand finishes first, as in Celery). None: no limit. A thread pool has
    no children and ignores both.
    """

    max_jobs_per_child: int | None = None
    max_memory_per_child: int | None = None

    @classmethod
    def checked(cls, max_jobs_per_child: object, max_memory_per_child: object) -> PoolLimits:
        """The limits, each None or an integer >= 1 (else ``InvalidInput``)."""
        return cls(
            validation.optional_int("max_jobs_per_child", max_jobs_per_child, minimum=1),
            validation.optional_int("max_memory_per_child", max_memory_per_child, minimum=1),
        )


@dataclass(frozen=True)
class RunServices:
    """What an executor is given by the worker: the parent-side bookkeeping of runs."""

    handlers: HandlerRegistry
    runs: RunTable
    stats: WorkerStats
    completer: Completer
    prefetch: PrefetchGauge
    worker_id: str
    concurrency: int
    limits: PoolLimits = PoolLimits()
    starter: Starter | None = None
    """Starts a prefetched (CLAIMED) run just before its handler runs (worker/starting.py)."""

    def hand_over(self, run: JobRun, outcome: Outcome) -> None:
        """Record ``outcome`` for ``run`` through the completer (fenced, in a group),
        unless the worker gave up on the run meanwhile: then it is discarded."""
        reason = self.runs.begin_finishing(run)
        if reason is not None:
            self.stats.add("discarded")
            log.warning("%s: outcome discarded (%s)", run.describe(), reason)
            self.runs.finished(run)
            return
        self.completer.submit(run, outcome)


class Executor(Protocol):
    """Runs the handlers of claimed jobs: "start this run, tell me how it ended, stop
    it by its deadline". Thread-safe."""

    kind: str
    """``thread`` or ``process``: what ``sqlq stats`` and ``/metrics`` call the pool."""

    def submit(self, runs: list[JobRun]) -> None:
        """Queue a claim's ``runs`` in order; each starts when a slot is free."""

    def waiting(self) -> int:
        """How many submitted runs have not started yet."""

    def take_waiting(self) -> list[JobRun]:
        """Remove and return the runs that have not started (at shutdown)."""

    def detach(self, run: JobRun) -> None:
        """The worker gave up on ``run`` inside its handler: free its slot for the
        next run (a thread is left to end on its own; a child process is ended).
        Called with the run table's lock held."""

    def stop_at_deadline(self, run: JobRun) -> bool:
        """``run`` is past its max runtime: stop it and record ``TIMEOUT:MAX_RUNTIME``
        now; False if this executor cannot, and the worker gives up on the run instead."""

    def info(self) -> dict[str, Any]:
        """What operators see of the pool (kind, children, recycles, crashes, kills)."""

    def close(self) -> None:
        """No more runs: let the slots end once nothing waits (does not wait long)."""
