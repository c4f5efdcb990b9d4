"""Snoozing: a running job goes back to the queue for later, spending no retry.

What a handler asks for by raising :class:`~sqlq_orm.errors.Snooze` (Oban's
``{:snooze, n}``, River's ``JobSnooze``): the worker calls :meth:`Snoozing.snooze`.
"""

from __future__ import annotations

from sqlq_orm.core import error_codes, validation
from sqlq_orm.core.lease import Lease
from sqlq_orm.errors import InvalidInput, LeaseLost
from sqlq_orm.queue.core import retry_if_rolled_back
from sqlq_orm.queue.leases import LeaseCalls
from sqlq_orm.schema.states import AttemptStatus, Event, JobStatus

DEFAULT_MAX_SNOOZES = 100
"""How many times one job may snooze before the next snooze fails it."""

SNOOZE_LIMIT = "SNOOZE:LIMIT"
"""The error code of a job that asked to snooze once more than ``max_snoozes``."""


class Snoozing(LeaseCalls):
    """Handing a held job back for later without spending a retry."""

    max_snoozes: int = DEFAULT_MAX_SNOOZES

    @retry_if_rolled_back
    def snooze(self, lease: Lease, seconds: float, reason: str | None = None) -> JobStatus:
        """Put a held job back in QUEUED to run again in ``seconds``; no retry is spent.

        The attempt (if started) is closed as SNOOZED and a SNOOZED event records the
        delay and ``reason``. Fenced like every lease call: a lease no longer held
        raises :class:`~sqlq_orm.errors.LeaseLost` and writes nothing. A job that has
        already snoozed ``max_snoozes`` times (default 100) is failed instead, not
        retried, with ``SNOOZE:LIMIT``. Returns where the job went (QUEUED or FAILED).
        """
        params = self._lease_params(lease)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise InvalidInput(f"snooze seconds must be a number, got {seconds!r}")
        _, delay = validation.schedule(None, seconds)
        with self.read() as connection:
            found = connection.execute(self.sql.count_snoozes, {"p_job_id": lease.job_id})
            snoozed = int(found.scalar_one())
        if snoozed >= self.max_snoozes:
            return self.fail(
                lease,
                SNOOZE_LIMIT,
                f"snoozed {snoozed} times, the limit (max_snoozes); asked for {seconds:g}s more",
                retryable=False,
            )
        detail = error_codes.summarize_detail(reason)
        with self._write() as connection:
            if connection.execute(self.sql.snooze, {**params, "p_delay": delay}).rowcount != 1:
                raise LeaseLost(lease.job_id)
            if lease.started:
                connection.execute(
                    self.sql.close_open_attempt,
                    {
                        "p_job_id": lease.job_id,
                        "p_attempt": lease.attempt,
                        "p_attempt_status": AttemptStatus.SNOOZED.value,
                        "p_code": None,
                        "p_detail": detail,
                    },
                )
            note: dict[str, object] = {
                "attempt": lease.attempt,
                "delay": delay,
                "snoozes": snoozed + 1,
            }
            if detail:
                note["reason"] = detail
            self._write_events(
                connection, [self._event(lease.job_id, Event.SNOOZED, lease.worker_id, note)]
            )
        return JobStatus.QUEUED
