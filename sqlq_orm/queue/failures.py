"""How a failed run is recorded, whoever noticed it: the worker (``fail``) or the sweeper."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from sqlq_orm.core.lease import Lease
from sqlq_orm.queue.core import DeferredWrites, QueueCore
from sqlq_orm.schema.states import AttemptStatus, Event, JobStatus


class FailureRecording(QueueCore):
    """Requeue with backoff or fail a held job, closing its attempt and writing events."""

    def _close_attempt(
        self,
        connection: Connection,
        lease: Lease,
        status: AttemptStatus,
        code: str | None,
        detail: str | None,
    ) -> None:
        connection.execute(
            self.sql.close_attempt_upsert,
            {
                "p_job_id": lease.job_id,
                "p_attempt": lease.attempt,
                "p_worker": lease.worker_id,
                "p_attempt_status": status.value,
                "p_code": code,
                "p_detail": detail,
            },
        )

    def _end_attempt_with_failure(
        self,
        connection: Connection,
        *,
        job_id: int,
        token: str,
        seen_status: JobStatus,
        attempt: int,
        worker_id: str | None,
        retry_count: int,
        max_retries: int,
        code: str,
        detail: str | None,
        actor: str,
        note: dict[str, Any] | None = None,
        deferred: DeferredWrites | None = None,
    ) -> JobStatus | None:
        """Requeue with backoff or fail a held job; None if the guard did not match.

        Shared by :meth:`fail` and :meth:`sweep`, so a failed run is recorded the same
        way whoever noticed it. ``note`` (RECOVERED, TIMED_OUT) is written just before
        the outcome's event, and only if the guarded update took. With ``deferred``, the
        attempt row and the events are collected there instead, for the caller to write
        in one batch later in the same transaction (the sweeper does).
        """
        params: dict[str, Any] = {
            "p_id": job_id,
            "p_token": token,
            "p_status": seen_status.value,
            "p_code": code,
            "p_detail": detail,
        }
        if retry_count < max_retries:
            delay = self.retry_policy.delay_seconds(retry_count + 1)
            params["p_delay"] = delay
            rows, _ = self.sql.run_returning(connection, self.sql.requeue_for_retry, params)
            if not rows:
                return None
            run_at = rows[0][0]
            outcome = JobStatus.QUEUED
            event = self._event(
                job_id,
                Event.RETRY_SCHEDULED,
                actor,
                {
                    "attempt": attempt,
                    "error_code": code,
                    "retry": retry_count + 1,
                    "delay": delay,
                    "run_at": run_at,
                },
            )
        else:
            if connection.execute(self.sql.fail, params).rowcount != 1:
                return None
            outcome = JobStatus.FAILED
            event = self._event(
                job_id, Event.FAILED, actor, {"attempt": attempt, "error_code": code}
            )
        writes = deferred if deferred is not None else DeferredWrites()
        if seen_status is JobStatus.RUNNING:
            writes.attempts.append(
                {
                    "p_job_id": job_id,
                    "p_attempt": attempt,
                    "p_worker": worker_id,
                    "p_attempt_status": AttemptStatus.FAILED.value,
                    "p_code": code,
                    "p_detail": detail,
                }
            )
        writes.events += [note, event] if note else [event]
        if deferred is None:
            self._flush(connection, writes)
        return outcome

    def _flush(self, connection: Connection, writes: DeferredWrites) -> None:
        """Write collected attempt closes and events: one ``executemany`` each."""
        if writes.attempts:
            connection.execute(self.sql.close_attempt_upsert, writes.attempts)
        self._write_events(connection, writes.events)
