"""Retry backoff: how long a failed job waits before its next attempt. Pure, no SQL.

Three shapes, each with ``delay_seconds(retry_number) -> int`` (whole seconds, at
least 1): :class:`RetryPolicy` (exponential with jitter, the queue's default),
:class:`FixedBackoff` and :class:`LinearBackoff`; :class:`FunctionBackoff` wraps a
user's ``(retry_number) -> seconds`` function. :func:`backoff_of` turns what a task's
``backoff=`` option was given into one of them.
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sqlq_orm.errors import InvalidInput

MAX_BACKOFF_SECONDS = 366 * 24 * 3600
"""The longest single retry delay a backoff may ask for (a year): past that it is a bug."""


@runtime_checkable
class Backoff(Protocol):
    """Anything that says how long retry number ``retry_number`` (1 for the first) waits."""

    def delay_seconds(self, retry_number: int, rng: random.Random | None = None) -> int:
        """Whole seconds (>= 1) before retry ``retry_number``."""
        ...


def _check_retry_number(retry_number: int) -> None:
    if retry_number < 1:
        raise InvalidInput(f"retry_number must be >= 1, got {retry_number!r}")


def _checked_seconds(value: object, what: str) -> float:
    """``value`` as seconds in [0, MAX_BACKOFF_SECONDS], or InvalidInput naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be a number of seconds, got {value!r}")
    if not 0 <= value <= MAX_BACKOFF_SECONDS:  # also refuses NaN and infinity
        raise InvalidInput(
            f"{what} must be between 0 and {MAX_BACKOFF_SECONDS} seconds, got {value!r}"
        )
    return float(value)


def checked_retry_in(value: object, what: str = "retry_in") -> float:
    """``value`` (a ``JobError(retry_in=...)``, or what a backoff returned) as seconds in
    ``[0, MAX_BACKOFF_SECONDS]``; :class:`~sqlq_orm.errors.InvalidInput` naming ``what``
    and the value otherwise (negative, NaN, infinite, too large, not a number)."""
    return _checked_seconds(value, what)


def whole_delay(seconds: float) -> int:
    """A delay in whole seconds, never below 1 (a retried job is never claimable in the
    second it failed)."""
    return max(1, math.ceil(seconds))


@dataclass(frozen=True)
class RetryPolicy:
    """How long a failed job waits before its next attempt.

    The n-th retry waits ``base_seconds * 2 ** (n - 1)`` seconds, capped at
    ``max_seconds``, then spread by up to ``jitter`` of itself either way so that a
    burst of failures does not come back as a burst. The result is never below 1 s,
    so a retried job is never claimable in the same second it failed.
    """

    base_seconds: float = 10.0
    max_seconds: float = 3600.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if not (self.base_seconds > 0 and math.isfinite(self.base_seconds)):
            raise InvalidInput(
                f"base_seconds must be a finite number > 0, got {self.base_seconds!r}"
            )
        # Written so that NaN fails too: every comparison with NaN is False.
        if not (math.isfinite(self.max_seconds) and self.max_seconds >= self.base_seconds):
            raise InvalidInput(
                f"max_seconds ({self.max_seconds!r}) must be finite and >= base_seconds "
                f"({self.base_seconds!r})"
            )
        if not 0 <= self.jitter < 1:
            raise InvalidInput(f"jitter must be in [0, 1), got {self.jitter!r}")

    def delay_seconds(self, retry_number: int, rng: random.Random | None = None) -> int:
        """Return the delay before retry number ``retry_number`` (1 for the first)."""
        if retry_number < 1:
            raise InvalidInput(f"retry_number must be >= 1, got {retry_number!r}")
        # Cap the exponent before computing so huge retry numbers cannot overflow.
        exponent = min(retry_number - 1, 62)
        delay = min(self.max_seconds, self.base_seconds * (2.0**exponent))
        spread = delay * self.jitter
        delay += (rng or random).uniform(-spread, spread)
        return max(1, round(delay))


