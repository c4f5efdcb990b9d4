"""The worker: claims jobs, runs their handlers in threads, heartbeats, stops gracefully.

One worker process has three kinds of threads:

- the **main thread** runs :meth:`Worker.run`: it claims as many jobs as there are
  free slots (straight into RUNNING), starts a thread per job, and runs the sweeper
  on a jittered interval so a dead worker's jobs come back without anyone watching;
- one **heartbeat thread** renews every lease this worker holds, every
  ``heartbeat_interval`` seconds, and upserts the worker's liveness row;
- one **job thread** per running job calls the handler with no transaction open,
  then reports the outcome with the lease (``succeed`` / ``fail``).

The worker never writes SQL; it only calls :class:`~sqlq_orm.queue.queue.Queue` methods.

**Giving up on a job.** A job is *abandoned* (its outcome will be discarded, its
context's ``should_stop`` turns true) when a heartbeat is refused (``LeaseLost``: the
job was reclaimed, cancelled or finished elsewhere), when the job runs past its max
runtime (``MaxRuntimeExceeded``: the worker stops renewing and the sweeper ends it
with ``TIMEOUT:MAX_RUNTIME``), or when no heartbeat got through for a whole lease
(the database is locked or down: the worker *self-fences*, measured with
``time.monotonic()`` from the last heartbeat that succeeded, and never reports
success for that job). Python cannot kill a thread, so an abandoned handler may keep
running; its slot is freed at once so one hung handler cannot starve the worker, and
at most ``max_abandoned`` such threads may linger before abandoned jobs start holding
on to their slots (bounding the thread count at ``concurrency + max_abandoned``).
Job threads are daemons: a hung handler never keeps the process from exiting.

**Shutdown.** On SIGTERM or SIGINT (or :meth:`Worker.request_stop`) the worker stops
claiming, lets running jobs finish for up to ``grace_period`` seconds, releases the
rest back to QUEUED (RELEASED, no retry spent) and deregisters. A second signal skips
the grace period.
"""

from __future__ import annotations

import enum
import logging
import os
import random
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.core import error_codes, validation
from sqlq_orm.core.lease import Lease
from sqlq_orm.errors import InvalidInput, JobError, LeaseLost, MaxRuntimeExceeded, SqlqError
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import SweepResult
from sqlq_orm.schema.mixins import QUEUE_MAX, WORKER_ID_MAX
from sqlq_orm.worker.handlers import Handler, HandlerRegistry, JobContext

log = logging.getLogger("sqlq_orm.worker")

DEFAULT_GRACE_PERIOD = 30.0
DEFAULT_SWEEP_INTERVAL = (10.0, 30.0)
"""Seconds between in-worker sweeps, drawn at random in this range (spreads workers out)."""

TIMEOUT_UNHANDLED = "TIMEOUT:UNHANDLED"
"""A handler let a ``TimeoutError`` escape."""
NETWORK_UNHANDLED = "NETWORK:UNHANDLED"
"""A handler let a ``ConnectionError`` escape."""
INVALID_ERROR_CODE = "INTERNAL:INVALID_ERROR_CODE"
"""A handler raised ``JobError`` with a code that is not ``CATEGORY:SUBCATEGORY``."""
INVALID_RESULT = "INTERNAL:INVALID_RESULT"
"""A handler returned a ``result_ref`` the queue refused (e.g. too long)."""

_SIGNAL_POLL = 0.1  # how often waits in the main thread look for a received signal
_CLAIM_GATHER = 0.005  # how long a wide worker waits for more free slots before claiming


# ------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """What a handler run came to: success (``error_code`` None) or a failure."""

    error_code: str | None = None
    error_detail: str | None = None
    retryable: bool = True
    result_ref: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.error_code is None


