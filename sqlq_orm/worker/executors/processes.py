"""The process pool: each job runs in a child process, so a job that crashes, spins
past its max runtime or eats memory harms only itself.

``concurrency`` slots, each a thread of the worker paired with one child process
(:mod:`~sqlq_orm.worker.executors.child`), forked at start with the handlers already
imported. A slot sends its child one job at a time and waits for the outcome, which
it hands over like a handler thread would; the worker (the parent) keeps the lease,
the heartbeats and the fenced finish.

- **Hard limit.** At a job's max runtime the slot's child is ended (SIGTERM, then
  SIGKILL after :data:`TERM_GRACE` seconds), the job fails at once with
  ``TIMEOUT:MAX_RUNTIME`` through the normal fenced finish, and a fresh child takes
  the slot.
- **Crash containment.** A child that dies (a signal, an exit) fails only its own job,
  with ``WORKER:CRASHED`` and a detail naming the signal or exit status; the job is
  retried by its own policy, and a fresh child takes the slot.
- **Given up on** (lease lost, released at shutdown): the child is ended too, and the
  outcome discarded as in the thread pool; nothing keeps running.
- **Recycling** (:class:`~sqlq_orm.worker.executors.base.PoolLimits`): after
  ``max_jobs_per_child`` jobs, or once a job leaves the child's peak memory above
  ``max_memory_per_child`` MB, the child is replaced after that job.

Children are forked (``os.fork``) from the slot's thread: measured cheaper than a
fork server (``bench/README.md``), and it needs no importable handlers, so handlers
defined anywhere work. The fork guard drops the inherited database connections.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sqlq_orm.core import error_codes
from sqlq_orm.worker.executors.base import RunServices
from sqlq_orm.worker.executors.child import job_message, outcome_of_reply, serve
from sqlq_orm.worker.executors.exits import describe_exit
from sqlq_orm.worker.outcomes import Outcome
from sqlq_orm.worker.runs import JobRun

log = logging.getLogger("sqlq_orm.worker")

TERM_GRACE = 0.5
"""Seconds a child gets to end after SIGTERM before it is sent SIGKILL."""
RETIRE_WAIT = 2.0
"""Seconds an idle child gets to leave once its socket is closed, before SIGKILL."""

_DEADLINE = "deadline"
_GIVEN_UP = "given up"


@dataclass(eq=False)
class _Child:
    pid: int
    sock: socket.socket
    jobs: int = 0
    rss_kb: int = 0  # peak resident memory after its last job
    reaped: bool = False
    status: int | None = None
    ending: str | None = None  # why the worker ends it (deadline, given up), if it does

    reader: Any = None  # a buffered reader of ``sock``, made at spawn

    def __post_init__(self) -> None:
        self.reader = self.sock.makefile("rb")


@dataclass(eq=False)
class _Slot:
    index: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    child: _Child | None = None
    run: JobRun | None = None


class ProcessExecutor:
    """``concurrency`` child processes, each running one job at a time."""

    kind = "process"

    def __init__(self, services: RunServices) -> None:
        self._services = services
        self._limits = services.limits
        self._condition = threading.Condition(threading.Lock())
        self._waiting: deque[JobRun] = deque()
        self._closed = False
        self._spawn_lock = threading.Lock()  # one fork at a time: no sibling's socket leaks
        self._parent_fds: set[int] = set()
        self._counts = {"recycles": 0, "crashes": 0, "deadline_kills": 0, "started": 0}
        self._slots = [_Slot(index) for index in range(services.concurrency)]
        self._threads = [
            threading.Thread(target=self._serve_slot, args=(slot,), name=f"sqlq-child-{slot.index}")
            for slot in self._slots
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    # ------------------------------------------------------------------ the seam

    def submit(self, runs: list[JobRun]) -> None:
        """Queue ``runs`` for the children, in order."""
        with self._condition:
            self._waiting.extend(runs)
            self._condition.notify(len(runs))

    def waiting(self) -> int:
        """How many runs no child has taken yet."""
        with self._condition:
            return len(self._waiting)

    def take_waiting(self) -> list[JobRun]:
        """Remove and return the runs no child has taken yet (at shutdown)."""
        with self._condition:
            taken = list(self._waiting)
            self._waiting.clear()
            return taken

    def detach(self, run: JobRun) -> None:
        """The worker gave up on ``run``: end its child (its outcome is discarded)."""
        run.detached = True
        self._end_child_of(run, _GIVEN_UP)

    def stop_at_deadline(self, run: JobRun) -> bool:
        """End the child running ``run``; the slot records ``TIMEOUT:MAX_RUNTIME``.
        False for a run no child has started (the worker gives up on it)."""
        return self._end_child_of(run, _DEADLINE)

    def info(self) -> dict[str, Any]:
        """Kind, children (pid, jobs so far), recycles, crashes and kills at deadline."""
        children = []
        for slot in self._slots:
            child = slot.child
            if child is not None and not child.reaped:
                children.append({"pid": child.pid, "jobs": child.jobs})
        return {"kind": self.kind, "children": children, **self._counts}

    def close(self) -> None:
        """Retire every child once no run waits; wait (briefly) until they are gone."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        ends = time.monotonic() + RETIRE_WAIT + TERM_GRACE + 1.0
        for thread in self._threads:
            thread.join(max(0.0, ends - time.monotonic()))

    # ------------------------------------------------------------------ a slot

    def _serve_slot(self, slot: _Slot) -> None:
        try:
            while True:
                if slot.child is not None and slot.child.ending is not None:
                    self._after_job(slot)  # ended before its job began: replace it
                if slot.child is None:
                    slot.child = self._spawn()
                run = self._next_run()
                if run is None:
                    return
                starter = self._services.starter
                if not run.lease.started and starter is not None and not starter.start(run):
                    continue  # its lease was lost, or the database refused the start
                with slot.lock:  # from now on, stopping the run ends this child
                    slot.run = run
                if not self._services.runs.begin_handler(run):
                    with slot.lock:
                        slot.run = None
                    continue  # given up on while it waited (lease lost, shutdown)
                self._run(slot, run)
                self._after_job(slot)
        except Exception:  # noqa: BLE001 - a slot must not vanish silently
            log.exception("process pool slot %d failed", slot.index)
        finally:
            if slot.child is not None:
                self._retire(slot.child)

    def _next_run(self) -> JobRun | None:
        with self._condition:
            while not self._waiting and not self._closed:
                self._condition.wait()
            return self._waiting.popleft() if self._waiting else None

    def _run(self, slot: _Slot, run: JobRun) -> None:
        services = self._services
        child = slot.child
        assert child is not None
        began = time.monotonic()
        reply = None
        try:
            child.sock.sendall(job_message(run))
            line = child.reader.readline()
            reply = json.loads(line) if line else None
        except OSError as exc:
            log.debug("child %d: %s", child.pid, exc)
        finally:
            with slot.lock:
                slot.run = None
            services.runs.end_handler(run)
            services.prefetch.record(time.monotonic() - began)
        if reply is None:
            outcome = self._outcome_of_death(slot, run)
        else:
            child.jobs += 1
            outcome = outcome_of_reply(reply)
            child.rss_kb = int(reply.get("rss_kb") or 0)
        services.hand_over(run, outcome)

    def _outcome_of_death(self, slot: _Slot, run: JobRun) -> Outcome:
        child = slot.child
        assert child is not None
        self._reap(slot, child)
        how = describe_exit(child.status or 0)
        if child.ending == _DEADLINE:
            self._count("deadline_kills")
            log.warning("%s: child %d ended at its max runtime", run.describe(), child.pid)
            return Outcome(
                error_codes.MAX_RUNTIME,
                f"ran past its max runtime of {run.lease.max_runtime_seconds}s; "
                f"its child process (pid {child.pid}) was ended and {how}",
            )
        if child.ending is None:
            self._count("crashes")
            log.error("%s: its child process %d was %s", run.describe(), child.pid, how)
        return Outcome(
            error_codes.WORKER_CRASHED,
            f"the job's child process (pid {child.pid}) was {how}",
        )

    def _after_job(self, slot: _Slot) -> None:
        child = slot.child
        assert child is not None
        if child.ending is not None and not child.reaped:
            # Told to end just as its job came back: it must not take the next one.
            self._reap(slot, child)
        if child.reaped:
            slot.child = None  # a fresh child next time round
            return
        limits = self._limits
        why = None
        if limits.max_jobs_per_child is not None and child.jobs >= limits.max_jobs_per_child:
            why = f"it ran {child.jobs} jobs (max_jobs_per_child={limits.max_jobs_per_child})"
        rss_mb = child.rss_kb / 1024
        if limits.max_memory_per_child is not None and rss_mb > limits.max_memory_per_child:
            why = (
                f"its memory reached {rss_mb:.0f} MB "
                f"(max_memory_per_child={limits.max_memory_per_child})"
            )
        if why is not None:
            log.info("replacing child %d: %s", child.pid, why)
            self._count("recycles")
            self._retire(child)
            slot.child = None

    # ------------------------------------------------------------------ children

    def _count(self, what: str) -> None:
        with self._condition:
            self._counts[what] += 1

    def _spawn(self) -> _Child:
        services = self._services
        with self._spawn_lock:
            ours, theirs = socket.socketpair()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                ours.close()
                for fd in self._parent_fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                serve(theirs, services.handlers, services.worker_id)
            theirs.close()
            self._parent_fds.add(ours.fileno())
        self._count("started")
        log.debug("process pool: child %d started", pid)
        return _Child(pid=pid, sock=ours)

    def _end_child_of(self, run: JobRun, why: str) -> bool:
        for slot in self._slots:
            with slot.lock:
                if slot.run is not run or slot.child is None or slot.child.reaped:
                    continue
                child = slot.child
                if child.ending is None:
                    child.ending = why
                    self._signal(child, signal.SIGTERM)
                    timer = threading.Timer(TERM_GRACE, self._kill_hard, args=(slot, child))
                    timer.daemon = True
                    timer.start()
                return True
        return False

    def _kill_hard(self, slot: _Slot, child: _Child) -> None:
        with slot.lock:
            if not child.reaped:
                self._signal(child, signal.SIGKILL)

    @staticmethod
    def _signal(child: _Child, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, number)

    def _reap(self, slot: _Slot, child: _Child) -> None:
        with slot.lock:  # the timer's SIGKILL never hits a reused pid
            if child.reaped:
                return
            try:
                _, status = os.waitpid(child.pid, 0)
            except ChildProcessError:  # reaped by someone else already
                status = 0
            child.status = status
            child.reaped = True
        self._forget(child)

    def _forget(self, child: _Child) -> None:
        with self._spawn_lock:
            self._parent_fds.discard(child.sock.fileno())
            child.reader.close()
            child.sock.close()

    def _retire(self, child: _Child) -> None:
        """Let an idle child leave (its socket closes), SIGKILL it if it lingers."""
        if child.reaped:
            return
        with contextlib.suppress(OSError):
            child.sock.shutdown(socket.SHUT_WR)
        ends = time.monotonic() + RETIRE_WAIT
        status = 0
        with contextlib.suppress(ChildProcessError):  # reaped by someone else already
            while True:
                pid, status = os.waitpid(child.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() >= ends:
                    self._signal(child, signal.SIGKILL)
                    _, status = os.waitpid(child.pid, 0)
                    break
                time.sleep(0.01)
        child.status = status
        child.reaped = True
        self._forget(child)
