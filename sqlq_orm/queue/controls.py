"""Operator controls on queues: pause, resume and rate limits, stored where every
claim reads them.

A paused queue is a row in the queue-control table; every worker's claim skips the
queues it names (one primary-key lookup per claim statement, see
:meth:`~sqlq_orm.db.statements.controls.ControlStatements.not_paused`), so a pause
holds on every machine from the next claim on and survives restarts. Jobs already
claimed or running finish normally. A resume wakes the queue's idle workers at once,
as an enqueue does.
"""

from __future__ import annotations

from typing import Any

from sqlq_orm.core import validation
from sqlq_orm.errors import SqlqError
from sqlq_orm.queue.core import SYSTEM_ACTOR, QueueCore, retry_if_rolled_back
from sqlq_orm.queue.types import QueueState
from sqlq_orm.schema.mixins import QUEUE_MAX, WORKER_ID_MAX


class QueueControls(QueueCore):
    """Pausing and resuming queues, and reading which are paused."""

    def _require_queue_controls(self) -> None:
        if self.tables.queues is None:
            raise SqlqError(
                "this queue's models have no queue-control model: bind "
                "sqlq_orm.QueueControlMixin to your base and pass it as "
                "Models(queue_control=...) to pause queues"
            )

    @retry_if_rolled_back
    def pause_queue(self, name: str, *, actor: str = SYSTEM_ACTOR) -> bool:
        """Stop every worker from starting jobs of queue ``name``, until resumed.

        Jobs already claimed or running finish normally; new jobs can still be
        enqueued (they wait). Returns False when the queue was paused already (it
        keeps its original ``paused_at``). A queue need not have jobs to be paused.
        """
        name = validation.require_name("name", name, QUEUE_MAX)
        actor = validation.require_name("actor", actor, WORKER_ID_MAX)
        self._require_queue_controls()
        with self._write() as connection:
            was = connection.execute(self.sql.is_queue_paused, {"p_name": name}).first()
            connection.execute(self.sql.pause_queue, {"p_name": name, "p_actor": actor})
        return was is None

    @retry_if_rolled_back
    def resume_queue(self, name: str, *, actor: str = SYSTEM_ACTOR) -> bool:
        """Let workers claim jobs of queue ``name`` again, and wake its idle workers.

        Returns False when the queue was not paused (nothing changes then).
        """
        return self._lift(self.sql.resume_queue, name, actor)

    @retry_if_rolled_back
    def set_rate_limit(
        self, name: str, max_starts: int, per_seconds: int, *, actor: str = SYSTEM_ACTOR
    ) -> None:
        """Let workers start at most ``max_starts`` jobs of queue ``name`` in any
        ``per_seconds`` seconds, counted per ``rate_key`` (jobs enqueued without one
        share one count), on every worker and machine from their next claim on.

        The window slides: a start counts until ``per_seconds`` after it (whole
        seconds, the queue's clock). Jobs over the limit stay QUEUED and start once
        the window allows; idle workers sleep until then instead of polling. Replaces
        the queue's previous limit.
        """
        name = validation.require_name("name", name, QUEUE_MAX)
        max_starts = validation.require_int(
            "max_starts", max_starts, minimum=1, maximum=validation.INT32_MAX
        )
        per_seconds = validation.require_int(
            "per_seconds", per_seconds, minimum=1, maximum=validation.INT32_MAX
        )
        actor = validation.require_name("actor", actor, WORKER_ID_MAX)
        self._require_queue_controls()
        with self._write() as connection:
            connection.execute(
                self.sql.set_rate_limit,
                {
                    "p_name": name,
                    "p_rate_limit": max_starts,
                    "p_rate_period": per_seconds,
                    "p_actor": actor,
                },
            )
            # A raised limit may let waiting jobs start now.
            self._announce_jobs(connection, [name])
        self._wake_workers(None, [name])

    @retry_if_rolled_back
    def clear_rate_limit(self, name: str, *, actor: str = SYSTEM_ACTOR) -> bool:
        """Remove queue ``name``'s rate limit and wake its idle workers; False when it
        had none."""
        return self._lift(self.sql.clear_rate_limit, name, actor)

    def _lift(self, statement: Any, name: str, actor: str) -> bool:
        """Run a statement that lets queue ``name``'s jobs start again (resume, clear a
        rate limit); when it changed the queue, wake its idle workers everywhere."""
        name = validation.require_name("name", name, QUEUE_MAX)
        actor = validation.require_name("actor", actor, WORKER_ID_MAX)
        self._require_queue_controls()
        with self._write() as connection:
            changed = connection.execute(statement, {"p_name": name, "p_actor": actor}).rowcount
            if changed:
                self._announce_jobs(connection, [name])
        if changed:
            self._wake_workers(None, [name])
        return bool(changed)

    def paused_queues(self) -> list[str]:
        """The names of the paused queues, sorted (empty without a control table)."""
        if self.tables.queues is None:
            return []
        with self.read() as connection:
            names = connection.execute(self.sql.select_paused_names).scalars().all()
        return sorted(names)

    def queue_states(self) -> list[QueueState]:
        """Every queue an operator has paused (now or before) or rate-limited, by name."""
        if self.tables.queues is None:
            return []
        with self.read() as connection:
            rows = connection.execute(self.sql.select_queue_controls).all()
        return [
            QueueState(
                name=row.name,
                paused=row.paused_at is not None,
                paused_at=row.paused_at,
                changed_by=row.changed_by,
                updated_at=row.updated_at,
                rate_limit=row.rate_limit,
                rate_period=row.rate_period,
            )
            for row in rows
        ]
