"""The worker: a pipeline that claims jobs in batches, runs their handlers on a pool
(threads, or child processes: :mod:`~sqlq_orm.worker.executors`, chosen with
``pool=``), records outcomes in groups, heartbeats, and stops gracefully.

One worker process has these threads (the process pool's children are described in
:mod:`~sqlq_orm.worker.executors.processes`):

- the **main thread** runs :meth:`Worker.run`, the *fetcher*: it claims as many jobs
  as there are free slots in one statement (straight into RUNNING), the slots being
  ``concurrency`` handler threads plus ``prefetch`` jobs waiting for one, so a
  handler thread never waits on a round trip; and it runs the sweeper on a jittered
  interval so a dead worker's jobs come back without anyone watching;
- ``concurrency`` **handler threads** (or, with ``pool="process"``, one thread per
  child process) call each job's handler with no transaction open and hand the
  outcome over;
- one **completer thread** (:mod:`~sqlq_orm.worker.completer`) records the outcomes
  in groups: every success of a batch in one fenced statement, every failure in one
  transaction, attempt closes and events as multi-row inserts;
- with ``async def`` handlers, one **event loop thread**
  (:mod:`~sqlq_orm.worker.aio`) runs them as tasks, many at once; threads and tasks
  together run at most ``concurrency`` handlers;
- one **heartbeat thread** (:mod:`~sqlq_orm.worker.heartbeat`) renews every lease
  this worker holds with one statement every ``heartbeat_interval`` seconds, and
  upserts the worker's liveness row.

The worker never writes SQL; it only calls :class:`~sqlq_orm.queue.queue.Queue` methods.

**Giving up on a job.** A job is *abandoned* (its outcome will be discarded, its
context's ``should_stop`` turns true) when a heartbeat is refused (``LeaseLost``: the
job was reclaimed, cancelled or finished elsewhere), when the job runs past its max
runtime (noticed at the job's own deadline, or a heartbeat refused with
``MaxRuntimeExceeded``: the worker stops renewing and the sweeper ends it with
``TIMEOUT:MAX_RUNTIME``), or when no heartbeat got through for a whole lease
(the database is locked or down: the worker *self-fences*, measured with
``time.monotonic()`` from the last heartbeat that succeeded, and never reports
success for that job). Python cannot kill a thread, so an abandoned handler may keep
running (one past its max runtime is interrupted first, :mod:`~sqlq_orm.worker.interrupt`:
a Python loop stops, a call stuck in C does not); its slot is freed at once so one hung
handler cannot starve the worker, and a fresh handler thread takes its place, and at
most ``max_abandoned`` such threads may linger before abandoned jobs start holding on
to their slots (bounding the thread count at ``concurrency + max_abandoned``; see
:mod:`~sqlq_orm.worker.runs`). Handler threads are daemons: a hung handler never keeps
the process from exiting.

**Stuck handlers.** Once more abandoned threads are alive than ``max_abandoned``,
the worker logs an ERROR naming the budget and the stuck jobs, shuts down gracefully
(deregistering, so ``sqlq stats`` no longer lists it as alive) and :meth:`Worker.run`
raises :class:`~sqlq_orm.errors.HandlersStuck`; ``sqlq worker`` then exits with status
3 so that a supervisor restarts it, the only way to reclaim a Python thread.

**Shutdown.** On SIGTERM or SIGINT (or :meth:`Worker.request_stop`) the worker stops
claiming, gives the prefetched jobs no handler has started back to QUEUED at once,
lets running jobs finish for up to ``grace_period`` seconds, releases the rest back to
QUEUED (RELEASED, no retry spent) and deregisters. A second signal skips
the grace period.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.core import validation
from sqlq_orm.core.lease import Lease
from sqlq_orm.db.engine import require_shared_database
from sqlq_orm.errors import HandlersStuck, InvalidInput
from sqlq_orm.queue.queue import Queue
from sqlq_orm.schema.mixins import QUEUE_MAX, WORKER_ID_MAX
from sqlq_orm.worker.completer import Completer
from sqlq_orm.worker.executors import (
    Executor,
    PoolLimits,
    RunServices,
    require_pool,
    start_executor,
)
from sqlq_orm.worker.handlers import Handler, HandlerRegistry
from sqlq_orm.worker.heartbeat import Heartbeat, once_more_if_disconnected
from sqlq_orm.worker.outcomes import (
    INVALID_ERROR_CODE,
    INVALID_RESULT,
    NETWORK_UNHANDLED,
    TIMEOUT_UNHANDLED,
    Outcome,
    one_line,
    outcome_of_exception,
)
from sqlq_orm.worker.prefetch import PrefetchGauge
from sqlq_orm.worker.releasing import release_runs
from sqlq_orm.worker.runs import JobRun, RunTable, count_stuck, describe_stuck, run_for
from sqlq_orm.worker.scheduling import SchedulerThread
from sqlq_orm.worker.starting import Starter, start_at_most
from sqlq_orm.worker.stats import WorkerStats
from sqlq_orm.worker.stopping import StopRequests
from sqlq_orm.worker.sweeping import DEFAULT_SWEEP_INTERVAL, SweepSchedule, run_sweeper, sweep_once

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_SWEEP_INTERVAL",
    "INVALID_ERROR_CODE",
    "INVALID_RESULT",
    "NETWORK_UNHANDLED",
    "TIMEOUT_UNHANDLED",
    "Outcome",
    "SweepSchedule",
    "Worker",
    "WorkerStats",
    "default_worker_id",
    "outcome_of_exception",
    "run_sweeper",
]

log = logging.getLogger("sqlq_orm.worker")

DEFAULT_GRACE_PERIOD = 30.0
DEFAULT_PREFETCH = 100

_DUE_FLOOR = 0.1  # shortest idle wait when a queued job is already due but was not claimed


def default_worker_id() -> str:
    """``hostname:pid:random``: unique per process, and says where to look."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Runs the handlers of jobs claimed from ``queue``, ``concurrency`` at a time.

    ``handlers`` is a :class:`~sqlq_orm.worker.handlers.HandlerRegistry` (or a mapping of job
    type to function). ``lease_seconds`` is how long each claim lasts without a
    heartbeat; heartbeats go out every ``heartbeat_interval`` seconds (default a third
    of the lease). ``prefetch`` (default 100) is how many claimed jobs may at most wait
    for a free handler thread, so the threads never wait on a claim's round trip and
    claims come in large batches; the worker prefetches only as many as its threads
    reach within a quarter of a second at the handlers' recent pace (none for slow
    jobs, whose lease and max runtime would otherwise start counting long before they
    run; see :mod:`~sqlq_orm.worker.prefetch`). Prefetched jobs go back to the queue at
    once on shutdown; those of a worker that is killed come back when their lease
    expires, with no retry spent when its handlers average 50 ms or more (its prefetch
    is then started job by job, see :mod:`~sqlq_orm.worker.starting`). 0 claims only
    for idle threads.
    ``poll_interval`` is how long an idle worker waits before asking
    again, at most: it wakes at once when jobs are enqueued (in this process, or in
    another through the database: PostgreSQL ``NOTIFY``, SQLite ``PRAGMA
    data_version``), and when a scheduled job falls due. ``sweep_interval`` (seconds,
    or a ``(low, high)`` range to draw from; None to never sweep) schedules the
    in-worker sweeper. With ``burst=True`` the worker exits once nothing is ready and
    nothing runs; it sweeps first thing and again on its way out (unless
    ``sweep_interval`` is None). The registry's recurring schedules
    (``registry.periodic``) are ticked in a thread unless ``run_schedules=False``
    (:mod:`sqlq_orm.worker.scheduling`). ``pool="process"`` runs each job in a child
    process, replaced after ``max_jobs_per_child`` jobs or past ``max_memory_per_child``
    MB (:mod:`~sqlq_orm.worker.executors`; docs/explanation/saving-workers.md).
    See the module docs for how jobs are abandoned and how shutdown works.
    """

    def __init__(
        self,
        queue: Queue,
        handlers: HandlerRegistry | Mapping[str, Handler],
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 1,
        prefetch: int | None = None,
        lease_seconds: int = 30,
        heartbeat_interval: float | None = None,
        poll_interval: float = 1.0,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        worker_id: str | None = None,
        sweep_interval: float | tuple[float, float] | None = DEFAULT_SWEEP_INTERVAL,
        max_abandoned: int | None = None,
        burst: bool = False,
        install_signal_handlers: bool = True,
        run_schedules: bool = True,
        pool: str = "thread",
        max_jobs_per_child: int | None = None,
        max_memory_per_child: int | None = None,
    ) -> None:
        require_shared_database(queue.engine, "a Worker (one thread per job, plus heartbeats)")
        self.queue = queue
        self.handlers = (
            handlers if isinstance(handlers, HandlerRegistry) else HandlerRegistry(handlers)
        )
        self._own_leases: dict[str, int] | None = None
        self.queues = [queues] if isinstance(queues, str) else list(queues)
        if not self.queues:
            raise InvalidInput("queues must name at least one queue, got none")
        for name in self.queues:
            validation.require_name("queue", name, QUEUE_MAX)
        self.concurrency = validation.require_int("concurrency", concurrency, minimum=1)
        self.prefetch = validation.require_int(
            "prefetch", DEFAULT_PREFETCH if prefetch is None else prefetch, minimum=0
        )
        self.lease_seconds = validation.lease_seconds(lease_seconds)
        self.heartbeat_interval = (
            self.lease_seconds / 3 if heartbeat_interval is None else float(heartbeat_interval)
        )
        if not 0 < self.heartbeat_interval < self.lease_seconds:
            raise InvalidInput(
                f"heartbeat_interval must be > 0 and shorter than the lease "
                f"({self.lease_seconds}s), got {heartbeat_interval!r}"
            )
        # A job type with a shorter lease of its own (a task's lease=) is renewed
        # within a third of it too: one round renews every lease the worker holds.
        shortest = min(self.handlers.lease_lengths.values(), default=self.lease_seconds)
        self.heartbeat_interval = min(self.heartbeat_interval, shortest / 3)
        if not poll_interval > 0:
            raise InvalidInput(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
        self.poll_interval = float(poll_interval)
        if not grace_period >= 0:
            raise InvalidInput(f"grace_period must be >= 0 seconds, got {grace_period!r}")
        self.grace_period = float(grace_period)
        self.worker_id = validation.require_name(
            "worker_id", worker_id or default_worker_id(), WORKER_ID_MAX
        )
        self.sweep_schedule = None if sweep_interval is None else SweepSchedule(sweep_interval)
        self.max_abandoned = validation.require_int(
            "max_abandoned", self.concurrency if max_abandoned is None else max_abandoned, minimum=0
        )
        self.burst = burst
        self.pool = require_pool(pool)
        self.pool_limits = PoolLimits.checked(max_jobs_per_child, max_memory_per_child)
        capacity = self.concurrency + self.prefetch
        self._prefetch = PrefetchGauge(self.prefetch, self.concurrency)
        self.install_signal_handlers = install_signal_handlers
        self.stats = WorkerStats()

        self._stop = StopRequests(self.grace_period)
        self._next_sweep: float | None = None
        self._stuck: list[JobRun] = []  # set when abandoned threads spent the budget
        self._runs = RunTable(capacity, self.max_abandoned, slot_freed=self._stop.wake)
        self._completer: Completer | None = None  # started by run()
        self._pool: Executor | None = None  # started by run(): threads or processes
        # The registry's recurring schedules (registry.periodic), unless run_schedules=False.
        self._scheduling = SchedulerThread.for_worker(
            queue, self.handlers if run_schedules else HandlerRegistry(), self.worker_id
        )
        self._heartbeat = Heartbeat(
            queue,
            self._runs,
            lease_seconds=self.lease_seconds,
            interval=self.heartbeat_interval,
            touch_liveness=self._touch_liveness,
        )

    # ------------------------------------------------------------------ control

    def request_stop(self, *, immediate: bool = False) -> None:
        """Stop claiming and shut down (gracefully unless ``immediate``). Thread-safe."""
        self._stop.request(immediate=immediate)

    @property
    def running_jobs(self) -> list[int]:
        """Ids of the jobs this worker currently holds a slot for."""
        return self._runs.job_ids()

    @property
    def pool_info(self) -> dict[str, Any]:
        """The pool's kind and, for processes, its children (pid, jobs so far),
        recycles, crashes and kills at deadline, as ``sqlq stats`` shows them."""
        return {"kind": self.pool} if self._pool is None else self._pool.info()

    def run(self) -> WorkerStats:
        """Register, work until asked to stop (or idle, in burst mode), shut down.

        Raises if the worker cannot register (database unreachable, tables missing), or
        :class:`~sqlq_orm.errors.ModelsMissColumns` if the job table has columns the
        queue's models do not map (its handlers' ``ctx.columns`` would lack them);
        after that, database errors are logged and retried, never fatal. Raises
        :class:`~sqlq_orm.errors.HandlersStuck` after shutting down if stuck handler
        threads used up the ``max_abandoned`` budget.
        """
        self.queue.check_schema(refuse_unmapped=True)
        self._register()
        # Read at start, as the heartbeat interval is: tasks are declared by then.
        self._own_leases = self.handlers.lease_lengths or None
        log.info(
            "worker %s started: queues=%s concurrency=%d lease=%ds heartbeat=%.1fs handlers=%s",
            self.worker_id, ",".join(self.queues), self.concurrency, self.lease_seconds,
            self.heartbeat_interval, ",".join(self.handlers.types) or "(none)",
        )  # fmt: skip
        try:
            self.handlers.worker_starting(self.queue)
        except Exception:  # noqa: BLE001 - a start-up check must not keep a worker down
            log.exception("the handler registry's start-up check failed; starting anyway")
        self._heartbeat.start()
        self._scheduling.start()
        self._completer = Completer(
            self.queue, self._runs, self.stats, retry_pause=min(1.0, self.heartbeat_interval)
        )
        self._pool = start_executor(
            self.pool,
            RunServices(
                self.handlers,
                self._runs,
                self.stats,
                self._completer,
                self._prefetch,
                worker_id=self.worker_id,
                concurrency=self.concurrency,
                limits=self.pool_limits,
                starter=Starter(self.queue, self._runs, self._heartbeat.watch_deadline),
            ),
        )
        self._runs.handler_abandoned = self._pool.detach
        self._heartbeat.stop_at_deadline = self._pool.stop_at_deadline
        # A burst worker leaves once idle: it needs no listener for other processes.
        arrivals = self.queue.watch_for_jobs(
            self.queues, self._stop.jobs_ready, listen=not self.burst
        )
        restore = self._stop.signals.install() if self.install_signal_handlers else lambda: None
        try:
            self._claim_loop()
        finally:
            try:
                arrivals.close()
                self._shut_down()
            finally:
                restore()
        if self._stuck:
            raise HandlersStuck(
                self.worker_id,
                self.max_abandoned,
                [describe_stuck(run) for run in self._stuck],
                what=count_stuck(self._stuck),
            )
        return self.stats

    # ---------------------------------------------------------------- main loop

    def _claim_loop(self) -> None:
        if self.sweep_schedule is not None:
            # A burst worker may be the only one running: it sweeps before it decides
            # there is nothing to do, or a dead worker's jobs would never come back.
            first_delay = 0.0 if self.burst else self.sweep_schedule.next_delay()
            self._next_sweep = time.monotonic() + first_delay
        while not self._stop.poll_signals():
            # Cleared before claiming: a job enqueued during the claim still wakes us.
            self._stop.wake.clear()
            self._stop.jobs_ready.clear()
            self._maybe_sweep()
            allowed = self._prefetch.allowed()
            free = self._runs.free_slots() - (self.prefetch - allowed)
            if self._stop_if_stuck():
                return
            if free <= 0:
                self._stop.wait(self._stop.wake, self.poll_interval)
                continue
            if free < (self.concurrency + allowed) // 2 and self._pool_waiting():
                # Jobs still wait for a thread: claim when half the slots are free,
                # fewer and larger claims, still before the threads run dry.
                self._stop.wait(self._stop.wake, self.poll_interval)
                continue
            leased_at = time.monotonic()
            # Whether runs held slots as the claim looked: one recorded since (a snooze,
            # a retry due at once) may have queued a job that this claim did not see.
            busy = bool(self.running_jobs)
            try:
                leases = self.queue.claim(
                    self.worker_id,
                    queues=self.queues,
                    limit=free,
                    lease_seconds=self.lease_seconds,
                    start=True,
                    # Slow handlers: the prefetch stays CLAIMED until its handler is
                    # about to run (worker/starting.py).
                    start_at_most=start_at_most(
                        self._prefetch, self.concurrency, len(self.running_jobs)
                    ),
                    # Tasks with lease= are held that long from the claim on.
                    lease_seconds_by_type=self._own_leases,
                )
            except SQLAlchemyError as exc:
                log.warning(
                    "claim failed (%s); trying again in %.1fs",
                    one_line(str(exc)),
                    self.poll_interval,
                )
                self._stop.wait(self._stop.stopping, self.poll_interval)
                continue
            if leases:
                assert self._pool is not None
                self._pool.submit(self._runs_for(leases, leased_at))
            if len(leases) < free:
                if self.burst and not leases and not busy:
                    log.info("nothing left to do (burst mode)")
                    return
                # Nothing more is ready: ask again when jobs arrive, when the next
                # queued one is due, or after the poll interval; not on every freed slot.
                # A burst worker asks again as a slot frees too: it leaves once its
                # last jobs are recorded, not a poll interval later.
                ready = self._stop.wake if self.burst else self._stop.jobs_ready
                self._stop.wait(ready, self._idle_wait())

    def _pool_waiting(self) -> int:
        return 0 if self._pool is None else self._pool.waiting()

    def _idle_wait(self) -> float:
        """How long an idle worker sleeps: until the next queued job is due (by the
        queue's clock) if that is sooner than the poll interval."""
        try:
            due = self.queue.seconds_until_next_job(self.queues)
        except SQLAlchemyError as exc:
            log.debug("could not read when the next job is due (%s)", one_line(str(exc)))
            return self.poll_interval
        if due is None:
            return self.poll_interval
        return min(self.poll_interval, max(float(due), _DUE_FLOOR))

    def _stop_if_stuck(self) -> bool:
        """Stop for good once stuck threads spent the budget: only a restart helps then."""
        stuck = self._runs.over_budget()
        if not stuck:
            return False
        self._stuck = stuck
        log.error(
            "worker %s: %s it gave up on are still running, more than its budget "
            "max_abandoned=%d, so it can no longer use all its slots; stuck: %s. "
            "Stopping so that a supervisor restarts the process (exit status 3)",
            self.worker_id, count_stuck(stuck), self.max_abandoned,
            "; ".join(describe_stuck(run) for run in stuck),
        )  # fmt: skip
        self.request_stop()
        return True

    def _maybe_sweep(self) -> None:
        if self._next_sweep is None or self.sweep_schedule is None:
            return
        if time.monotonic() < self._next_sweep:
            return
        # The registry's retry delays: a task's backoff= for the runs swept back.
        sweep_once(self.queue, actor=self._sweep_actor, retry_delays=self.handlers.retry_delay_of)
        self._next_sweep = time.monotonic() + self.sweep_schedule.next_delay()

    @property
    def _sweep_actor(self) -> str:
        return f"sweeper@{self.worker_id}"[:WORKER_ID_MAX]

    def _runs_for(self, leases: list[Lease], leased_at: float) -> list[JobRun]:
        """A claim's leases as runs, each holding a slot: one hand-over for the batch."""
        runs = [self._run_for(lease, leased_at) for lease in leases]
        self._runs.add_many(runs)
        if any(run.deadline is not None for run in runs):
            self._heartbeat.watch_deadline()
        self.stats.add("claimed", len(runs))
        if log.isEnabledFor(logging.DEBUG):
            for run in runs:
                log.debug("%s claimed", run.describe())
        return runs

    def _run_for(self, lease: Lease, leased_at: float) -> JobRun:
        return run_for(
            lease,
            self.handlers,
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            leased_at=leased_at,
            shutdown=self._stop.shutdown,
        )

    # ----------------------------------------------------------------- liveness

    def _register(self) -> None:
        """Upsert this worker's row in the registry (who it is, and that it is alive)."""
        self.queue.register_worker(
            self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            pool=self.pool_info,
        )

    def _touch_liveness(self) -> None:
        try:
            once_more_if_disconnected(self._register, "liveness upsert")
        except SQLAlchemyError as exc:
            log.warning("could not record worker liveness (%s)", one_line(str(exc)))

    # ----------------------------------------------------------------- shutdown

    def _shut_down(self) -> None:
        self._stop.stopping.set()
        self._stop.shutdown.set()
        self._scheduling.stop()
        if self._pool is not None:
            # Prefetched jobs no handler has started go back at once, not after the grace.
            self._release(
                self._runs.abandon_all_running("released at shutdown", self._pool.take_waiting())
            )
        deadline = time.monotonic() + self.grace_period
        while not self._stop.immediate.is_set():
            self._stop.wake.clear()  # before looking, so a job ending meanwhile still wakes us
            left = deadline - time.monotonic()
            if not self.running_jobs or left <= 0:
                break
            self._stop.wait(self._stop.wake, left)
        self._release_remaining()
        if self.burst and self.sweep_schedule is not None:
            # And once more on the way out, for the jobs it gave up on itself.
            sweep_once(
                self.queue, actor=self._sweep_actor, retry_delays=self.handlers.retry_delay_of
            )
        if self._pool is not None:
            self._pool.close()
        if self._completer is not None:
            self._completer.close()
        self._heartbeat.stop(timeout=5)
        try:
            self.queue.deregister_worker(self.worker_id)
        except SQLAlchemyError as exc:
            log.warning("could not deregister worker (%s)", one_line(str(exc)))
        log.info(
            "worker %s stopped: %d claimed, %d succeeded, %d failed, %d released, %d discarded",
            self.worker_id, self.stats.claimed, self.stats.succeeded, self.stats.failed,
            self.stats.released, self.stats.discarded,
        )  # fmt: skip

    def _release_remaining(self) -> None:
        self._release(self._runs.abandon_all_running("released at shutdown"))

    def _release(self, runs: list[JobRun]) -> None:
        release_runs(self.queue, self.worker_id, runs, self.stats)