@dataclass(frozen=True)
class FixedBackoff:
    """Every retry waits ``seconds``."""

    seconds: float

    def __post_init__(self) -> None:
        _checked_seconds(self.seconds, "FixedBackoff seconds")

    def delay_seconds(self, retry_number: int, rng: random.Random | None = None) -> int:
        """``seconds``, whatever the retry number."""
        _check_retry_number(retry_number)
        return whole_delay(self.seconds)


@dataclass(frozen=True)
class LinearBackoff:
    """Retry ``n`` waits ``base_seconds + step_seconds * (n - 1)``, capped at ``max_seconds``."""

    base_seconds: float
    step_seconds: float | None = None
    """Added per retry; default ``base_seconds`` (10 s, 20 s, 30 s, ...)."""
    max_seconds: float = 3600.0

    def __post_init__(self) -> None:
        _checked_seconds(self.base_seconds, "LinearBackoff base_seconds")
        if self.step_seconds is not None:
            _checked_seconds(self.step_seconds, "LinearBackoff step_seconds")
        _checked_seconds(self.max_seconds, "LinearBackoff max_seconds")
        if self.max_seconds < self.base_seconds:
            raise InvalidInput(
                f"LinearBackoff max_seconds ({self.max_seconds!r}) must be >= "
                f"base_seconds ({self.base_seconds!r})"
            )

    def delay_seconds(self, retry_number: int, rng: random.Random | None = None) -> int:
        """The linear delay of retry ``retry_number``, capped."""
        _check_retry_number(retry_number)
        step = self.base_seconds if self.step_seconds is None else self.step_seconds
        return whole_delay(min(self.max_seconds, self.base_seconds + step * (retry_number - 1)))


@dataclass(frozen=True)
class FunctionBackoff:
    """A user's ``(retry_number) -> seconds`` function as a backoff.

    What it returns is checked on every call: a value that is not a number of seconds
    in ``[0, MAX_BACKOFF_SECONDS]`` raises :class:`~sqlq_orm.errors.InvalidInput`.
    """

    function: Callable[[int], float]

    def delay_seconds(self, retry_number: int, rng: random.Random | None = None) -> int:
        """What the function says for ``retry_number``, in whole seconds (>= 1)."""
        _check_retry_number(retry_number)
        name = getattr(self.function, "__qualname__", repr(self.function))
        seconds = _checked_seconds(
            self.function(retry_number), f"backoff function {name}({retry_number})"
        )
        return whole_delay(seconds)


def backoff_of(value: object, owner: str) -> Backoff:
    """What a ``backoff=`` option names, as a :class:`Backoff`; InvalidInput otherwise.

    Takes a :class:`RetryPolicy`, :class:`FixedBackoff`, :class:`LinearBackoff` (or
    anything with ``delay_seconds``), a number (fixed seconds), or a function of one
    argument, the retry number, returning seconds: it is called once here with 1 so a
    wrong one fails now rather than on a worker. ``owner`` names who asked (the task).
    """
    if isinstance(value, Backoff):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return FixedBackoff(value)
        except InvalidInput as exc:
            raise InvalidInput(f"{owner}: backoff {exc}") from None
    if callable(value):
        try:
            inspect.signature(value).bind(1)
        except TypeError:
            raise InvalidInput(
                f"{owner}: a backoff function takes one argument, the retry number "
                f"(1 for the first retry), got {value!r}"
            ) from None
        except ValueError:  # no signature to read (some builtins): trust the trial call
            pass
        backoff = FunctionBackoff(value)
        try:
            backoff.delay_seconds(1)
        except InvalidInput as exc:
            raise InvalidInput(f"{owner}: {exc}") from None
        return backoff
    raise InvalidInput(
        f"{owner}: backoff must be a RetryPolicy, FixedBackoff, LinearBackoff, a number "
        f"of seconds or a function (retry_number) -> seconds, got {value!r}"
    )
