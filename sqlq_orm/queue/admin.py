"""Administration by job id: cancel, manual retry, and reads (one job, counts by status)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import selectinload

from sqlq_orm.core import error_codes, validation
from sqlq_orm.errors import (
    InvalidInput,
    InvalidTransition,
    JobNotFound,
)
from sqlq_orm.queue.core import SYSTEM_ACTOR, retry_if_rolled_back
from sqlq_orm.queue.retries import RetryPlanning
from sqlq_orm.schema.states import TERMINAL, AttemptStatus, Event, JobStatus


class Administration(RetryPlanning):
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
            woken = self._parents_ended(connection, [job_id], dependents, actor=actor)
            self._announce_finished(connection, [job_id])  # dependents: by _parents_ended
        self._finished([job_id, *dependents])
        if woken:
            self._wake_workers(None, woken)
        return len(dependents)

    @retry_if_rolled_back
    def retry(
        self, job_id: int, *, actor: str = SYSTEM_ACTOR, with_dependents: bool = False
    ) -> list[int]:
        """Requeue a FAILED or CANCELLED job now, with a fresh retry budget.

        Its attempts and events stay; the next run is a new attempt number. A job
        with parents (``depends_on``) that have not all settled as it needs goes back
        WAITING for them instead of QUEUED (its RETRIED event lists them); if a parent
        it needs to succeed ended FAILED or CANCELLED, the retry is refused with
        :class:`~sqlq_orm.errors.ParentNotSucceeded` (retry that parent first). Jobs
        that were cancelled because this one failed (``DEPENDENCY:FAILED``) stay
        cancelled, unless ``with_dependents``: then they (and theirs, transitively)
        come back too, each WAITING for its parents; one that another failed parent
        still holds stays cancelled. One transaction. Returns the ids retried: this
        job's first, then the dependents brought back, in id order.
        """
        validation.job_id(job_id)
        if not isinstance(with_dependents, bool):
            raise InvalidInput(f"with_dependents must be True or False, got {with_dependents!r}")
        with self._write() as connection:
            plans = self._retry_plans(connection, job_id, with_dependents)
            queues: set[str] = set()
            events = []
            for plan in plans:
                try:
                    with connection.begin_nested():
                        rows, _ = self.sql.run_returning(
                            connection,
                            self.sql.manual_retry,
                            {"p_id": plan.job_id, "p_status": plan.was.value},
                        )
                        (queue,) = rows[0]
                except IntegrityError:
                    raise InvalidTransition(
                        plan.job_id,
                        plan.was.value,
                        "retry (another unfinished job has its dedupe_key)",
                    ) from None
                detail: dict[str, object] = {"was": plan.was.value}
                if plan.brought_by is not None:
                    detail["with"] = plan.brought_by
                if plan.waiting_for:
                    detail["waiting_for"] = plan.waiting_for
                    connection.execute(
                        self.sql.hold_waiting,
                        {"p_id": plan.job_id, "p_pending": len(plan.waiting_for)},
                    )
                else:
                    queues.add(queue)
                events.append(self._event(plan.job_id, Event.RETRIED, actor, detail))
            self._write_events(connection, events)
            # Children still WAITING that counted these jobs as finished (``run``)
            # wait for them again.
            self._settle_children_of(connection, [plan.job_id for plan in plans])
            if queues:
                self._announce_jobs(connection, queues)
        if queues:
            self._wake_workers(None, queues)
        return [plan.job_id for plan in plans]

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