def _one_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def outcome_of_exception(exc: BaseException) -> Outcome:
    """Classify what a handler raised: its own ``JobError``, or an unclassified error.

    Anything but a ``JobError`` becomes ``INTERNAL:UNHANDLED_EXCEPTION`` (or
    ``TIMEOUT:UNHANDLED`` / ``NETWORK:UNHANDLED`` where the type says so), retryable,
    with a one-line ``Type: message`` summary; the traceback belongs in the log.
    """
    if isinstance(exc, JobError):
        try:
            code = error_codes.normalize_error_code(exc.code)
        except InvalidInput:
            return Outcome(
                INVALID_ERROR_CODE,
                f"handler raised JobError with invalid code {exc.code!r}: {exc.detail}",
                retryable=False,
            )
        return Outcome(code, exc.detail or None, retryable=exc.retryable)
    summary = f"{type(exc).__name__}: {_one_line(str(exc))}".rstrip(": ")
    if isinstance(exc, TimeoutError):
        return Outcome(TIMEOUT_UNHANDLED, summary)
    if isinstance(exc, ConnectionError):
        return Outcome(NETWORK_UNHANDLED, summary)
    return Outcome(error_codes.UNHANDLED_EXCEPTION, summary)


# --------------------------------------------------------------------------- stats


@dataclass
class WorkerStats:
    """What a worker has done so far (counts since it started)."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    """Failures reported (the job was retried or ended FAILED)."""
    released: int = 0
    """Jobs given back at shutdown."""
    discarded: int = 0
    """Handler outcomes not reported because the lease was lost or self-fenced."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


class _State(enum.Enum):
    RUNNING = "running"  # the handler runs and the lease is renewed
    FINISHING = "finishing"  # the outcome is being reported; still renewed
    ABANDONED = "abandoned"  # the worker gave up on it; its outcome is discarded
    DONE = "done"


@dataclass(eq=False)
class _Run:
    lease: Lease
    context: JobContext
    state: _State = _State.RUNNING
    thread: threading.Thread | None = None

    def describe(self) -> str:
        return f"job {self.lease.job_id} attempt {self.lease.attempt} ({self.lease.type})"


# -------------------------------------------------------------------- sweep timing


class SweepSchedule:
    """Jittered intervals between sweeps: a number, or a ``(low, high)`` range."""

    def __init__(self, interval: float | tuple[float, float], rng: random.Random | None = None):
        low, high = (interval, interval) if isinstance(interval, (int, float)) else interval
        if not 0 < low <= high:
            raise InvalidInput(
                f"sweep interval must be a positive number or a (low, high) range with "
                f"0 < low <= high, got {interval!r}"
            )
        self.low, self.high = float(low), float(high)
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """Seconds until the next sweep."""
        return self._rng.uniform(self.low, self.high)


def run_sweeper(
    queue: Queue,
    interval: float | tuple[float, float],
    *,
    should_stop: Callable[[], bool],
    actor: str = "sweeper",
    on_sweep: Callable[[SweepResult], None] | None = None,
) -> SweepResult:
    """Sweep, then wait a jittered interval, until ``should_stop()``; return the totals.

    A sweep that fails (database locked or down) is logged and tried again next time.
    """
    schedule = SweepSchedule(interval)
    total = SweepResult()
    while not should_stop():
        try:
            result = queue.sweep(actor=actor)
        except (SQLAlchemyError, SqlqError) as exc:
            log.warning("sweep failed (%s); trying again later", _one_line(str(exc)))
        else:
            total += result
            if on_sweep is not None:
                on_sweep(result)
        deadline = time.monotonic() + schedule.next_delay()
        while not should_stop() and time.monotonic() < deadline:
            time.sleep(min(_SIGNAL_POLL, max(0.0, deadline - time.monotonic())))
    return total


