"""Administration by job id: cancel, manual retry, and reads (one job, counts by status)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import selectinload

from sqlq_orm.core import error_codes, validation
from sqlq_orm.errors import (
    InvalidTransition,
    JobNotFound,
)
from sqlq_orm.queue.core import SYSTEM_ACTOR, retry_if_rolled_back
from sqlq_orm.queue.dependencies import Dependencies
from sqlq_orm.schema.states import TERMINAL, AttemptStatus, Event, JobStatus


class Administration(Dependencies):
    """What an operator does to a job by its id, and what they read."""

    def cancel(self, job_id: int, *, actor: str = SYSTEM_ACTOR, reason: str | None = None) -> None:
        """Cancel an unfinished job. A worker holding it loses its lease.

        Jobs waiting for it (``depends_on``) are cancelled too, with
        ``DEPENDENCY:FAILED``, and theirs in turn (or, under ``on_parent_failure="run"``,
        counted as having one parent less to wait for). Raises
        :class:`~sqlq_orm.errors.JobNotFound` or
        :class:`~sqlq_orm.errors.InvalidTransition` (already finished).
        """
        self._cancel(job_id, actor=actor, reason=reason)

    @retry_if_rolled_back
    def _cancel(self, job_id: int, *, actor: str, reason: str | None) -> int:
        """:meth:`cancel`; returns how many dependent jobs were cancelled with it."""
        validation.job_id(job_id)
        dependents: list[int] = []
        with self._write() as connection:
            status, attempt_count, _ = self._locked_status(connection, job_id)
            if status in TERMINAL:
                raise InvalidTransition(job_id, status.value, "cancel")
            connection.execute(self.sql.cancel, {"p_id": job_id, "p_status": status.value})
            if status is JobStatus.RUNNING:
                connection.execute(
                    self.sql.close_open_attempt,
                    {
                        "p_job_id": job_id,
                        "p_attempt": attempt_count,
                        "p_attempt_status": AttemptStatus.CANCELLED.value,
                        "p_code": None,
                        "p_detail": error_codes.summarize_detail(reason),
                    },
                )
            detail = {"was": status.value}
            if reason:
                detail["reason"] = error_codes.summarize_detail(reason) or ""
            self._write_events(connection, [self._event(job_id, Event.CANCELLED, actor, detail)])
            woken = self._parents_ended(connection, [job_id], JobStatus.CANCELLED, dependents)
        if woken:
            self._wake_workers(None, woken)
        return len(dependents)

    @retry_if_rolled_back
    def retry(self, job_id: int, *, actor: str = SYSTEM_ACTOR) -> None:
        """Requeue a FAILED or CANCELLED job now, with a fresh retry budget.

        Its attempts and events stay; the next run is a new attempt number. Jobs that
        were cancelled because this one failed (``DEPENDENCY:FAILED``) stay cancelled:
        retry them too if they should run.
        """
        validation.job_id(job_id)
        with self._write() as connection:
            status, _, _ = self._locked_status(connection, job_id)
            if status not in (JobStatus.FAILED, JobStatus.CANCELLED):
                raise InvalidTransition(job_id, status.value, "retry")
            try:
                with connection.begin_nested():
                    rows, _ = self.sql.run_returning(
                        connection,
                        self.sql.manual_retry,
                        {"p_id": job_id, "p_status": status.value},
                    )
                    (queue,) = rows[0]
            except IntegrityError:
                raise InvalidTransition(
                    job_id, status.value, "retry (another unfinished job has its dedupe_key)"
                ) from None
            self._write_events(
                connection, [self._event(job_id, Event.RETRIED, actor, {"was": status.value})]
            )
            self._announce_jobs(connection, [queue])
        self._wake_workers(None, [queue])

    def _locked_status(
        self, connection: Connection, job_id: int
    ) -> tuple[JobStatus, int, str | None]:
        row = connection.execute(self.sql.lock_job, {"p_id": job_id}).one_or_none()
        if row is None:
            raise JobNotFound(job_id)
        return JobStatus(row.status), row.attempt_count, row.claimed_by

    def counts_by_status(self) -> dict[str, int]:
        """How many jobs are in each status (statuses with none are included as 0)."""
        with self.read() as connection:
            found: dict[str, int] = {
                status: count for status, count in connection.execute(self.sql.count_by_status)
            }
        return {status.value: int(found.get(status.value, 0)) for status in JobStatus}

    def get_job(self, job_id: int) -> Any:
        """Return the job (with ``attempts`` and ``events`` loaded) or raise JobNotFound."""
        validation.job_id(job_id)
        job_model = self.models.job
        with self.session() as session:
            job = session.get(
                job_model,
                job_id,
                options=[selectinload(job_model.attempts), selectinload(job_model.events)],
            )
            if job is None:
                raise JobNotFound(job_id)
            return job
