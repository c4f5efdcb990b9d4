"""The sweeper: takes back expired leases and ends runs past their max runtime, in batches."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from sqlq_orm.core import error_codes, validation
from sqlq_orm.queue.core import SYSTEM_ACTOR, DeferredWrites, retry_if_rolled_back
from sqlq_orm.queue.failures import FailedRun, FailureRecording, retry_delay
from sqlq_orm.queue.types import SweepResult
from sqlq_orm.schema.states import Event, JobStatus

log = logging.getLogger("sqlq_orm")


RetryDelays = Callable[[str, int], float | None]
"""``(job_type, retry_number) -> seconds or None``: a job type's own wait before a retry."""


def _own_retry_delay(retry_delays: RetryDelays | None, row: Any) -> int | None:
    """Whole seconds before the retry of a swept job, by ``retry_delays``; None (the
    queue's policy) without one, with no retry left, or when it fails or gives a bad
    value (logged: a bad backoff must not stop the sweep)."""
    if retry_delays is None or row.retry_count >= row.max_retries:
        return None
    try:
        return retry_delay(retry_delays(row.type, row.retry_count + 1))
    except Exception:  # noqa: BLE001 - see above
        log.exception(
            "sweep: the retry delay of job %s (%s) failed; using the queue's retry policy",
            row.id, row.type,
        )  # fmt: skip
        return None