def default_worker_id() -> str:
    """``hostname:pid:random``: unique per process, and says where to look."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


# -------------------------------------------------------------------------- worker


class _SuccessBatcher:
    """Records handler successes in groups: one transaction for many jobs.

    Job threads hand their lease over and wait; one thread takes everything waiting
    and records it with :meth:`Queue.succeed_many` (each job still fenced by its own
    token). While one batch commits, the next one gathers, so under load many jobs
    share a commit and with a single job nothing waits for company.
    """

    LOST = "lost"
    RECORDED = "recorded"

    def __init__(self, queue: Queue, max_batch: int = 500) -> None:
        self._queue = queue
        self._max_batch = max_batch
        self._condition = threading.Condition()
        self._waiting: list[tuple[Lease, list[Any], threading.Event]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="sqlq-finisher", daemon=True)
        self._thread.start()

    def submit(self, lease: Lease) -> Any:
        """Record ``lease``'s success; return RECORDED, LOST, or the database error."""
        answer: list[Any] = []
        done = threading.Event()
        with self._condition:
            if self._closed:
                return self._record([lease])[0]
            self._waiting.append((lease, answer, done))
            self._condition.notify()
        done.wait()
        return answer[0]

    def close(self) -> None:
        """Record what is waiting, then stop the thread."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            with self._condition:
                while not self._waiting and not self._closed:
                    self._condition.wait()
                if not self._waiting:
                    return
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
            answers = self._record([lease for lease, _, _ in batch])
            for (_, answer, done), result in zip(batch, answers, strict=True):
                answer.append(result)
                done.set()

    def _record(self, leases: list[Lease]) -> list[Any]:
        try:
            lost = {lease.job_id for lease in self._queue.succeed_many(leases)}
        except Exception as exc:  # noqa: BLE001 - handed to each waiting job thread
            return [exc] * len(leases)
        return [self.LOST if lease.job_id in lost else self.RECORDED for lease in leases]


class Worker:
    """Runs the handlers of jobs claimed from ``queue``, ``concurrency`` at a time.

    ``handlers`` is a :class:`~sqlq_orm.worker.handlers.HandlerRegistry` (or a mapping of job
    type to function). ``lease_seconds`` is how long each claim lasts without a
    heartbeat; heartbeats go out every ``heartbeat_interval`` seconds (default a third
    of the lease). ``poll_interval`` is how long an idle worker waits before asking
    again. ``sweep_interval`` (seconds, or a ``(low, high)`` range to draw from; None to
    never sweep) schedules the in-worker sweeper. With ``burst=True`` the worker exits
    once nothing is ready and nothing runs. See the module docs for how jobs are
    abandoned and how shutdown works.
    """

    def __init__(
        self,
        queue: Queue,
        handlers: HandlerRegistry | Mapping[str, Handler],
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 1,
        lease_seconds: int = 30,
        heartbeat_interval: float | None = None,
        poll_interval: float = 1.0,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        worker_id: str | None = None,
        sweep_interval: float | tuple[float, float] | None = DEFAULT_SWEEP_INTERVAL,
        max_abandoned: int | None = None,
        burst: bool = False,
        install_signal_handlers: bool = True,
    ) -> None:
        self.queue = queue
        self.handlers = (
            handlers if isinstance(handlers, HandlerRegistry) else HandlerRegistry(handlers)
        )
        self.queues = [queues] if isinstance(queues, str) else list(queues)
        if not self.queues:
            raise InvalidInput("queues must name at least one queue, got none")
        for name in self.queues:
            validation.require_name("queue", name, QUEUE_MAX)
        self.concurrency = validation.require_int("concurrency", concurrency, minimum=1)
        self.lease_seconds = validation.lease_seconds(lease_seconds)
        self.heartbeat_interval = (
            self.lease_seconds / 3 if heartbeat_interval is None else float(heartbeat_interval)
        )
        if not 0 < self.heartbeat_interval < self.lease_seconds:
            raise InvalidInput(
                f"heartbeat_interval must be > 0 and shorter than the lease "
                f"({self.lease_seconds}s), got {heartbeat_interval!r}"
            )
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
        self._claim_batch = max(1, self.concurrency // 4)
        self.install_signal_handlers = install_signal_handlers
        self.stats = WorkerStats()

        self._lock = threading.Lock()
        self._runs: dict[int, _Run] = {}  # jobs holding a slot (RUNNING / FINISHING)
        self._abandoned: list[_Run] = []  # given up on, thread maybe still alive
        self._stopping = threading.Event()  # stop claiming
        self._immediate = threading.Event()  # skip the grace period
        self._shutdown = threading.Event()  # seen by handlers as shutdown_requested
        self._wake = threading.Event()  # a slot was freed, or a stop was asked for
        self._heartbeats_done = threading.Event()
        self._signals_received = 0  # only ever incremented by the signal handler
        self._next_sweep: float | None = None
        self._successes: _SuccessBatcher | None = None

    # ------------------------------------------------------------------ control

    def request_stop(self, *, immediate: bool = False) -> None:
        """Stop claiming and shut down (gracefully unless ``immediate``). Thread-safe."""
        if immediate:
            self._immediate.set()
        self._stopping.set()
        self._shutdown.set()
        self._wake.set()

    @property
    def running_jobs(self) -> list[int]:
        """Ids of the jobs this worker currently holds a slot for."""
        with self._lock:
            return sorted(self._runs)

    def run(self) -> WorkerStats:
        """Register, work until asked to stop (or idle, in burst mode), shut down.

        Raises if the worker cannot register (database unreachable, tables missing);
        after that, database errors are logged and retried, never fatal.
        """
        self._register()
        log.info(
            "worker %s started: queues=%s concurrency=%d lease=%ds heartbeat=%.1fs handlers=%s",
            self.worker_id, ",".join(self.queues), self.concurrency, self.lease_seconds,
            self.heartbeat_interval, ",".join(self.handlers.types) or "(none)",
        )  # fmt: skip
        heartbeats = threading.Thread(
            target=self._heartbeat_loop, name="sqlq-heartbeat", daemon=True
        )
        heartbeats.start()
        self._successes = _SuccessBatcher(self.queue)
        restore = self._install_signals()
        try:
            self._claim_loop()
        finally:
            try:
                self._shut_down(heartbeats)
            finally:
                restore()
        return self.stats

    # ---------------------------------------------------------------- main loop

    def _claim_loop(self) -> None:
        if self.sweep_schedule is not None:
            self._next_sweep = time.monotonic() + self.sweep_schedule.next_delay()
        while not self._poll_signals():
            self._wake.clear()
            self._maybe_sweep()
            free = self._free_slots()
            if free == 0:
                self._wait(self._wake, self.poll_interval)
                continue
            if free < self._claim_batch and self.running_jobs:
                # A wide worker claims a few slots at a time rather than one per
                # finished job: fewer, larger claim transactions.
                self._wait(self._wake, _CLAIM_GATHER)
                if self._free_slots() < self._claim_batch and self.running_jobs:
                    continue
            leased_at = time.monotonic()
            try:
                leases = self.queue.claim(
                    self.worker_id,
                    queues=self.queues,
                    limit=free,
                    lease_seconds=self.lease_seconds,
                    start=True,
                )
            except SQLAlchemyError as exc:
                log.warning(
                    "claim failed (%s); trying again in %.1fs",
                    _one_line(str(exc)),
                    self.poll_interval,
                )
                self._wait(self._stopping, self.poll_interval)
                continue
            for lease in leases:
                self._launch(lease, leased_at)
            if len(leases) < free:
                if self.burst and not leases and not self.running_jobs:
                    log.info("nothing left to do (burst mode)")
                    return
                # Nothing more is ready: ask again after the poll interval, not on
                # every freed slot.
                self._wait(self._stopping, self.poll_interval)

    def _free_slots(self) -> int:
        with self._lock:
            self._abandoned = [r for r in self._abandoned if r.thread and r.thread.is_alive()]
            lingering = max(0, len(self._abandoned) - self.max_abandoned)
            return max(0, self.concurrency - len(self._runs) - lingering)

    def _maybe_sweep(self) -> None:
        if self._next_sweep is None or self.sweep_schedule is None:
            return
        if time.monotonic() < self._next_sweep:
            return
        try:
            self.queue.sweep(actor=f"sweeper@{self.worker_id}"[:WORKER_ID_MAX])
        except (SQLAlchemyError, SqlqError) as exc:
            log.warning("sweep failed (%s); trying again later", _one_line(str(exc)))
        self._next_sweep = time.monotonic() + self.sweep_schedule.next_delay()

    # ------------------------------------------------------------------ signals

    def _install_signals(self) -> Callable[[], None]:
        if (
            not self.install_signal_handlers
            or threading.current_thread() is not threading.main_thread()
        ):
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            # Only bump a counter: taking a lock (or setting an Event) here could
            # deadlock on a lock the interrupted main thread holds.
            self._signals_received += 1

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _poll_signals(self) -> bool:
        """Turn received signals into stop requests; return whether to stop claiming."""
        received = self._signals_received
        if received >= 1 and not self._stopping.is_set():
            log.info(
                "signal received: finishing running jobs (up to %.0fs), then releasing "
                "the rest; send it again to stop now",
                self.grace_period,
            )
            self.request_stop()
        if received >= 2 and not self._immediate.is_set():
            log.info("second signal: stopping now")
            self.request_stop(immediate=True)
        return self._stopping.is_set()

    def _wait(self, event: threading.Event, timeout: float) -> None:
        """Wait for ``event`` up to ``timeout``, noticing signals within a tenth of a second.

        A received signal sets ``_stopping`` and ``_wake``, which ends the wait.
        """
        deadline = time.monotonic() + timeout
        while not event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._signals_received:
                self._poll_signals()
            event.wait(min(left, _SIGNAL_POLL))

    # ------------------------------------------------------------------- a job

    def _launch(self, lease: Lease, leased_at: float) -> None:
        context = JobContext(
            job_id=lease.job_id,
            attempt=lease.attempt,
            type=lease.type,
            queue=lease.queue,
            payload=None,  # decoded in the job's thread, where a corrupt one fails the job
            payload_ref=lease.payload_ref,
            worker_id=self.worker_id,
            retries_left=lease.retries_left,
            lease_seconds=self.lease_seconds,
            leased_at=leased_at,
            shutdown=self._shutdown,
        )
        run = _Run(lease=lease, context=context)
        run.thread = threading.Thread(
            target=self._execute, args=(run,), name=f"sqlq-job-{lease.job_id}", daemon=True
        )
        with self._lock:
            self._runs[lease.job_id] = run
        self.stats.add("claimed")
        log.debug("%s claimed", run.describe())
        run.thread.start()

    def _execute(self, run: _Run) -> None:
        lease, context = run.lease, run.context
        try:
            try:
                handler = self.handlers.get(lease.type)
                if handler is None:
                    known = ", ".join(self.handlers.types) or "none"
                    raise JobError(
                        error_codes.UNKNOWN_TYPE,
                        f"no handler for job type {lease.type!r} on worker {self.worker_id} "
                        f"(known: {known})",
                        retryable=False,
                    )
                context.payload = lease.payload
                returned = handler(context)
            except JobError as exc:  # classified by the handler: no traceback needed
                outcome = outcome_of_exception(exc)
            except BaseException as exc:  # noqa: BLE001 - a handler must never kill its thread silently
                outcome = outcome_of_exception(exc)
                log.error("%s raised %s", run.describe(), outcome.error_detail, exc_info=exc)
            else:
                outcome = Outcome(result_ref=returned if isinstance(returned, str) else None)
            self._finish(run, outcome)
        finally:
            with self._lock:
                if self._runs.get(lease.job_id) is run:
                    del self._runs[lease.job_id]
                if run.state is not _State.ABANDONED:
                    run.state = _State.DONE
            self._wake.set()

    def _finish(self, run: _Run, outcome: Outcome) -> None:
        with self._lock:
            reason = run.context.stop_reason
            if run.state is _State.RUNNING and reason is None:
                run.state = _State.FINISHING
        if run.state is not _State.FINISHING:
            self._discard(run, reason or "lease lost")
            return
        while True:
            try:
                if outcome.succeeded:
                    self._record_success(run, outcome)
                    self.stats.add("succeeded")
                    log.info("%s succeeded", run.describe())
                else:
                    assert outcome.error_code is not None
                    went_to = self.queue.fail(
                        run.lease,
                        outcome.error_code,
                        outcome.error_detail,
                        retryable=outcome.retryable,
                    )
                    self.stats.add("failed")
                    log.warning(
                        "%s failed with %s (%s); job is now %s",
                        run.describe(),
                        outcome.error_code,
                        outcome.error_detail or "no detail",
                        went_to,
                    )
                return
            except LeaseLost as exc:
                self._discard(run, str(exc))
                return
            except InvalidInput as exc:
                # Only what the handler handed back can be invalid here (a result_ref).
                outcome = Outcome(INVALID_RESULT, str(exc), retryable=False)
            except SQLAlchemyError as exc:
                # The database is locked or away. Keep trying while the lease (renewed
                # by the heartbeat thread meanwhile) is surely still ours.
                reason = run.context.stop_reason
                if reason is not None:
                    self._discard(run, reason)
                    return
                log.warning(
                    "%s: could not record its outcome (%s); retrying",
                    run.describe(),
                    _one_line(str(exc)),
                )
                time.sleep(min(1.0, self.heartbeat_interval))

    def _record_success(self, run: _Run, outcome: Outcome) -> None:
        """Report a success; raise LeaseLost or the database error like ``succeed``."""
        if outcome.result_ref is not None or self._successes is None:
            self.queue.succeed(run.lease, result_ref=outcome.result_ref)
            return
        result = self._successes.submit(run.lease)
        if result is _SuccessBatcher.LOST:
            raise LeaseLost(run.lease.job_id)
        if isinstance(result, BaseException):
            raise result

    def _discard(self, run: _Run, reason: str) -> None:
        self.stats.add("discarded")
        log.warning("%s: outcome discarded (%s)", run.describe(), reason)

    def _abandon(self, run: _Run, reason: str, *, runtime_exceeded: bool = False) -> None:
        """Give up on a RUNNING job (call with ``self._lock`` held): free its slot."""
        if run.state is not _State.RUNNING:
            return
        run.context._give_up(reason, runtime_exceeded=runtime_exceeded)
        run.state = _State.ABANDONED
        self._runs.pop(run.lease.job_id, None)
        self._abandoned.append(run)
        self._wake.set()
        log.warning("%s abandoned: %s", run.describe(), reason)

    # --------------------------------------------------------------- heartbeats

    def _heartbeat_loop(self) -> None:
        while not self._heartbeats_done.wait(self.heartbeat_interval):
            try:
                self._heartbeat_once()
            except Exception:  # noqa: BLE001 - the heartbeat thread must survive anything
                log.exception("heartbeat round failed")

    def _heartbeat_once(self) -> None:
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            if run.context._given_up:
                with self._lock:
                    self._abandon(run, run.context.stop_reason or "given up")
                continue
            # Sent even when overdue: if the database still takes it, nobody has taken
            # the job over and the lease is ours again.
            sent = time.monotonic()
            try:
                self.queue.heartbeat(run.lease, self.lease_seconds)
            except MaxRuntimeExceeded as exc:
                with self._lock:
                    self._abandon(run, str(exc), runtime_exceeded=True)
                continue
            except LeaseLost as exc:
                with self._lock:
                    # FINISHING or DONE: our own succeed/fail got there first.
                    self._abandon(run, str(exc))
                continue
            except SQLAlchemyError as exc:
                log.warning("%s: heartbeat failed (%s)", run.describe(), _one_line(str(exc)))
            else:
                run.context._renewed(sent)
            reason = run.context.stop_reason  # self-fences once a whole lease went by
            if reason is not None:
                with self._lock:
                    self._abandon(run, reason)
        self._touch_liveness()

    def _register(self) -> None:
        """Upsert this worker's row in the registry (who it is, and that it is alive)."""
        self.queue.register_worker(
            self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
        )

    def _touch_liveness(self) -> None:
        try:
            self._register()
        except SQLAlchemyError as exc:
            log.warning("could not record worker liveness (%s)", _one_line(str(exc)))

    # ----------------------------------------------------------------- shutdown

    def _shut_down(self, heartbeats: threading.Thread) -> None:
        self._stopping.set()
        self._shutdown.set()
        deadline = time.monotonic() + self.grace_period
        while not self._immediate.is_set():
            self._wake.clear()  # before looking, so a job ending meanwhile still wakes us
            left = deadline - time.monotonic()
            if not self.running_jobs or left <= 0:
                break
            self._wait(self._wake, left)
        self._release_remaining()
        if self._successes is not None:
            self._successes.close()
        self._heartbeats_done.set()
        heartbeats.join(timeout=5)
        try:
            self.queue.deregister_worker(self.worker_id)
        except SQLAlchemyError as exc:
            log.warning("could not deregister worker (%s)", _one_line(str(exc)))
        log.info(
            "worker %s stopped: %d claimed, %d succeeded, %d failed, %d released, %d discarded",
            self.worker_id, self.stats.claimed, self.stats.succeeded, self.stats.failed,
            self.stats.released, self.stats.discarded,
        )  # fmt: skip

    def _release_remaining(self) -> None:
        with self._lock:
            remaining = [run for run in self._runs.values() if run.state is _State.RUNNING]
            for run in remaining:
                self._abandon(run, "released at shutdown")
        for run in remaining:
            try:
                self.queue.release(run.lease, reason=f"worker {self.worker_id} shutting down")
            except (LeaseLost, SQLAlchemyError) as exc:
                log.warning(
                    "%s could not be released (%s); the sweeper will recover it",
                    run.describe(),
                    _one_line(str(exc)),
                )
            else:
                self.stats.add("released")
                log.info("%s released back to the queue", run.describe())
