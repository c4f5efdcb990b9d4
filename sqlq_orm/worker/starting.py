"""Starting prefetched jobs just before their handler runs, in groups.

A worker whose handlers are slow enough (:data:`STARTS_APART_FROM`) claims jobs for
its idle handler threads already started (RUNNING), and the jobs it prefetches beyond
them only CLAIMED (:meth:`~sqlq_orm.Queue.claim` with ``start_at_most``). A prefetched
job is started (fenced by its token: RUNNING, attempt opened, STARTED) by the thread
about to run its handler, and only then. So if the whole worker dies (SIGKILL, the OOM
killer, a lost machine), the sweeper finds its prefetched jobs still CLAIMED and gives
them back with no retry spent; only the jobs whose handler had started are charged, the
one that crashed the worker among them.

The start must be written before the handler runs, so it costs a transaction, and the
handler thread waits for it; threads that reach their next job while one is being
written join the next one, so a busy worker starts its jobs in groups. Measured on
SQLite (bench/README.md, issue 35), that wait halved the throughput of handlers taking
5 ms and cut a no-op drain to a fifth: the database's one writer spent its time on
starts. So handlers faster than :data:`STARTS_APART_FROM` on average keep their whole
claim started at once, as before: their prefetch is at most what the threads run in a
quarter of a second (:mod:`~sqlq_orm.worker.prefetch`), and that much is what a worker's
death can charge them for jobs it had not started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.queue.queue import Queue
from sqlq_orm.worker.outcomes import one_line
from sqlq_orm.worker.prefetch import PrefetchGauge
from sqlq_orm.worker.runs import JobRun, RunTable

log = logging.getLogger("sqlq_orm.worker")


STARTS_APART_FROM = 0.05
"""Seconds: handlers averaging at least this long have their prefetch claimed CLAIMED and
started one group at a time, just before their handlers run (a start then costs the
handler thread about 1 % of a job's time or less)."""


def start_at_most(gauge: PrefetchGauge, concurrency: int, held: int) -> int | None:
    """How many of a claim's jobs to start at once (``Queue.claim(start_at_most=)``):
    those idle threads take at once (``concurrency`` less the ``held`` runs), when the
    handlers average :data:`STARTS_APART_FROM` or more; None (all) for faster ones."""
    average = gauge.average()
    if average is None or average < STARTS_APART_FROM:
        return None
    return max(0, concurrency - held)


class Starter:
    """Starts CLAIMED runs before their handler runs, the concurrent ones in one write.

    ``deadline_moved`` is called after a group was started: the runs' max-runtime
    deadlines now count from their start (the heartbeat watches them).
    """

    def __init__(
        self, queue: Queue, runs: RunTable, deadline_moved: Callable[[], None] | None = None
    ) -> None:
        self.queue = queue
        self.runs = runs
        self._deadline_moved = deadline_moved
        self._condition = threading.Condition(threading.Lock())
        self._asked: list[JobRun] = []  # waiting for the next write
        self._writing = False
        self._outcome: dict[int, str | None] = {}  # id(run) -> None (started) or why not

    def start(self, run: JobRun) -> bool:
        """Start ``run``'s job (blocking until written); True if it may run now.

        False if it could not be started (lease lost, database error): the run is then
        given up on, and its job (still CLAIMED) comes back free when its lease expires.
        """
        key = id(run)
        with self._condition:
            self._asked.append(run)
            while key not in self._outcome and self._writing:
                self._condition.wait()
            if key not in self._outcome:
                # Nobody is writing: this thread writes for everyone who asked so far.
                group, self._asked = self._asked, []
                self._writing = True
            else:
                group = []
        if group:
            outcomes = self._write(group)
            with self._condition:
                self._outcome.update(outcomes)
                self._writing = False
                self._condition.notify_all()
        with self._condition:
            reason = self._outcome.pop(key)
        if reason is not None:
            self.runs.abandon(run, reason)
            return False
        return True

    def _write(self, group: list[JobRun]) -> dict[int, str | None]:
        sent = time.monotonic()
        try:
            lost = {lease.job_id for lease in self.queue.start_many([r.lease for r in group])}
        except SQLAlchemyError as exc:
            reason = f"could not be started ({one_line(str(exc))}); its lease will expire"
            log.warning("%d prefetched job(s) %s", len(group), reason)
            return {id(run): reason for run in group}
        outcomes: dict[int, str | None] = {}
        moved = False
        for run in group:
            if run.lease.job_id in lost:
                outcomes[id(run)] = "lease lost before its handler started"
                continue
            outcomes[id(run)] = None
            seconds = run.lease.max_runtime_seconds
            if seconds is not None:
                # Counted from before the start was sent: never later than the database's.
                run.deadline = sent + seconds
                run.context._set_deadline(run.deadline)
                moved = True
        if moved and self._deadline_moved is not None:
            self._deadline_moved()
        return outcomes
