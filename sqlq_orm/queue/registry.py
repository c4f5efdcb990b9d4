"""The worker registry: who is alive (one row per worker process, upserted on each tick)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlq_orm.core import validation
from sqlq_orm.queue.core import QueueCore
from sqlq_orm.schema.mixins import WORKER_ID_MAX


class WorkerRegistry(QueueCore):
    """Registering and deregistering worker processes."""

    def register_worker(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
        pool: Mapping[str, Any] | None = None,
    ) -> None:
        """Record (upsert) that a worker is alive; call on every worker tick. ``pool``
        describes its pool (kind, children...), stored as JSON text."""
        validation.require_name("worker_id", worker_id, WORKER_ID_MAX)
        with self._write() as connection:
            connection.execute(
                self.sql.upsert_worker,
                {
                    "p_worker": worker_id,
                    "p_hostname": hostname,
                    "p_pid": pid,
                    "p_queues": ",".join(queues),
                    "p_concurrency": concurrency,
                    "p_pool": None if pool is None else json.dumps(dict(pool), default=str),
                },
            )

    def deregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry (graceful shutdown)."""
        with self._write() as connection:
            connection.execute(self.sql.delete_worker, {"p_worker": worker_id})
