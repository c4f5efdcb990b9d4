"""What a handler run came to, and how an exception a handler raised is classified.

Pure logic, no database: :func:`outcome_of_exception` turns whatever a handler raised
into an :class:`Outcome` (an error code, a one-line detail, and whether to retry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlq_orm.core import error_codes
from sqlq_orm.core.backoff import checked_retry_in
from sqlq_orm.errors import InvalidInput, JobError, Snooze

TIMEOUT_UNHANDLED = "TIMEOUT:UNHANDLED"
"""A handler let a ``TimeoutError`` escape."""
NETWORK_UNHANDLED = "NETWORK:UNHANDLED"
"""A handler let a ``ConnectionError`` escape."""
INVALID_ERROR_CODE = "INTERNAL:INVALID_ERROR_CODE"
"""A handler raised ``JobError`` with a code that is not ``CATEGORY:SUBCATEGORY``."""
INVALID_SNOOZE = "INTERNAL:INVALID_SNOOZE"
"""A handler raised ``Snooze`` with a delay the queue refused."""
INVALID_RETRY_IN = "INTERNAL:INVALID_RETRY_IN"
"""A handler raised ``JobError`` with a ``retry_in`` that is not a number of seconds in
``[0, MAX_BACKOFF_SECONDS]`` (negative, NaN, infinite, too large, not a number)."""
INVALID_BACKOFF = "INTERNAL:INVALID_BACKOFF"
"""A task's ``backoff=`` gave a wait that is not a number of seconds in range."""
OUTCOME_REFUSED = "INTERNAL:OUTCOME_REFUSED"
"""The database refused to record the job's own outcome (it is named in the detail);
the job ends FAILED with this code instead, so its batch's other outcomes are kept."""
INVALID_RESULT = "INTERNAL:INVALID_RESULT"
"""A handler returned a ``result_ref`` or a result the queue refused (too long, too
big, not JSON)."""


@dataclass(frozen=True)
class Outcome:
    """What a handler run came to: success (``error_code`` None) or a failure."""

    error_code: str | None = None
    error_detail: str | None = None
    retryable: bool = True
    result_ref: str | None = None
    result: Any = None
    """A value returned as a :class:`~sqlq_orm.core.results.JobResult`, to store as JSON."""
    snooze: float | None = None
    """Seconds until the job runs again, when the handler raised ``Snooze``."""
    retry_in: float | None = None
    """Seconds until a retried failure runs again, instead of the queue's backoff
    (``JobError(retry_in=...)``, or a task's own backoff)."""

    @property
    def succeeded(self) -> bool:
        """Whether the handler returned normally."""
        return self.error_code is None and self.snooze is None

    @property
    def snoozed(self) -> bool:
        """Whether the handler asked to run again later (``Snooze``)."""
        return self.snooze is not None


PLAIN_SUCCESS = Outcome()
"""A handler that returned None: nothing to store. Shared (an Outcome is frozen), so a
no-op job builds none and the completer knows it by identity."""


def one_line(text: str) -> str:
    """The first line of ``text`` (stripped): enough for a log line or an error detail."""
    return text.strip().splitlines()[0] if text.strip() else ""


def outcome_of_exception(exc: BaseException) -> Outcome:
    """Classify what a handler raised: its own ``JobError``, or an unclassified error.

    Anything but a ``JobError`` becomes ``INTERNAL:UNHANDLED_EXCEPTION`` (or
    ``TIMEOUT:UNHANDLED`` / ``NETWORK:UNHANDLED`` where the type says so), retryable,
    with a one-line ``Type: message`` summary; the traceback belongs in the log.
    """
    if isinstance(exc, Snooze):
        return Outcome(error_detail=exc.reason or None, snooze=exc.seconds)
    if isinstance(exc, JobError):
        try:
            code = error_codes.normalize_error_code(exc.code)
        except InvalidInput:
            return Outcome(
                INVALID_ERROR_CODE,
                f"handler raised JobError with invalid code {exc.code!r}: {exc.detail}",
                retryable=False,
            )
        if exc.retry_in is not None:
            try:
                checked_retry_in(exc.retry_in)
            except InvalidInput as bad:
                # Checked here, where the value is produced: a bad one fails this job
                # alone, instead of the completer's batch write that carries it.
                return Outcome(
                    INVALID_RETRY_IN,
                    f"handler raised JobError({code}) with an invalid {bad}"
                    + (f"; its detail: {exc.detail}" if exc.detail else ""),
                    retryable=False,
                )
        return Outcome(code, exc.detail or None, retryable=exc.retryable, retry_in=exc.retry_in)
    summary = f"{type(exc).__name__}: {one_line(str(exc))}".rstrip(": ")
    if isinstance(exc, TimeoutError):
        return Outcome(TIMEOUT_UNHANDLED, summary)
    if isinstance(exc, ConnectionError):
        return Outcome(NETWORK_UNHANDLED, summary)
    return Outcome(error_codes.UNHANDLED_EXCEPTION, summary)
