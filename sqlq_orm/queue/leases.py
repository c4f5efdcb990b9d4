"""Calls made under a lease: start, heartbeat, succeed (one or many), fail, release.

Each is fenced by the lease token: a stale token changes nothing and raises
:class:`~sqlq_orm.errors.LeaseLost`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlq_orm.core import error_codes, validation
from sqlq_orm.core.lease import Lease
from sqlq_orm.core.results import encode_result
from sqlq_orm.errors import (
    InvalidInput,
    InvalidTransition,
    LeaseLost,
)
from sqlq_orm.queue.core import retry_if_rolled_back
from sqlq_orm.queue.failures import FailureRecording, retry_delay
from sqlq_orm.schema.mixins import REF_MAX
from sqlq_orm.schema.states import AttemptStatus, Event, JobStatus


class LeaseCalls(FailureRecording):
    """Everything a worker does with a job it holds."""

    @retry_if_rolled_back
    def start(self, lease: Lease) -> Lease:
        """Move a CLAIMED job to RUNNING, open its attempt row, write STARTED."""
        params = self._lease_params(lease)
        with self._write() as connection:
            rows, _ = self.sql.run_returning(connection, self.sql.start, params)
            if not rows:
                raise LeaseLost(lease.job_id)
            row = rows[0]
            lease.attempt = row.attempt_count
            lease.deadline_at = row.deadline_at
            self.sql.write(
                connection,
                self.sql.open_attempt,
                {"p_job_id": lease.job_id, "p_attempt": lease.attempt, "p_worker": lease.worker_id},
            )
            self._write_events(
                connection,
                [
                    self._event(
                        lease.job_id, Event.STARTED, lease.worker_id, {"attempt": lease.attempt}
                    )
                ],
            )
        lease.started = True
        return lease

    @retry_if_rolled_back
    def succeed(self, lease: Lease, result_ref: str | None = None, *, result: Any = None) -> None:
        """Finish a RUNNING job as SUCCEEDED, close its attempt, record SUCCEEDED.

        ``result`` (JSON, capped at ``payload_max_bytes``) is stored with the job for
        :meth:`~sqlq_orm.Queue.result` and :meth:`~sqlq_orm.Queue.wait`; one that is not
        JSON or too big raises :class:`~sqlq_orm.errors.InvalidInput`, writing nothing.

        Raises :class:`~sqlq_orm.errors.LeaseLost` (writing nothing) if the lease is no
        longer held, and :class:`~sqlq_orm.errors.InvalidTransition` if the lease was
        never started (only a running job can succeed).
        """
        params = self._lease_params(lease)
        if not lease.started:
            raise InvalidTransition(
                lease.job_id, JobStatus.CLAIMED.value, "succeed (start it first)"
            )
        params["p_result_ref"] = validation.optional_name("result_ref", result_ref, REF_MAX)
        params["p_result"] = self._storable_json(
            "result", encode_result(result, self.payload_max_bytes)
        )
        with self._write() as connection:
            rows, _ = self.sql.run_returning(connection, self.sql.succeed, params)
            if not rows:
                raise LeaseLost(lease.job_id)
            self._close_attempt(connection, lease, AttemptStatus.SUCCEEDED, None, None)
            # The SUCCEEDED event, unless the attempt row stands for it (a claim that
            # also started the job: sqlq_orm.ops.stand_ins).
            if not lease.row_stands_for_events:
                history = {"p_ids": [lease.job_id]}
                self.sql.write(connection, self.sql.succeeded_events_of_batch, history)
            self._announce_finished(connection, [lease.job_id])
            woken: set[str] = set()
            if any(tuple(rows[0])[1:]):  # has_dependents, where the models have dependencies
                woken = self._parents_ended(connection, [lease.job_id])
        self._finished([lease.job_id])
        if woken:
            self._wake_workers(None, woken)

    @retry_if_rolled_back
    def succeed_many(self, leases: Sequence[Lease]) -> list[Lease]:
        """Finish a batch of RUNNING jobs as SUCCEEDED in one transaction.

        Each job is guarded exactly as in :meth:`succeed` (its id, its lease token,
        status RUNNING); the whole batch is one ``UPDATE ... RETURNING``, one
        ``INSERT ... SELECT`` closing the attempts and one writing the SUCCEEDED events.
        Returns the leases that were no longer held (each would have raised
        :class:`~sqlq_orm.errors.LeaseLost` in :meth:`succeed`); nothing is written
        for them, and the rest still succeed. Leases that were never started raise
        :class:`~sqlq_orm.errors.InvalidTransition` and nothing is written.
        """
        by_id: dict[int, Lease] = {}
        for lease in leases:
            self._lease_params(lease)
            if not lease.started:
                raise InvalidTransition(
                    lease.job_id, JobStatus.CLAIMED.value, "succeed (start it first)"
                )
            if lease.job_id in by_id:
                raise InvalidInput(f"succeed_many got job {lease.job_id} twice")
            by_id[lease.job_id] = lease
        if not by_id:
            return []
        pairs = [(lease.job_id, lease.token) for lease in by_id.values()]
        params = {"p_ids": list(by_id), "p_pairs": pairs}
        woken: set[str] = set()
        stand_ins = all(lease.row_stands_for_events for lease in by_id.values())
        with self._write() as connection:
            statement = (
                self.sql.succeed_stand_ins_with_history
                if stand_ins
                else self.sql.succeed_batch_with_history
            )
            if statement is not None:
                # One statement: the finish, the attempt closes and the events.
                rows = connection.execute(statement, params).all()
                done = {row[0] for row in rows}
            else:
                rows, _ = self.sql.run_returning(connection, self.sql.succeed_batch, params)
                done = {row[0] for row in rows}
                if done:
                    # Attempt closes and (for attempts that do not stand for theirs)
                    # SUCCEEDED events in SQL from the rows just finished.
                    history = {"p_ids": sorted(done)}
                    self.sql.write(connection, self.sql.close_succeeded_attempts_of_batch, history)
                    if not stand_ins:
                        self.sql.write(connection, self.sql.succeeded_events_of_batch, history)
            self._announce_finished(connection, sorted(done))
            # The statement said which jobs have children: a batch without any is done.
            parents = [row[0] for row in rows if self.sql.has_dependencies and row[3]]
            if parents:
                woken = self._parents_ended(connection, parents)
        self._finished(done)
        if woken:
            self._wake_workers(None, woken)
        return [lease for lease in by_id.values() if lease.job_id not in done]

    @retry_if_rolled_back
    def fail(
        self,
        lease: Lease,
        error_code: str,
        error_detail: str | None = None,
        *,
        retryable: bool = True,
        retry_in: float | None = None,
    ) -> JobStatus:
        """Record a failed run; return where the job went (QUEUED or FAILED).

        With retries left and ``retryable``, the job goes back to QUEUED with
        ``retry_count + 1`` and ``run_at`` pushed out by the retry policy, or by
        ``retry_in`` seconds when given (RETRY_SCHEDULED event); otherwise it ends
        FAILED (FAILED event).
        ``error_code`` must be ``CATEGORY:SUBCATEGORY``; ``error_detail`` is cut to a
        short summary. A claimed job that was never started may be failed too (say,
        its payload cannot be read); it has no attempt row to close.
        """
        self._lease_params(lease)
        code = error_codes.normalize_error_code(error_code)
        detail = error_codes.summarize_detail(error_detail)
        delay = retry_delay(retry_in)
        with self._write() as connection:
            status = self._end_attempt_with_failure(
                connection,
                job_id=lease.job_id,
                token=lease.token,
                seen_status=JobStatus.RUNNING if lease.started else JobStatus.CLAIMED,
                attempt=lease.attempt,
                worker_id=lease.worker_id,
                retry_count=lease.retry_count,
                max_retries=lease.max_retries if retryable else lease.retry_count,
                code=code,
                detail=detail,
                actor=lease.worker_id,
                retry_delay=delay,
            )
            if status is None:
                raise LeaseLost(lease.job_id)
            if status is JobStatus.FAILED:  # a retry is no news to a wait
                self._announce_finished(connection, [lease.job_id])
        self._finished([lease.job_id])
        return status

    @retry_if_rolled_back
    def release(self, lease: Lease, reason: str = "released by worker") -> None:
        """Give an unfinished job back to the queue now, without spending a retry.

        For graceful shutdown: the attempt (if started) is closed as RELEASED and a
        RELEASED event records ``reason``.
        """
        params = self._lease_params(lease)
        with self._write() as connection:
            if connection.execute(self.sql.release, params).rowcount != 1:
                raise LeaseLost(lease.job_id)
            if lease.started:
                connection.execute(
                    self.sql.close_open_attempt,
                    {
                        "p_job_id": lease.job_id,
                        "p_attempt": lease.attempt,
                        "p_attempt_status": AttemptStatus.RELEASED.value,
                        "p_code": None,
                        "p_detail": error_codes.summarize_detail(reason),
                    },
                )
            self._write_events(
                connection,
                [self._event(lease.job_id, Event.RELEASED, lease.worker_id, {"reason": reason})],
            )
