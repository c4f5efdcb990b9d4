"""How a task's exceptions become failures: per-task ``retry_on`` / ``no_retry_on``, and
an error code named after the exception's class.

A handler that raises a plain exception fails with ``INTERNAL:UNHANDLED_EXCEPTION``;
a task says more: ``KeyError`` becomes ``EXCEPTION:KEY_ERROR``, ``PaymentDeclined``
``EXCEPTION:PAYMENT_DECLINED``, so failures can be counted per cause (``sqlq stats``,
the dashboard). ``TimeoutError`` and ``ConnectionError`` keep the worker's
``TIMEOUT:UNHANDLED`` / ``NETWORK:UNHANDLED``, and a :class:`~sqlq_orm.JobError` or
:class:`~sqlq_orm.Snooze` the task raised passes through unchanged.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from sqlq_orm.core.backoff import MAX_BACKOFF_SECONDS, Backoff
from sqlq_orm.core.error_codes import summarize_detail
from sqlq_orm.errors import InvalidInput, JobError, Snooze
from sqlq_orm.schema.mixins import ERROR_CODE_MAX
from sqlq_orm.worker.outcomes import NETWORK_UNHANDLED, TIMEOUT_UNHANDLED

log = logging.getLogger("sqlq_orm.tasks")

EXCEPTION_CATEGORY = "EXCEPTION"
_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

ExceptionClasses = tuple[type[BaseException], ...]


def error_code_of(exc: BaseException) -> str:
    """``EXCEPTION:<CLASS_NAME>`` in upper snake case (``ValueError`` ->
    ``EXCEPTION:VALUE_ERROR``), cut to fit the column."""
    name = _WORD_BREAK.sub("_", type(exc).__name__).upper()
    name = re.sub(r"[^A-Z0-9_]", "_", name).strip("_") or "UNNAMED"
    if not name[0].isalpha():
        name = "E_" + name
    return f"{EXCEPTION_CATEGORY}:{name}"[:ERROR_CODE_MAX]


def exception_classes(value: object, option: str) -> ExceptionClasses:
    """An exception class or a tuple of them, as a tuple; InvalidInput otherwise."""
    classes = value if isinstance(value, tuple) else (value,)
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise InvalidInput(f"{option} takes exception classes, got {cls!r}")
    return classes


@dataclass(frozen=True)
class FailurePolicy:
    """Which of a task's exceptions are worth a retry.

    With ``retry_on``, only those exceptions are retried (others fail the job at
    once); ``no_retry_on`` exceptions are never retried. Either way the retry budget
    (``max_retries``) applies, and the wait before a retry is the task's ``backoff``
    if it has one, else the queue's retry policy; a ``JobError(retry_in=...)`` the
    task raised says its own wait and wins over both.
    """

    retry_on: ExceptionClasses | None = None
    no_retry_on: ExceptionClasses = ()
    backoff: Backoff | None = None

    def retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` may be retried under this policy."""
        if self.no_retry_on and isinstance(exc, self.no_retry_on):
            return False
        return self.retry_on is None or isinstance(exc, self.retry_on)

    def classify(self, exc: Exception, task_name: str, retry_number: int = 1) -> BaseException:
        """What the task's run raises to the worker instead of ``exc``; ``retry_number``
        is the retry a failure now would be (1 on the first run), for the backoff."""
        if isinstance(exc, Snooze):
            return exc
        if isinstance(exc, JobError):
            if self.backoff is None or exc.retry_in is not None or not exc.retryable:
                return exc
            return JobError(
                exc.code,
                exc.detail,
                retryable=True,
                retry_in=self.delay(task_name, retry_number),
            )
        if isinstance(exc, (TimeoutError, ConnectionError)) and self.retryable(exc):
            if self.backoff is None:
                return exc  # the worker's own TIMEOUT/NETWORK codes and backoff
            code = TIMEOUT_UNHANDLED if isinstance(exc, TimeoutError) else NETWORK_UNHANDLED
            log.error("task %s raised %s", task_name, type(exc).__name__, exc_info=exc)
            return JobError(code, summary_of(exc), retry_in=self.delay(task_name, retry_number))
        log.error("task %s raised %s", task_name, type(exc).__name__, exc_info=exc)
        retryable = self.retryable(exc)
        return JobError(
            error_code_of(exc),
            summary_of(exc),
            retryable=retryable,
            retry_in=self.delay(task_name, retry_number) if retryable else None,
        )

    def delay(self, task_name: str, retry_number: int) -> float | None:
        """The task's backoff for ``retry_number``; None (the queue's policy) without
        one, or when the task's backoff function fails (logged: a bad backoff must not
        turn a retry into a crash)."""
        if self.backoff is None:
            return None
        try:
            return min(self.backoff.delay_seconds(retry_number), MAX_BACKOFF_SECONDS)
        except Exception:
            log.exception(
                "task %s: its backoff failed for retry %d; using the queue's retry policy",
                task_name,
                retry_number,
            )
            return None


def summary_of(exc: BaseException) -> str:
    """``Type: message``, cut to an error detail."""
    return summarize_detail(f"{type(exc).__name__}: {exc}".rstrip(": ")) or ""
