"""The worker: claims jobs from a :class:`~sqlq_orm.queue.queue.Queue` and runs handlers.

What lives here, one concern per module:

- :mod:`~sqlq_orm.worker.handlers`: what handler authors see, :class:`HandlerRegistry`
  and :class:`JobContext`;
- :mod:`~sqlq_orm.worker.runtime`: :class:`Worker`, the claim loop and shutdown, which
  composes the rest;
- :mod:`~sqlq_orm.worker.runs`: the jobs a worker holds, their slots, abandoning them;
- :mod:`~sqlq_orm.worker.execution`: one job's thread: call its handler, report the
  outcome;
- :mod:`~sqlq_orm.worker.heartbeat`: the heartbeat thread (lease renewal, liveness,
  self-fencing);
- :mod:`~sqlq_orm.worker.completer`: successes recorded in groups;
- :mod:`~sqlq_orm.worker.outcomes`: how a handler's return or exception is classified;
- :mod:`~sqlq_orm.worker.sweeping`: the sweep schedule and a stand-alone sweeper loop;
- :mod:`~sqlq_orm.worker.stopping`: stop requests (SIGTERM/SIGINT or a call) and
  waits that heed them;
- :mod:`~sqlq_orm.worker.stats`: the worker's counters.

The worker never writes SQL: it only calls ``Queue`` methods. It may import
:mod:`sqlq_orm.schema`, :mod:`sqlq_orm.core`, the :mod:`sqlq_orm.db` types and
:mod:`sqlq_orm.queue`; never :mod:`sqlq_orm.cli` or :mod:`sqlq_orm.ops` (they build on
the worker, not the other way round). Everything logs to ``"sqlq_orm.worker"``.
"""

from sqlq_orm.worker.handlers import Handler, HandlerRegistry, JobContext, load_registry
from sqlq_orm.worker.outcomes import Outcome, outcome_of_exception
from sqlq_orm.worker.runtime import DEFAULT_GRACE_PERIOD, Worker, default_worker_id
from sqlq_orm.worker.stats import WorkerStats
from sqlq_orm.worker.sweeping import DEFAULT_SWEEP_INTERVAL, SweepSchedule, run_sweeper

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_SWEEP_INTERVAL",
    "Handler",
    "HandlerRegistry",
    "JobContext",
    "Outcome",
    "SweepSchedule",
    "Worker",
    "WorkerStats",
    "default_worker_id",
    "load_registry",
    "outcome_of_exception",
    "run_sweeper",
]
