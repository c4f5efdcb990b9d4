"""One exception hierarchy, rooted at :class:`SqlqError`.

Messages say what was wrong, with the offending value, and what to do about it.
"""

from __future__ import annotations


class SqlqError(Exception):
    """Base class of every error sqlq_orm raises on purpose."""


class SqlqWarning(UserWarning):
    """Something works, but not the way sqlq_orm's guarantees assume; the message says
    what to change."""


class InvalidInput(SqlqError, ValueError):
    """An argument was rejected before anything was written."""


class LeaseLost(SqlqError):
    """The lease this call presented is no longer the job's current lease.

    The job was reclaimed by the sweeper, cancelled, or finished by someone else;
    the call changed nothing. A worker that sees this must stop working on the job
    and must not report an outcome for it.
    """

    def __init__(self, job_id: int, message: str | None = None) -> None:
        self.job_id = job_id
        super().__init__(
            message
            or f"lease on job {job_id} is no longer held by this worker "
            "(reclaimed, cancelled or finished elsewhere); nothing was written"
        )


class MaxRuntimeExceeded(LeaseLost):
    """The job has run past its ``max_runtime_seconds``; its lease is not renewed."""

    def __init__(self, job_id: int, max_runtime_seconds: int | None) -> None:
        super().__init__(
            job_id,
            f"job {job_id} has run past its max runtime of {max_runtime_seconds}s; "
            "the lease was not renewed and the sweeper will end it",
        )


class TransactionRolledBack(SqlqError):
    """The database rolled back the caller's whole transaction (a deadlock victim).

    Raised by a call made with ``session=``: nothing the transaction wrote, the
    caller's own rows included, will commit. Roll the session back and run the whole
    transaction again. (Without ``session=`` the queue runs its own transaction again
    itself.) The database's error is the ``__cause__``.
    """


class JobNotFound(SqlqError, LookupError):
    """No job has the given id."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id!r}")


class InvalidTransition(SqlqError):
    """The job's current status does not allow the requested change."""

    def __init__(self, job_id: int, status: str, action: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"cannot {action} job {job_id}: it is {status}")


class ParentNotSucceeded(InvalidTransition):
    """A retry of a job whose parent ended FAILED or CANCELLED, under the ``cancel``
    policy: the job could only wait for a parent that will never succeed. Retry the
    parent first, or retry it with ``with_dependents=True`` to bring this job back too."""

    def __init__(self, job_id: int, status: str, parent_id: int, parent_status: str) -> None:
        self.parent_id = parent_id
        self.parent_status = parent_status
        super().__init__(job_id, status, "retry")
        self.args = (
            f"cannot retry job {job_id}: its parent job {parent_id} is {parent_status}, and "
            f"job {job_id} runs only once that parent succeeded; retry the parent first, or "
            f"retry({parent_id}, with_dependents=True) to bring job {job_id} back with it",
        )


class DedupeConflict(SqlqError):
    """A dedupe key is held by an unfinished job of another type or queue.

    A dedupe key names one job: enqueueing ``report`` with the key of a live ``sync``
    job would otherwise return the ``sync`` job and never make the ``report`` one.
    Nothing is written; ``existing_id`` is the job that holds the key.
    """

    def __init__(
        self, dedupe_key: str, existing_id: int, existing: tuple[str, str], wanted: tuple[str, str]
    ) -> None:
        self.dedupe_key = dedupe_key
        self.existing_id = existing_id
        (old_type, old_queue), (new_type, new_queue) = existing, wanted
        differences = []
        if old_type != new_type:
            differences.append(f"type {old_type!r}, not type {new_type!r}")
        if old_queue != new_queue:
            differences.append(f"queue {old_queue!r}, not queue {new_queue!r}")
        super().__init__(
            f"dedupe_key {dedupe_key!r} is held by unfinished job {existing_id} of "
            f"{' and '.join(differences)}; nothing was written (use a key per job kind)"
        )


class SchemaNewerThanCode(SqlqError):
    """The database was migrated by a newer sqlq_orm: its schema revision is unknown here.

    Code that does not know a revision cannot know what it changed, so it must not
    read or write the tables as if nothing had. ``found`` are the revisions the
    database records, ``newest`` the newest this code ships.
    """

    def __init__(self, found: list[str], newest: list[str]) -> None:
        self.found = found
        self.newest = newest
        super().__init__(
            f"the database is at sqlq schema revision {', '.join(found)}, which this "
            f"version of sqlq_orm does not know (its newest is {', '.join(newest)}): a "
            "newer sqlq_orm migrated it. Upgrade sqlq_orm here to the version that did; "
            "nothing was done"
        )


