"""Counters of what one worker has done since it started."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class WorkerStats:
    """What a worker has done so far (counts since it started)."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    """Failures reported (the job was retried or ended FAILED)."""
    snoozed: int = 0
    """Jobs whose handler asked to run again later (``Snooze``)."""
    released: int = 0
    """Jobs given back at shutdown."""
    discarded: int = 0
    """Handler outcomes not reported because the lease was lost or self-fenced."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``name`` (job threads count concurrently)."""
        with self._lock:
            setattr(self, name, getattr(self, name) + n)
