"""Operator actions on many jobs at once, chosen by a filter, and discarding jobs.

A bulk action walks the matching jobs in id order, ``batch_size`` at a time (each
batch starts after the last id of the one before, so a run stopped between batches,
by ``max_batches``, a crash or Ctrl-C, is simply run again), and acts on each batch:

- ``cancel_jobs`` and ``retry_jobs`` call :meth:`Queue.cancel` / :meth:`Queue.retry`
  per job, one short transaction each, with all their fencing, events and cascades;
  a job someone else changed meanwhile is counted as skipped.
- ``discard_jobs`` deletes a batch in one transaction, the job rows locked first;
  attempts, events and dependency edges go with their job (``ON DELETE CASCADE``, as
  prune). A job a worker holds (CLAIMED, RUNNING) is never discarded: cancel it first.
  Jobs still waiting for a discarded WAITING or QUEUED job can never run, so they are
  cancelled (``DEPENDENCY:FAILED``) in the same transaction, and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.engine import Connection

from sqlq_orm.core import validation
from sqlq_orm.db import maintenance
from sqlq_orm.db.statements.bulk import DISCARDABLE
from sqlq_orm.errors import InvalidInput, InvalidTransition, JobNotFound, SqlqError
from sqlq_orm.ops.joblist import JobFilter
from sqlq_orm.queue.admin import Administration
from sqlq_orm.queue.core import SYSTEM_ACTOR, retry_if_rolled_back
from sqlq_orm.queue.types import BulkResult
from sqlq_orm.schema.states import JobStatus

log = logging.getLogger("sqlq_orm")

DEFAULT_BULK_BATCH = 500
_UNFINISHED = (JobStatus.WAITING, JobStatus.QUEUED, JobStatus.CLAIMED, JobStatus.RUNNING)
_RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
_NOT_STARTED = frozenset({JobStatus.WAITING.value, JobStatus.QUEUED.value})
_DISCARDABLE_VALUES = frozenset(status.value for status in DISCARDABLE)


class BulkActions(Administration):
    """Cancel, retry and discard jobs chosen by a :class:`~sqlq_orm.ops.joblist.JobFilter`."""

    def discard(self, job_id: int, *, actor: str = SYSTEM_ACTOR) -> int:
        """Delete one job with its attempts, events and dependency edges.

        Refuses a job a worker holds (CLAIMED or RUNNING: cancel it first) with
        :class:`~sqlq_orm.errors.InvalidTransition`; raises
        :class:`~sqlq_orm.errors.JobNotFound` for an unknown id. Jobs waiting for it
        (``depends_on``) are cancelled with ``DEPENDENCY:FAILED``; returns how many.
        """
        validation.job_id(job_id)
        deleted, dependents, seen = self._discard_batch([job_id], actor)
        if not deleted:
            if seen is None:
                raise JobNotFound(job_id)
            raise InvalidTransition(job_id, seen, "discard (cancel it first)")
        return dependents

    def cancel_jobs(
        self,
        job_filter: JobFilter,
        *,
        actor: str = SYSTEM_ACTOR,
        reason: str | None = None,
        batch_size: int = DEFAULT_BULK_BATCH,
        max_batches: int | None = None,
        dry_run: bool = False,
    ) -> BulkResult:
        """Cancel every unfinished job ``job_filter`` matches, as :meth:`cancel` does.

        In batches of ``batch_size`` (see the module); ``dry_run`` only counts.
        Returns a :class:`~sqlq_orm.queue.types.BulkResult`, whose ``dependents`` are
        the jobs cancelled because they waited for one of these.
        """

        def act(job_id: int) -> int:
            return self._cancel(job_id, actor=actor, reason=reason)

        return self._bulk("cancel", job_filter, _UNFINISHED, act, batch_size, max_batches, dry_run)

    def retry_jobs(
        self,
        job_filter: JobFilter,
        *,
        actor: str = SYSTEM_ACTOR,
        batch_size: int = DEFAULT_BULK_BATCH,
        max_batches: int | None = None,
        dry_run: bool = False,
    ) -> BulkResult:
        """Requeue every FAILED or CANCELLED job ``job_filter`` matches, as :meth:`retry`
        does (fresh retry budget; dependents cancelled earlier stay cancelled)."""

        def act(job_id: int) -> int:
            self.retry(job_id, actor=actor)
            return 0

        return self._bulk("retry", job_filter, _RETRYABLE, act, batch_size, max_batches, dry_run)

    def discard_jobs(
        self,
        job_filter: JobFilter,
        *,
        actor: str = SYSTEM_ACTOR,
        batch_size: int = DEFAULT_BULK_BATCH,
        max_batches: int | None = None,
        dry_run: bool = False,
    ) -> BulkResult:
        """Delete every job ``job_filter`` matches that no worker holds, with its
        attempts, events and dependency edges, one transaction per batch (see the
        module). ``dependents``: jobs cancelled because they waited for a discarded
        unfinished one."""
        return self._bulk(
            "discard", job_filter, DISCARDABLE, None, batch_size, max_batches, dry_run, actor
        )

    # ------------------------------------------------------------------ plumbing

    def _bulk(
        self,
        action: str,
        job_filter: JobFilter,
        applies_to: tuple[JobStatus, ...],
        act: Callable[[int], int] | None,
        batch_size: int,
        max_batches: int | None,
        dry_run: bool,
        actor: str = SYSTEM_ACTOR,
    ) -> BulkResult:
        if not isinstance(job_filter, JobFilter):
            raise InvalidInput(f"job_filter must be a JobFilter, got {job_filter!r}")
        if job_filter.is_empty:
            raise InvalidInput(
                f"{action} by filter needs a JobFilter naming at least one of status, "
                "queue, type, error_code, job_id, dedupe_key (an empty one matches every job)"
            )
        statuses = [status.value for status in applies_to]
        if job_filter.status is not None:
            if job_filter.status not in statuses:
                raise InvalidInput(
                    f"{action} applies to {', '.join(statuses)} jobs, not {job_filter.status}"
                )
            statuses = [job_filter.status]
        batch_size = validation.require_int("batch_size", batch_size, minimum=1, maximum=100_000)
        if max_batches is not None:
            max_batches = validation.require_int("max_batches", max_batches, minimum=1)
        where = [term for term in job_filter.conditions(self.tables) if term is not None]
        if dry_run:
            with self.read() as connection:
                matched = connection.execute(self.sql.bulk_count(where, statuses)).scalar_one()
            return BulkResult(action, True, int(matched), 0, 0, 0, 0, True)
        select_batch = self.sql.bulk_batch(where, statuses)
        after, matched, acted, skipped, dependents, batches = 0, 0, 0, 0, 0, 0
        complete = True
        while True:
            if max_batches is not None and batches >= max_batches:
                complete = False
                break
            with self.read() as connection:
                ids = [
                    int(i)
                    for i in connection.execute(
                        select_batch, {"p_after": after, "p_limit": batch_size}
                    ).scalars()
                ]
            if not ids:
                break
            batches += 1
            matched += len(ids)
            after = ids[-1]
            if act is None:
                deleted, cascaded, _ = self._discard_batch(ids, actor)
                acted += deleted
                skipped += len(ids) - deleted
                dependents += cascaded
            else:
                for job_id in ids:
                    try:
                        dependents += act(job_id)
                        acted += 1
                    except (InvalidTransition, JobNotFound):
                        skipped += 1
            if len(ids) < batch_size:
                break
        if acted:
            log.info(
                "%s by filter %s: %d job(s), %d skipped, %d dependent(s), %d batch(es)%s",
                action, job_filter, acted, skipped, dependents, batches,
                "" if complete else "; stopped at max_batches, more match",
            )  # fmt: skip
        return BulkResult(action, False, matched, acted, skipped, dependents, batches, complete)

    @retry_if_rolled_back
    def _discard_batch(self, ids: list[int], actor: str) -> tuple[int, int, str | None]:
        """Delete the discardable jobs of ``ids`` in one transaction: (deleted, dependents
        cancelled, the status of the first job when ``ids`` has one, else None)."""
        cancelled: list[int] = []
        with self._write() as connection:
            self._require_cascade(connection)
            rows = connection.execute(self.sql.lock_jobs_by_id, {"p_ids": ids}).all()
            doomed = [row.id for row in rows if row.status in _DISCARDABLE_VALUES]
            not_started = [row.id for row in rows if row.status in _NOT_STARTED]
            woken: set[str] = set()
            if not_started:
                woken = self._settle_children_of(
                    connection, not_started, cancelled, discarding=set(not_started), actor=actor
                )
            deleted = 0
            if doomed:
                deleted = connection.execute(self.sql.discard_jobs, {"p_ids": doomed}).rowcount
                # A ``wait`` on a discarded job ends (it finds the job gone) at once.
                self._announce_finished(connection, doomed)
        if doomed:
            self._finished(doomed)
        if woken:
            self._wake_workers(None, woken)
        if deleted:
            log.info("discarded %d job(s) (actor %s)", deleted, actor)
        seen = rows[0].status if len(ids) == 1 and rows else None
        return deleted, len(set(cancelled) - set(doomed)), seen

    @staticmethod
    def _require_cascade(connection: Connection) -> None:
        if not maintenance.foreign_keys_enforced(connection):
            raise SqlqError(
                "foreign keys are not enforced on this database connection, so deleting "
                "jobs would leave orphan attempts and events; nothing was deleted. Create "
                "the engine with sqlq_orm.create_engine(), or call "
                "sqlq_orm.configure_engine(engine) before its first use"
            )
