"""Giving jobs back at shutdown: RELEASED, no retry spent, in one transaction."""

from __future__ import annotations

import logging

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.errors import LeaseLost
from sqlq_orm.queue.queue import Queue
from sqlq_orm.worker.outcomes import one_line
from sqlq_orm.worker.runs import JobRun
from sqlq_orm.worker.stats import WorkerStats

log = logging.getLogger("sqlq_orm.worker")


def release_runs(queue: Queue, worker_id: str, runs: list[JobRun], stats: WorkerStats) -> None:
    """Give ``runs`` back to the queue (RELEASED, no retry spent), in one transaction.

    A run whose lease is already gone, or a release the database refuses, is left to
    the sweeper (logged); never raises for a database error.
    """
    if not runs:
        return
    reason = f"worker {worker_id} shutting down"
    try:
        lost = {lease.job_id for lease in queue.release_many([r.lease for r in runs], reason)}
    except SQLAlchemyError as exc:
        log.warning(
            "%d job(s) could not be released (%s); the sweeper will recover them",
            len(runs),
            one_line(str(exc)),
        )
        return
    for run in runs:
        if run.lease.job_id in lost:
            log.warning(
                "%s could not be released (%s); the sweeper will recover it",
                run.describe(),
                LeaseLost(run.lease.job_id),
            )
        else:
            stats.add("released")
            log.info("%s released back to the queue", run.describe())
