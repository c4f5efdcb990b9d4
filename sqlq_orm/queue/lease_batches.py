"""Lease calls for many jobs at once: heartbeat, fail and release a whole batch.

A worker holding many leases renews them with one statement and records a batch of
outcomes in one transaction, instead of one round trip per job. Every job in a batch
is still fenced on its own (id, lease token, status): a lease no longer held changes
nothing and is reported for that job alone, and the rest of the batch goes through.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlq_orm.core import error_codes, validation
from sqlq_orm.core.lease import Lease
from sqlq_orm.errors import InvalidInput, LeaseLost, MaxRuntimeExceeded
from sqlq_orm.queue.core import DeferredWrites, retry_if_rolled_back
from sqlq_orm.queue.failures import FailedRun, FailureRecording, retry_delay
from sqlq_orm.queue.types import JobFailure
from sqlq_orm.schema.states import AttemptStatus, Event, JobStatus


class BatchedLeaseCalls(FailureRecording):
    """``heartbeat_many``, ``fail_many`` and ``release_many``: one transaction a batch."""

    def heartbeat(self, lease: Lease, lease_seconds: int | None = None) -> int:
        """Renew the lease; return the new ``lease_expires_at``.

        Raises :class:`~sqlq_orm.errors.MaxRuntimeExceeded` once the job is past its
        max runtime (the lease is then not renewed, so the sweeper can end it), and
        :class:`~sqlq_orm.errors.LeaseLost` if the lease is no longer this worker's.
        Writes no event, except a HEARTBEAT at most every ``heartbeat_event_interval``.
        """
        # One lease: wait for its row if another transaction holds it (only this
        # job's renewal waits).
        result = self._renew([lease], lease_seconds, self.sql.heartbeat_batch).get(lease.job_id)
        if result is None:  # changed hands between the renewal and the look at the row
            raise LeaseLost(lease.job_id)
        if isinstance(result, Exception):
            raise result
        return result

    def heartbeat_many(
        self, leases: Sequence[Lease], lease_seconds: int | None = None
    ) -> dict[int, int | LeaseLost | MaxRuntimeExceeded]:
        """Renew every lease in ``leases`` with one statement.

        Returns, per job id, the new ``lease_expires_at`` or the error
        :meth:`~sqlq_orm.queue.leases.LeaseCalls.heartbeat` would have raised for that
        job alone (:class:`~sqlq_orm.errors.MaxRuntimeExceeded` or
        :class:`~sqlq_orm.errors.LeaseLost`). HEARTBEAT events are written as in
        ``heartbeat``, at most every ``heartbeat_event_interval`` per lease.

        A job whose row another transaction holds locked (an app transaction that
        enqueues a child of it with ``session=``, say) is passed over instead of
        waited for, and is missing from the result: it was not renewed this time and
        is still held, so renew it again at the next round. The other leases are
        renewed at once; one locked row costs at most its own job's renewal.
        """
        return self._renew(leases, lease_seconds, self.sql.heartbeat_unlocked)

    @retry_if_rolled_back
    def _renew(
        self, leases: Sequence[Lease], lease_seconds: int | None, statement: Any
    ) -> dict[int, int | LeaseLost | MaxRuntimeExceeded]:
        by_id = self._distinct_leases(leases, "heartbeat_many")
        seconds = validation.lease_seconds(
            self.default_lease_seconds if lease_seconds is None else lease_seconds
        )
        if not by_id:
            return {}
        params = {
            "p_ids": list(by_id),
            "p_pairs": [(lease.job_id, lease.token) for lease in by_id.values()],
            "p_lease_seconds": seconds,
        }
        results: dict[int, int | LeaseLost | MaxRuntimeExceeded] = {}
        now = time.monotonic()
        with self._write() as connection:
            renewed, _ = self.sql.run_returning(connection, statement, params)
            for row in renewed:
                job_id, expires_at = tuple(row)
                results[job_id] = int(expires_at)
            refused = [job_id for job_id in by_id if job_id not in results]
            if refused:
                refused_params = {
                    "p_ids": refused,
                    "p_pairs": [(job_id, by_id[job_id].token) for job_id in refused],
                }
                states = {
                    row.id: (bool(row.ours), bool(row.past_deadline))
                    for row in connection.execute(self.sql.lease_states, refused_params)
                }
                for job_id in refused:
                    lease = by_id[job_id]
                    ours, past_deadline = states.get(job_id, (False, False))
                    if ours and past_deadline:
                        results[job_id] = MaxRuntimeExceeded(job_id, lease.max_runtime_seconds)
                    elif not ours:
                        results[job_id] = LeaseLost(job_id)
                    # else: still ours, within its runtime, its row locked by another
                    # transaction and passed over: not renewed this time.
            due = [
                lease
                for lease in by_id.values()
                if isinstance(results.get(lease.job_id), int)
                and now - lease.last_heartbeat_event >= self.heartbeat_event_interval
            ]
            self._write_events(
                connection,
                [
                    self._event(
                        lease.job_id,
                        Event.HEARTBEAT,
                        lease.worker_id,
                        {"lease_expires_at": results[lease.job_id]},
                    )
                    for lease in due
                ],
            )
        for lease in due:
            lease.last_heartbeat_event = now
        for job_id, result in results.items():
            if isinstance(result, int):
                by_id[job_id].lease_expires_at = result
        return results

    @retry_if_rolled_back
    def fail_many(self, failures: Sequence[JobFailure]) -> dict[int, JobStatus | None]:
        """Record a batch of failed runs in one transaction.

        Each failure is recorded exactly as :meth:`~sqlq_orm.queue.leases.LeaseCalls.fail`
        would (requeued with backoff while retries are left and it is retryable, else
        FAILED), fenced by its own lease. Returns, per job id, where the job went, or
        None where the lease was no longer held (nothing was written for that job).
        An invalid error code anywhere raises :class:`~sqlq_orm.errors.InvalidInput`
        and nothing is written.
        """
        self._distinct_leases([failure.lease for failure in failures], "fail_many")
        checked = [
            (
                failure,
                error_codes.normalize_error_code(failure.error_code),
                error_codes.summarize_detail(failure.error_detail),
            )
            for failure in failures
        ]
        went_to: dict[int, JobStatus | None] = {}
        if not checked:
            return went_to
        runs = [
            FailedRun(
                job_id=failure.lease.job_id,
                token=failure.lease.token,
                seen_status=JobStatus.RUNNING if failure.lease.started else JobStatus.CLAIMED,
                attempt=failure.lease.attempt,
                worker_id=failure.lease.worker_id,
                retry_count=failure.lease.retry_count,
                max_retries=failure.lease.max_retries
                if failure.retryable
                else failure.lease.retry_count,
                code=code,
                detail=detail,
                actor=failure.lease.worker_id,
                retry_delay=retry_delay(failure.retry_in),
            )
            for failure, code, detail in checked
        ]
        writes = DeferredWrites()
        with self._write() as connection:
            outcomes = self._end_attempts_with_failure(connection, runs, writes)
            self._flush(connection, writes)
            self._announce_finished(
                connection,
                [
                    run.job_id
                    for run, outcome in zip(runs, outcomes, strict=True)
                    if outcome is JobStatus.FAILED
                ],
            )
        self._finished(run.job_id for run in runs)
        return {run.job_id: outcome for run, outcome in zip(runs, outcomes, strict=True)}

    @retry_if_rolled_back
    def release_many(
        self, leases: Sequence[Lease], reason: str = "released by worker"
    ) -> list[Lease]:
        """Give a batch of unfinished jobs back to the queue in one transaction.

        As :meth:`~sqlq_orm.queue.leases.LeaseCalls.release` for each (no retry spent,
        attempt closed as RELEASED, RELEASED event). Returns the leases that were no
        longer held; nothing was written for them.
        """
        by_id = self._distinct_leases(leases, "release_many")
        lost: list[Lease] = []
        if not by_id:
            return lost
        detail = error_codes.summarize_detail(reason)
        attempts, events = [], []
        with self._write() as connection:
            for lease in by_id.values():
                if connection.execute(self.sql.release, self._lease_params(lease)).rowcount != 1:
                    lost.append(lease)
                    continue
                # Also for a lease not known to be started: a start_many racing this
                # release may have opened its attempt (matches nothing otherwise).
                attempts.append(
                    {
                        "p_job_id": lease.job_id,
                        "p_attempt": lease.attempt,
                        "p_attempt_status": AttemptStatus.RELEASED.value,
                        "p_code": None,
                        "p_detail": detail,
                    }
                )
                events.append(
                    self._event(lease.job_id, Event.RELEASED, lease.worker_id, {"reason": reason})
                )
            if attempts:
                connection.execute(self.sql.close_open_attempt, attempts)
            self._write_events(connection, events)
        return lost

    @retry_if_rolled_back
    def start_many(self, leases: Sequence[Lease]) -> list[Lease]:
        """Start a batch of CLAIMED jobs in one transaction, as
        :meth:`~sqlq_orm.queue.leases.LeaseCalls.start` starts one: RUNNING, attempt
        opened, STARTED event, each fenced by its own token.

        A worker claims its prefetch without starting it and starts each job just
        before its handler runs, so a worker that dies holding a prefetch is charged
        only for the jobs it really started (:meth:`~sqlq_orm.Queue.sweep` gives an
        expired CLAIMED lease back without spending a retry). Returns the leases that
        were no longer held; nothing was written for them. The others are updated in
        place (``attempt``, ``deadline_at``, ``started``).
        """
        by_id = self._distinct_leases(leases, "start_many")
        if not by_id:
            return []
        params = {"p_ids": list(by_id), "p_pairs": [(i, lease.token) for i, lease in by_id.items()]}
        with self._write() as connection:
            rows, _ = self.sql.run_returning(connection, self.sql.start_batch, params)
            started = []
            for row in rows:
                lease = by_id[row.id]
                lease.attempt = row.attempt_count
                lease.deadline_at = row.deadline_at
                started.append(lease)
            if started:
                self.sql.write(
                    connection,
                    self.sql.open_attempt,
                    [
                        {"p_job_id": lease.job_id, "p_attempt": lease.attempt,
                         "p_worker": lease.worker_id}
                        for lease in started
                    ],
                )  # fmt: skip
                self._write_events(
                    connection,
                    [
                        self._event(
                            lease.job_id, Event.STARTED, lease.worker_id, {"attempt": lease.attempt}
                        )
                        for lease in started
                    ],
                )
        for lease in started:
            lease.started = True
        return [lease for lease in by_id.values() if not lease.started]

    def _distinct_leases(self, leases: Sequence[Lease], call: str) -> dict[int, Lease]:
        by_id: dict[int, Lease] = {}
        for lease in leases:
            self._lease_params(lease)
            if lease.job_id in by_id:
                raise InvalidInput(f"{call} got job {lease.job_id} twice")
            by_id[lease.job_id] = lease
        return by_id
