"""How a failed run is recorded, whoever noticed it: the worker (``fail``) or the sweeper."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from sqlq_orm.core.backoff import checked_retry_in, whole_delay
from sqlq_orm.core.lease import Lease
from sqlq_orm.core.timing import not_before
from sqlq_orm.queue.core import DeferredWrites
from sqlq_orm.queue.dependencies import Dependencies
from sqlq_orm.schema.states import AttemptStatus, Event, JobStatus


def retry_delay(retry_in: object) -> int | None:
    """``retry_in`` seconds (``JobError(retry_in=...)``) as the whole seconds to add to
    the database's now, never early and never below 1; None stays None."""
    if retry_in is None:
        return None
    return whole_delay(not_before(checked_retry_in(retry_in)))


@dataclass(frozen=True)
class FailedRun:
    """A held job's run that failed: what its guarded update must match, and why."""

    job_id: int
    token: str
    seen_status: JobStatus
    attempt: int
    worker_id: str | None
    retry_count: int
    max_retries: int
    code: str
    detail: str | None
    actor: str
    note: dict[str, Any] | None = None
    retry_delay: int | None = None
    """Whole seconds before the retry, instead of the queue's retry policy."""


class FailureRecording(Dependencies):
    """Requeue with backoff or fail a held job, closing its attempt and writing events."""

    def _close_attempt(
        self,
        connection: Connection,
        lease: Lease,
        status: AttemptStatus,
        code: str | None,
        detail: str | None,
    ) -> None:
        self.sql.write(
            connection,
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
        retry_delay: int | None = None,
    ) -> JobStatus | None:
        """Requeue with backoff or fail a held job; None if the guard did not match.

        Shared by :meth:`fail` and :meth:`sweep`, so a failed run is recorded the same
        way whoever noticed it. ``note`` (RECOVERED, TIMED_OUT) is written just before
        the outcome's event, and only if the guarded update took. With ``deferred``, the
        attempt row and the events are collected there instead, for the caller to write
        in one batch later in the same transaction (the sweeper does).
        """
        run = FailedRun(
            job_id, token, seen_status, attempt, worker_id, retry_count, max_retries,
            code, detail, actor, note, retry_delay,
        )  # fmt: skip
        writes = deferred if deferred is not None else DeferredWrites()
        (outcome,) = self._end_attempts_with_failure(connection, [run], writes)
        if deferred is None:
            self._flush(connection, writes)
        return outcome

    def _end_attempts_with_failure(
        self, connection: Connection, runs: list[FailedRun], deferred: DeferredWrites
    ) -> list[JobStatus | None]:
        """Record each failed run as :meth:`_end_attempt_with_failure` does; return where
        each job went (None where its guard did not match). Attempt rows and events are
        collected in ``deferred``. Where the backend takes rows as arrays, the guarded
        updates of the whole batch are one statement. The children of the jobs that
        ended FAILED are cancelled (or counted down) in the same transaction."""
        outcomes = self._end_runs(connection, runs, deferred)
        failed = [
            run.job_id
            for run, outcome in zip(runs, outcomes, strict=True)
            if outcome is JobStatus.FAILED
        ]
        if failed:
            # The runs' own history first, so the children's events come after their
            # parents' FAILED in id order, as on every other ending path (the
            # checker reads the order: sqlq_orm.ops.dependency_order).
            self._flush(connection, deferred)
            deferred.attempts.clear()
            deferred.events.clear()
            self._parents_ended(connection, failed)
        return outcomes

    def _end_runs(
        self, connection: Connection, runs: list[FailedRun], deferred: DeferredWrites
    ) -> list[JobStatus | None]:
        plans = [
            (
                run,
                (
                    run.retry_delay
                    if run.retry_delay is not None
                    else self.retry_policy.delay_seconds(run.retry_count + 1)
                )
                if run.retry_count < run.max_retries
                else None,
            )
            for run in runs
        ]
        if self.sql.end_runs_from_arrays is not None and len(runs) > 1:
            arrays: dict[str, list[Any]] = {
                "a_id": [run.job_id for run, _ in plans],
                "a_token": [run.token for run, _ in plans],
                "a_seen": [run.seen_status.value for run, _ in plans],
                "a_retry": [delay is not None for _, delay in plans],
                "a_delay": [delay or 0 for _, delay in plans],
                "a_code": [run.code for run, _ in plans],
                "a_detail": [run.detail for run, _ in plans],
            }
            changed = {
                row.id: row.run_at
                for row in connection.execute(self.sql.end_runs_from_arrays, arrays)
            }
            return [
                self._failure_written(run, delay, changed[run.job_id], deferred)
                if run.job_id in changed
                else None
                for run, delay in plans
            ]
        outcomes: list[JobStatus | None] = []
        for run, delay in plans:
            params: dict[str, Any] = {
                "p_id": run.job_id,
                "p_token": run.token,
                "p_status": run.seen_status.value,
                "p_code": run.code,
                "p_detail": run.detail,
            }
            if delay is not None:
                params["p_delay"] = delay
                rows, _ = self.sql.run_returning(connection, self.sql.requeue_for_retry, params)
                run_at = rows[0][0] if rows else None
                taken = bool(rows)
            else:
                run_at = None
                taken = connection.execute(self.sql.fail, params).rowcount == 1
            outcomes.append(self._failure_written(run, delay, run_at, deferred) if taken else None)
        return outcomes

    def _failure_written(
        self, run: FailedRun, delay: int | None, run_at: Any, deferred: DeferredWrites
    ) -> JobStatus:
        """Collect the attempt close and events of a failure whose guarded update took."""
        if delay is not None:
            outcome = JobStatus.QUEUED
            event = self._event(
                run.job_id,
                Event.RETRY_SCHEDULED,
                run.actor,
                {
                    "attempt": run.attempt,
                    "error_code": run.code,
                    "retry": run.retry_count + 1,
                    "delay": delay,
                    "run_at": run_at,
                },
            )
        else:
            outcome = JobStatus.FAILED
            event = self._event(
                run.job_id,
                Event.FAILED,
                run.actor,
                {"attempt": run.attempt, "error_code": run.code},
            )
        if run.seen_status is JobStatus.RUNNING:
            deferred.attempts.append(
                {
                    "p_job_id": run.job_id,
                    "p_attempt": run.attempt,
                    "p_worker": run.worker_id,
                    "p_attempt_status": AttemptStatus.FAILED.value,
                    "p_code": run.code,
                    "p_detail": run.detail,
                }
            )
        deferred.events += [run.note, event] if run.note else [event]
        return outcome

    def _flush(self, connection: Connection, writes: DeferredWrites) -> None:
        """Write collected attempt closes and events: one ``executemany`` each."""
        if writes.attempts:
            self.sql.execute(connection, self.sql.close_attempt_upsert, writes.attempts)
        self._write_events(connection, writes.events)
