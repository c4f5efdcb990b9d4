"""Records handler successes in groups: one transaction for many jobs."""

from __future__ import annotations

import threading
from typing import Any

from sqlq_orm.core.lease import Lease
from sqlq_orm.queue.queue import Queue


class SuccessBatcher:
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
