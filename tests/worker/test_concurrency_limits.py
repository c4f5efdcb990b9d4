"""Concurrency limits held by real worker processes claiming side by side.

Three ``sqlq worker`` processes with four handler threads each run jobs of three keys
(limit 2); each handler logs when it ran. Afterwards no key had more than two
handlers running at any moment, and the invariant checker, run again and again while
they worked, never saw a key held beyond its limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sqlq_orm import JobSpec
from sqlq_orm.ops.invariants import check
from tests.support.worker_helpers import wait_until

pytestmark = pytest.mark.slow

KEYS = ("tenant:1", "tenant:2", "tenant:3")
LIMIT = 2


def most_at_once(log: Path) -> dict[str, int]:
    """Per key, the most spans that overlapped at one moment."""
    moments: dict[str, list[tuple[int, int]]] = {}
    for line in log.read_text().splitlines():
        key, start, end = line.split()
        moments.setdefault(key, []).extend([(int(start), 1), (int(end), -1)])
    peaks = {}
    for key, changes in moments.items():
        running = peak = 0
        for _, change in sorted(changes, key=lambda c: (c[0], c[1])):  # ends before starts
            running += change
            peak = max(peak, running)
        peaks[key] = peak
    return peaks


def test_worker_processes_never_run_more_of_a_key_than_its_limit(live_queue, processes, tmp_path):
    log = tmp_path / "spans.log"
    jobs = 24 * len(KEYS)
    live_queue.enqueue_many(
        [
            JobSpec(
                "span",
                {"key": KEYS[n % 3], "seconds": 0.05, "log_file": str(log)},
                concurrency_key=KEYS[n % 3],
                concurrency_limit=LIMIT,
            )
            for n in range(jobs)
        ]
    )
    for name in ("worker-a", "worker-b", "worker-c"):
        processes.worker(name, "--concurrency", "4")
    seen_violations = []

    def all_done() -> bool:
        seen_violations.extend(
            v for v in check(live_queue) if v.invariant == "concurrency_limit_respected"
        )
        return live_queue.counts_by_status().get("SUCCEEDED", 0) == jobs

    wait_until(all_done, "every job to succeed")

    assert seen_violations == []
    peaks = most_at_once(log)
    assert set(peaks) == set(KEYS)
    assert max(peaks.values()) <= LIMIT, peaks
    assert check(live_queue) == []
