"""One answer shared by every request and every open tab, refreshed behind their backs.

The overview and ``/metrics`` show the whole stats report, which at a million jobs
costs the database a few hundred milliseconds (it counts every job by queue, type and
state). Eight tabs polling every five seconds would run it eight times per poll;
:class:`SharedAnswer` runs it once for all of them:

- a request finds an answer younger than ``fresh_seconds``: it gets that answer;
- the answer is older: the request still gets it at once, and one background thread
  (never two) computes the next. The wait before a refresh grows with what the last
  computation cost (``cost_factor`` times it), so the report never takes more than
  ``1 / cost_factor`` of one connection's time, however many tabs are open;
- there is no answer yet, the last refresh failed, or the answer is older than
  ``stale_limit_seconds``: the request computes it itself (and a failure reaches the
  page: a database that is gone is never hidden behind old numbers).

Every answer carries its own "as of" (the report's ``now``), which the page shows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_FRESH_SECONDS = 5.0
DEFAULT_COST_FACTOR = 20
"""A refresh waits at least this many times what the last one cost (5% of a connection)."""
DEFAULT_STALE_LIMIT_SECONDS = 60.0


class SharedAnswer(Generic[T]):
    """The last answer of ``compute()``, shared by every caller (thread-safe)."""

    def __init__(
        self,
        compute: Callable[[], T],
        *,
        fresh_seconds: float = DEFAULT_FRESH_SECONDS,
        cost_factor: float = DEFAULT_COST_FACTOR,
        stale_limit_seconds: float = DEFAULT_STALE_LIMIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._compute = compute
        self.fresh_seconds = fresh_seconds
        self.cost_factor = cost_factor
        self.stale_limit_seconds = stale_limit_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._compute_lock = threading.Lock()  # one computation at a time
        self._answer: T | None = None
        self._has_answer = False
        self._computed_at = 0.0
        self._cost = 0.0
        self._refreshing = False
        self._refresh_failed = False
        self._generation = 0  # bumped by clear(): an answer begun before it is dropped
        self.computations = 0
        """How many times ``compute`` ran (the bench and the tests read it)."""

    def clear(self) -> None:
        """Forget the answer (after a write, so the operator sees its effect)."""
        with self._lock:
            self._has_answer = False
            self._answer = None
            self._generation += 1

    def _age_allowed(self) -> float:
        return max(self.fresh_seconds, self.cost_factor * self._cost)

    def get(self) -> T:
        """The shared answer, computing it here only when there is none worth showing."""
        if self.fresh_seconds <= 0:
            return self._run()
        with self._lock:
            if self._has_answer and not self._refresh_failed:
                age = self._clock() - self._computed_at
                if age <= self._age_allowed():
                    return self._answer  # type: ignore[return-value]
                if age <= self.stale_limit_seconds:
                    if not self._refreshing:
                        self._refreshing = True
                        threading.Thread(
                            target=self._refresh, name="sqlq-dashboard-refresh", daemon=True
                        ).start()
                    return self._answer  # type: ignore[return-value]
        with self._compute_lock:
            # Another request may have computed it while this one waited for the lock.
            with self._lock:
                if (
                    self._has_answer
                    and not self._refresh_failed
                    and self._clock() - self._computed_at <= self._age_allowed()
                ):
                    return self._answer  # type: ignore[return-value]
            generation = self._generation
            return self._store(self._run(), generation)

    def _run(self) -> T:
        started = self._clock()
        try:
            answer = self._compute()
        finally:
            self.computations += 1
            self._cost = self._clock() - started
        return answer

    def _store(self, answer: T, generation: int) -> T:
        with self._lock:
            if generation != self._generation:
                return answer  # computed before a write: good for its caller only
            self._answer = answer
            self._has_answer = True
            self._computed_at = self._clock()
            self._refresh_failed = False
        return answer

    def _refresh(self) -> None:
        try:
            with self._compute_lock:
                generation = self._generation
                self._store(self._run(), generation)
        except Exception:  # noqa: BLE001 - the next request computes it and shows why
            with self._lock:
                self._refresh_failed = True
        finally:
            with self._lock:
                self._refreshing = False