class SchemaBehindCode(SqlqError):
    """The database lacks tables or columns the queue's models declare.

    The message names what is missing, where the database's sqlq schema stands, and
    the revision or command that brings it up to date (``sqlq migrate``, or a revision
    of the app's own Alembic). ``missing`` lists ``table`` or ``table.column`` names.
    """

    def __init__(self, message: str, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(message)


class ModelsMissColumns(SqlqError):
    """The job table has columns the queue's models do not map (an app's own columns
    read through the library's models: ``--models`` forgotten). A worker refuses to run
    then: its handlers' ``ctx.columns`` would lack them. ``columns`` names them."""

    def __init__(self, message: str, columns: list[str]) -> None:
        self.columns = columns
        super().__init__(message)


class JobError(SqlqError):
    """Raised by a handler to fail its job with a classified error.

    ``code`` is ``CATEGORY:SUBCATEGORY`` (e.g. ``TIMEOUT:UPSTREAM_API``); ``detail``
    is a short human summary; ``retryable=False`` sends the job straight to FAILED.
    ``retry_in`` (seconds) is "retry in N seconds", like Celery's
    ``self.retry(countdown=N)``: if the job has retries left it spends one and runs
    again ``retry_in`` seconds from now, instead of after the queue's (or the task's)
    backoff; with none left it ends FAILED as any failure does.
    """

    def __init__(
        self,
        code: str,
        detail: str = "",
        *,
        retryable: bool = True,
        retry_in: float | None = None,
    ) -> None:
        self.code = code
        self.detail = detail
        self.retryable = retryable
        self.retry_in = retry_in
        super().__init__(f"{code}: {detail}" if detail else code)


class Snooze(SqlqError):  # noqa: N818 - raised as an instruction, named like one
    """Raised by a handler: "not now, run me again in ``seconds``".

    The job goes back to QUEUED with ``run_at`` that far out, its attempt is recorded
    as SNOOZED with a SNOOZED event, and no retry is spent. A job snoozes at most
    ``Queue.max_snoozes`` times; the next snooze fails it with ``SNOOZE:LIMIT``.
    """

    def __init__(self, seconds: float, reason: str = "") -> None:
        self.seconds = seconds
        self.reason = reason
        super().__init__(f"snooze {seconds}s" + (f": {reason}" if reason else ""))


class HandlersStuck(SqlqError):
    """A worker stopped because abandoned handler threads it cannot kill used up its budget.

    Raised by :meth:`~sqlq_orm.worker.runtime.Worker.run` after a graceful shutdown;
    ``sqlq worker`` exits with status 3 instead. Restart the process: it is the only
    way to reclaim a Python thread.
    """

    def __init__(
        self, worker_id: str, max_abandoned: int, stuck: list[str], *, what: str | None = None
    ) -> None:
        self.worker_id = worker_id
        self.max_abandoned = max_abandoned
        self.stuck = stuck
        what = what or f"{len(stuck)} abandoned handler threads"
        super().__init__(
            f"worker {worker_id} stopped: {what} it gave up on are still running, more "
            f"than its budget max_abandoned={max_abandoned} ({'; '.join(stuck)}); "
            "restart the process to reclaim them"
        )


class MaxRuntimeInterrupt(BaseException):  # noqa: N818 - an interruption, named like one
    """Raised inside a handler thread when its job runs past ``max_runtime_seconds``.

    The worker's thread pool raises it in the handler's own thread (CPython's
    asynchronous exception) so that a handler spinning in Python code stops and its
    thread returns; see :mod:`sqlq_orm.worker.interrupt`. Its outcome is discarded and
    the job ends ``TIMEOUT:MAX_RUNTIME``, as for any job past its max runtime.

    A ``BaseException``, not a :class:`SqlqError`, on purpose (as ``KeyboardInterrupt``
    and ``asyncio.CancelledError`` are, and Dramatiq's ``TimeLimitExceeded``): a
    handler's ``except Exception:`` must not swallow it and keep going. Clean up in
    ``finally`` blocks; do not catch it. Code inside one C call (a blocking read, a
    long ``time.sleep``) sees it only when that call returns.
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message or "the job ran past its max runtime; the worker interrupted its handler"
        )


class JobFailed(SqlqError):
    """The job whose result was asked for ended FAILED or CANCELLED.

    ``status``, ``error_code`` and ``error_detail`` are the job's.
    """

    def __init__(
        self, job_id: int, status: str, error_code: str | None, error_detail: str | None
    ) -> None:
        self.job_id = job_id
        self.status = status
        self.error_code = error_code
        self.error_detail = error_detail
        why = f": {error_code}" if error_code else ""
        detail = f" ({error_detail})" if error_detail else ""
        super().__init__(f"job {job_id} ended {status}{why}{detail}; it has no result")


class ResultNotReady(SqlqError):
    """The job whose result was asked for has not finished yet (``status`` says where it is)."""

    def __init__(self, job_id: int, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job {job_id} is {status}, not finished: no result yet (wait for it)")


class WaitTimeout(SqlqError, TimeoutError):
    """A wait for a job's result ran out of time; the job is still ``status``."""

    def __init__(self, job_id: int, status: str, timeout: float) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job {job_id} is still {status} after waiting {timeout:g}s")


class ResultDoesNotMatch(SqlqError):
    """A job's stored result does not match the return annotation of the task that
    reads it back (stored before results were checked, or the annotation changed
    since): the value cannot be rebuilt as the annotation promises."""

    def __init__(self, job_id: int, task: str, problem: str) -> None:
        self.job_id = job_id
        self.task = task
        self.problem = problem
        super().__init__(
            f"job {job_id}'s stored result does not match the return annotation of task "
            f"{task!r}: {problem}; read it as JSON with Queue.result({job_id})"
        )
