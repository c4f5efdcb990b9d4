"""How many claimed jobs may wait for a handler thread: only as many as are quick to reach.

A prefetched job is claimed and started in the database before a handler thread takes
it, so its lease and its max runtime count from the claim. That is harmless for jobs
that take milliseconds (the whole point: the threads never wait on a round trip) and
wrong for jobs that take minutes (a job would sit claimed behind a long one, and could
even time out before it ran). So the prefetch a worker uses is bounded by how long the
handlers take: the jobs waiting should all reach a thread within ``max_wait`` seconds.
Until a handler has finished, durations are unknown and nothing is prefetched.
"""

from __future__ import annotations

import threading

MAX_WAIT = 0.25
"""Seconds a prefetched job may expect to wait for a handler thread."""

_SMOOTHING = 0.2  # weight of the newest duration in the moving average


class PrefetchGauge:
    """Tracks handler durations and answers how many jobs may be prefetched now.

    ``limit`` is the worker's ``prefetch`` setting (the most it ever prefetches) and
    ``threads`` its handler thread count. Thread-safe.
    """

    def __init__(self, limit: int, threads: int, max_wait: float = MAX_WAIT) -> None:
        self.limit = limit
        self.threads = threads
        self.max_wait = max_wait
        self._average: float | None = None
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        """A handler took ``seconds``."""
        with self._lock:
            if self._average is None:
                self._average = seconds
            else:
                self._average += _SMOOTHING * (seconds - self._average)

    def average(self) -> float | None:
        """The handlers' recent average duration in seconds; None before the first."""
        with self._lock:
            return self._average

    def allowed(self) -> int:
        """How many jobs may wait for a thread: those all ``threads`` reach in ``max_wait``."""
        with self._lock:
            average = self._average
        if average is None or self.limit == 0:
            return 0
        if average <= 0:
            return self.limit
        return min(self.limit, int(self.threads * self.max_wait / average))
