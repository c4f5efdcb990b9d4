"""Whole seconds, rounded in the job's favour.

Times are whole epoch seconds (INTEGER columns), and the database's "now" is the
current second, truncated: up to a second behind the true time. An instant computed
as ``now + n`` could therefore come up to a second early: a job killed before its
max runtime, a lease expiring before its length, a delayed job running early. So
every instant the queue sets in the future is one second later than ``now + n``:
never early, at most a second late. Checks ("is it past?") compare with the same
truncated ``now``, so they only ever err late too.
"""

from __future__ import annotations

import math

RESOLUTION_SECONDS = 1
"""The queue's clock counts whole seconds."""

ROUNDING_SECONDS = 1
"""Added to ``now + n`` for an instant ``n`` seconds ahead, so it is never early."""

MIN_LEASE_SECONDS = 2
"""The shortest lease: rounded up by a second and renewed every third of it, a
one-second lease could lapse between two heartbeats that are each on time."""


def not_before(seconds: float) -> int:
    """Whole seconds to add to the database's (truncated) now so that an instant
    ``seconds`` from now is never early: 0 stays 0 (due now), anything more is
    ``ceil(seconds) + 1``."""
    if seconds <= 0:
        return 0
    return math.ceil(seconds) + ROUNDING_SECONDS
