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

from sqlq_orm.core.backoff import MAX_BACKOFF_SECONDS, Backoff, checked_retry_in
from sqlq_orm.core.error_codes import summarize_detail
from sqlq_orm.errors import InvalidInput, JobError, Snooze
from sqlq_orm.schema.mixins import ERROR_CODE_MAX
from sqlq_orm.worker.outcomes import INVALID_BACKOFF, NETWORK_UNHANDLED, TIMEOUT_UNHANDLED

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
            return self._with_backoff(exc.code, exc.detail, task_name, retry_number)
        if isinstance(exc, (TimeoutError, ConnectionError)) and self.retryable(exc):
            if self.backoff is None:
                return exc  # the worker's own TIMEOUT/NETWORK codes and backoff
            code = TIMEOUT_UNHANDLED if isinstance(exc, TimeoutError) else NETWORK_UNHANDLED
            log.error("task %s raised %s", task_name, type(exc).__name__, exc_info=exc)
            return self._with_backoff(code, summary_of(exc), task_name, retry_number)
        log.error("task %s raised %s", task_name, type(exc).__name__, exc_info=exc)
        if not self.retryable(exc):
            return JobError(error_code_of(exc), summary_of(exc), retryable=False)
        return self._with_backoff(error_code_of(exc), summary_of(exc), task_name, retry_number)

    def _with_backoff(self, code: str, detail: str, task_name: str, retry_number: int) -> JobError:
        """A retryable ``JobError(code, detail)`` waiting the task's backoff; when the
        backoff gives a wait that is not seconds in range, ``INTERNAL:INVALID_BACKOFF``
        instead (not retried), naming the value and the run's own failure."""
        try:
            retry_in = self.delay(task_name, retry_number)
        except InvalidInput as bad:
            return JobError(
                INVALID_BACKOFF,
                summarize_detail(f"{bad}; the run failed with {code}: {detail}") or "",
                retryable=False,
            )
        return JobError(code, detail, retryable=True, retry_in=retry_in)

    def delay(self, task_name: str, retry_number: int) -> float | None:
        """The task's backoff for ``retry_number``; None (the queue's policy) without
        one, or when the task's backoff function raises (logged: a bad backoff must not
        turn a retry into a crash). A wait the backoff gives that is not seconds in
        ``[0, MAX_BACKOFF_SECONDS]`` (NaN, negative, not a number) raises
        :class:`~sqlq_orm.errors.InvalidInput` naming it; an infinite or larger one is
        cut to ``MAX_BACKOFF_SECONDS``."""
        if self.backoff is None:
            return None
        what = f"task {task_name}: its backoff for retry {retry_number}"
        try:
            seconds: object = self.backoff.delay_seconds(retry_number)
        except InvalidInput as bad:  # a FunctionBackoff's own check of its value
            raise InvalidInput(f"{what}: {bad}") from None
        except Exception:
            log.exception(
                "task %s: its backoff failed for retry %d; using the queue's retry policy",
                task_name,
                retry_number,
            )
            return None
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0:
            seconds = min(seconds, MAX_BACKOFF_SECONDS)  # inf too; NaN fails the check
        return checked_retry_in(seconds, what)


def summary_of(exc: BaseException) -> str:
    """``Type: message``, cut to an error detail."""
    return summarize_detail(f"{type(exc).__name__}: {exc}".rstrip(": ")) or ""
