"""Rate limits held by real worker processes claiming side by side.

Three ``sqlq worker`` processes with four handler threads each run jobs of two rate
keys in a queue limited to LIMIT starts per PERIOD seconds; each handler logs when it
started (CLOCK_MONOTONIC, one clock for the machine). Afterwards, for each key: the
starts the claims recorded (``rate_started_at``, whole seconds of the database's
clock) never number more than LIMIT in any PERIOD consecutive seconds, and the
handlers' own start times agree within a second's rounding.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from sqlq_orm import JobSpec
from tests.support.worker_helpers import wait_until

pytestmark = pytest.mark.slow

KEYS = ("api:a", "api:b")
LIMIT = 4
PERIOD = 2
JOBS_PER_KEY = 3 * LIMIT
SCHEDULING_SLACK = 0.3
"""How much later than its claim a handler may start (seconds): the handler-side
check shortens its windows by this much."""


def most_in_a_window(times: list[float], width: float) -> int:
    """The most of ``times`` within any half-open window ``[t, t + width)``."""
    ordered = sorted(times)
    most = 0
    first = 0
    for last, end in enumerate(ordered):
        while end - ordered[first] >= width:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_worker_processes_never_start_more_of_a_key_than_its_rate(live_queue, processes, tmp_path):
    log = tmp_path / "spans.log"
    live_queue.set_rate_limit("default", LIMIT, PERIOD)
    live_queue.enqueue_many(
        [
            JobSpec(
                "span",
                {"key": KEYS[n % 2], "seconds": 0.01, "log_file": str(log)},
                rate_key=KEYS[n % 2],
            )
            for n in range(JOBS_PER_KEY * len(KEYS))
        ]
    )
    for name in ("worker-a", "worker-b", "worker-c"):
        processes.worker(name, "--concurrency", "4")

    wait_until(
        lambda: live_queue.counts_by_status().get("SUCCEEDED", 0) == JOBS_PER_KEY * len(KEYS),
        "every job to succeed",
    )

    j = live_queue.tables.jobs.c
    with live_queue.read() as connection:
        recorded = connection.execute(select(j.rate_key, j.rate_started_at)).all()
    for key in KEYS:
        per_second = Counter(second for k, second in recorded if k == key)
        windows = [sum(per_second[s] for s in range(first, first + PERIOD)) for first in per_second]
        assert max(windows) <= LIMIT, (key, sorted(per_second.items()))
    handler_starts: dict[str, list[float]] = {key: [] for key in KEYS}
    for line in Path(log).read_text().splitlines():
        key, started, _ended = line.split()
        handler_starts[key].append(int(started) / 1e9)
    for key, starts in handler_starts.items():
        assert len(starts) == JOBS_PER_KEY
        # A start counts for PERIOD whole seconds of the database's clock: at least
        # PERIOD - 1 seconds of real time.
        assert most_in_a_window(starts, PERIOD - 1 - SCHEDULING_SLACK) <= LIMIT, key