class Sweeping(FailureRecording):
    """Recovering jobs whose worker is gone, stuck or over time."""

    def sweep(
        self,
        *,
        batch_size: int = 100,
        max_batches: int | None = None,
        actor: str = SYSTEM_ACTOR,
        retry_delays: RetryDelays | None = None,
    ) -> SweepResult:
        """Take back jobs whose lease expired and end RUNNING jobs past max runtime.

        Works in short transactions of up to ``batch_size`` jobs until a batch comes
        back short (or ``max_batches`` is reached). An expired lease is recovered
        (RECOVERED event, then back to QUEUED with ``retry_count + 1``, or FAILED with
        ``LEASE:EXPIRED`` once retries are spent); a run past its max runtime is timed
        out (TIMED_OUT, then the same with ``TIMEOUT:MAX_RUNTIME``). Each row is
        updated only if it still has the status and token the sweeper saw, so a sweep
        racing a finish or a fresh claim never overwrites it.

        A job whose expired lease was only CLAIMED (claimed, never started: a dead
        worker's prefetch) spends no retry: RECOVERED, then RELEASED back to the queue
        at once, with no attempt row, as a graceful shutdown would have released it.
        Only a run that started is charged (a poison job that kills its worker still
        spends its retries).

        ``retry_delays(job_type, retry_number)`` gives the seconds before a requeued
        job's retry (1 for its first retry), or None for the queue's retry policy: a
        worker passes its registry's, so a task's ``backoff=`` applies to runs the
        sweeper took back as to runs that failed on the worker.
        """
        batch_size = validation.require_int(
            "batch_size", batch_size, minimum=1, maximum=validation.INT32_MAX
        )
        total = SweepResult()
        batches = 0
        # One job that cannot be swept (its end fails in the database) must not stop
        # the others: a failed batch is swept again one job at a time, and a job that
        # fails alone is logged and left for the next sweep.
        one_by_one = False
        skipped: set[int] = set()
        while max_batches is None or batches < max_batches:
            size = 1 if one_by_one else batch_size
            tried: list[int] = []
            try:
                result = self._sweep_batch(size, actor, skipped, tried, retry_delays)
            except SQLAlchemyError as exc:
                if not tried:
                    raise  # nothing was picked: the database, not a job, failed
                if not one_by_one:
                    log.warning(
                        "sweep: a batch of %d job(s) failed (%s); sweeping them one by one",
                        len(tried), type(exc).__name__,
                    )  # fmt: skip
                    one_by_one = True
                    continue
                log.error(
                    "sweep: job %s could not be swept (%s: %s); left for the next sweep",
                    tried[0], type(exc).__name__, exc,
                )  # fmt: skip
                skipped.update(tried)
                continue
            total += result
            batches += 1
            if result.total < size:
                break
        return total

    @retry_if_rolled_back
    def _sweep_batch(
        self,
        batch_size: int,
        actor: str,
        skipped: set[int],
        tried: list[int],
        retry_delays: RetryDelays | None = None,
    ) -> SweepResult:
        """One batch; the ids it picked go into ``tried`` (for the caller, should it
        fail), and jobs in ``skipped`` are passed over."""
        expired = timed_out = requeued = failed = 0
        tried.clear()
        # Attempt closes and events of the whole batch go out as two executemany
        # calls after the guarded updates: a round trip per row saved, twice.
        deferred = DeferredWrites()
        with self._write() as connection:
            more = {"p_limit": batch_size + len(skipped)}
            rows = [
                row
                for row in connection.execute(self.sql.expired_leases, more).all()
                if row.id not in skipped
            ][:batch_size]
            seen = {row.id for row in rows}
            room = batch_size - len(rows)
            late = []
            if room > 0:
                late = [
                    row
                    for row in connection.execute(
                        self.sql.past_deadline, {"p_limit": room + len(skipped) + len(seen)}
                    ).all()
                    if row.id not in seen and row.id not in skipped
                ][:room]
            tried.extend(row.id for row in [*rows, *late])
            runs: list[FailedRun] = []
            reasons: list[str] = []
            unstarted = [row for row in rows if row.status == JobStatus.CLAIMED.value]
            released = self._release_unstarted(connection, unstarted, actor, deferred)
            expired += released
            requeued += released
            rows = [row for row in rows if row.status != JobStatus.CLAIMED.value]
            for row, reason in [(r, "expired") for r in rows] + [(r, "timed_out") for r in late]:
                status = JobStatus(row.status)
                if reason == "expired":
                    code = error_codes.LEASE_EXPIRED
                    expired_at = datetime.fromtimestamp(row.lease_expires_at, UTC)
                    detail = (
                        f"lease held by {row.claimed_by} expired at {expired_at:%Y-%m-%d %H:%M:%S}Z"
                    )
                    seen_lease = {
                        "worker": row.claimed_by,
                        "was": status.value,
                        "lease_expires_at": row.lease_expires_at,
                    }
                    note = self._event(row.id, Event.RECOVERED, actor, seen_lease)
                else:
                    code = error_codes.MAX_RUNTIME
                    detail = (
                        f"ran past its max runtime of {row.max_runtime_seconds}s "
                        f"on {row.claimed_by}"
                    )
                    seen_run = {
                        "worker": row.claimed_by,
                        "max_runtime_seconds": row.max_runtime_seconds,
                    }
                    note = self._event(row.id, Event.TIMED_OUT, actor, seen_run)
                runs.append(
                    FailedRun(
                        job_id=row.id,
                        token=row.lease_token,
                        seen_status=status,
                        # A claim that never started has no attempt row; name the one
                        # it would have opened, as its lease did.
                        attempt=row.attempt_count + 1
                        if status is JobStatus.CLAIMED
                        else row.attempt_count,
                        worker_id=row.claimed_by,
                        retry_count=row.retry_count,
                        max_retries=row.max_retries,
                        code=code,
                        detail=detail,
                        actor=actor,
                        note=note,
                        retry_delay=_own_retry_delay(retry_delays, row),
                    )
                )
                reasons.append(reason)
            outcomes = self._end_attempts_with_failure(connection, runs, deferred)
            for reason, outcome in zip(reasons, outcomes, strict=True):
                if outcome is None:
                    # The row moved since we read it (it is locked, so this should not
                    # happen); the guard kept us off it and nothing was written for it.
                    continue
                if reason == "expired":
                    expired += 1
                else:
                    timed_out += 1
                if outcome is JobStatus.QUEUED:
                    requeued += 1
                else:
                    failed += 1
            self._flush(connection, deferred)
            self._announce_finished(
                connection,
                [
                    run.job_id
                    for run, outcome in zip(runs, outcomes, strict=True)
                    if outcome is JobStatus.FAILED
                ],
            )
        if expired or timed_out:
            log.info(
                "sweep: %d expired lease(s), %d timed out; %d requeued, %d failed",
                expired, timed_out, requeued, failed,
            )  # fmt: skip
        return SweepResult(expired, timed_out, requeued, failed)

    def _release_unstarted(
        self, connection: Any, rows: list[Any], actor: str, deferred: DeferredWrites
    ) -> int:
        """Give back the jobs of ``rows`` (expired leases, CLAIMED: never started) with no
        retry spent; return how many the guard let through. Events go to ``deferred``."""
        released = 0
        for row in rows:
            params = {"p_id": row.id, "p_token": row.lease_token}
            if connection.execute(self.sql.release_unstarted, params).rowcount != 1:
                continue  # moved since it was read (it is locked: should not happen)
            released += 1
            expired_at = datetime.fromtimestamp(row.lease_expires_at, UTC)
            deferred.events += [
                self._event(
                    row.id,
                    Event.RECOVERED,
                    actor,
                    {
                        "worker": row.claimed_by,
                        "was": JobStatus.CLAIMED.value,
                        "lease_expires_at": row.lease_expires_at,
                    },
                ),
                self._event(
                    row.id,
                    Event.RELEASED,
                    actor,
                    {
                        "reason": f"claimed by {row.claimed_by}, never started; lease "
                        f"expired at {expired_at:%Y-%m-%d %H:%M:%S}Z; no retry spent"
                    },
                ),
            ]
        return released
