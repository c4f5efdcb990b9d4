"""Retry backoff: exponential with jitter, capped. Pure functions, no SQL."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from sqlq_orm.errors import InvalidInput


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
