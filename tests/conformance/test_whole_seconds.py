"""The clock counts whole seconds, and every deadline errs on the side of the job.

The database's "now" is the current second, truncated. A job claimed at 12:00:00.9
reads "now" as 12:00:00; a deadline of "now + 2" would then end it after 1.1 s. These
tests act at the end of a real second, on the database's own clock, and check that
nothing happens before its time: not the end of a max runtime, not a lease's expiry,
not a delayed job's start. (The arithmetic itself, with a pinned clock, is in the
lease, sweep and claim tests; here the real clock proves it.)
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import sqlq_orm
from sqlq_orm import InvalidInput, Worker
from tests.support.queue_helpers import job_row


def late_in_a_second() -> float:
    """Wait until the wall clock is 0.8-0.9 s into a second; return the time."""
    while not 0.80 <= time.time() % 1 < 0.90:
        time.sleep(0.005)
    return time.time()


def test_nothing_ends_or_starts_before_its_time_on_the_real_clock(engine):
    queue = sqlq_orm.Queue(engine)  # the database's clock
    queue.enqueue("slow", max_runtime_seconds=2)
    queue.enqueue("short lease")

    began = late_in_a_second()
    (slow,) = queue.claim("w", start=True, lease_seconds=30)
    (short,) = queue.claim("w", lease_seconds=2)
    delayed = queue.enqueue("delayed", delay=2).id
    time.sleep(max(0.0, began + 1.5 - time.time()))  # 1.5 s on: the next second but one

    assert queue.heartbeat(slow) > 0  # not past its max runtime: 1.5 s of 2
    assert queue.sweep().total == 0  # neither the run nor the 2 s lease ended
    assert [lease.job_id for lease in queue.claim("w", limit=5)] == []  # delay=2: not yet
    assert job_row(engine, short.job_id).status == "CLAIMED"
    assert job_row(engine, delayed).status == "QUEUED"


def test_a_lease_too_short_to_renew_is_refused_everywhere(engine):
    with pytest.raises(InvalidInput, match="lease_seconds must be >= 2, got 1"):
        sqlq_orm.Queue(engine, default_lease_seconds=1)
    queue = sqlq_orm.Queue(engine)
    queue.enqueue("t")
    with pytest.raises(InvalidInput, match="lease_seconds must be >= 2, got 1"):
        queue.claim("w", lease_seconds=1)
    with pytest.raises(InvalidInput, match="lease_seconds must be >= 2, got 1"):
        Worker(queue, {}, lease_seconds=1, install_signal_handlers=False)
    assert queue.counts_by_status()["QUEUED"] == 1  # nothing claimed


def test_the_command_line_refuses_a_one_second_lease(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", f"sqlite:///{tmp_path}/q.db", "worker",
         "--handlers", "tests.support.handlers_for_tests:registry", "--lease", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert "--lease" in run.stderr and "from 2" in run.stderr and "'1'" in run.stderr
