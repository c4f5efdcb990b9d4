"""Inline mode: a registry's tasks run as soon as their enqueuing transaction commits.

For development and tests that want a task's effect without a worker, and without
hiding a serialization bug: the call is bound and stored exactly as it would be
(``enqueue`` is unchanged: signature check, codec, JSON), and once the job is
committed (at once for an enqueue of its own, or when the caller's ``session``
commits) the ready jobs of its queue are claimed and run in the calling thread
through the worker's own path (:func:`sqlq_orm.worker.in_process.run_ready_jobs`),
their attempts, events, results and failures recorded in the tables as a worker
records them. A failure does not raise at the call: it is recorded, and retried
(when due) as a worker would. A job enqueued with a delay, or waiting for its
parents, runs when it is ready and something next drains its queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from sqlq_orm.queue.queue import Queue
from sqlq_orm.worker.handlers import HandlerRegistry
from sqlq_orm.worker.in_process import run_ready_jobs


def run_when_committed(
    queue: Queue, handlers: HandlerRegistry, queues: Iterable[str], session: Any
) -> None:
    """Run ``queues``' ready jobs on ``queue`` with ``handlers`` now (the enqueue
    committed), or once the caller's ``session`` commits (not if it rolls back)."""
    names = sorted(set(queues))
    if session is None:
        run_ready_jobs(queue, handlers, queues=names)
        return
    sync = getattr(session, "sync_session", session)
    if not isinstance(sync, Session):
        return

    def _committed(committed: Session) -> None:
        run_ready_jobs(queue, handlers, queues=names)

    def _rolled_back(rolled_back: Session, previous: Any) -> None:
        if event.contains(sync, "after_commit", _committed):
            event.remove(sync, "after_commit", _committed)

    event.listen(sync, "after_commit", _committed, once=True)
    event.listen(sync, "after_soft_rollback", _rolled_back, once=True)
