"""The chaos soak (see :mod:`tests.support.chaos`): kill, freeze and restart real worker
processes while they drain jobs, then prove nothing was lost, nothing is stuck, the
invariants hold and no zombie write was accepted.

The short soak runs in the normal suite on SQLite and PostgreSQL. The long one runs
with ``make chaos`` (``-m chaos_long``); ``SQLQ_CHAOS_MINUTES`` sets its length
(default 10) and ``SQLQ_CHAOS_SEED`` replays a seed (both soaks print theirs).
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.chaos import Settings, run_soak


def _seed() -> int:
    value = os.environ.get("SQLQ_CHAOS_SEED")
    return int(value) if value else random.SystemRandom().randrange(2**32)


def _assert_clean(report) -> None:
    detail = f"{report.summary()}\nreplay: SQLQ_CHAOS_SEED={report.seed}"
    assert report.violations == [], detail
    assert report.stuck == [], detail


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.parametrize("async_share", [0.0, 0.5], ids=["threads", "threads-and-tasks"])
def test_workers_killed_frozen_and_restarted_lose_no_job_and_accept_no_zombie_write(
    db_url, tmp_path, capsys, async_share
):
    # threads-and-tasks: half the jobs have an async def handler (tasks on each worker's
    # event loop, beside the handler threads).
    seed = _seed()
    settings = Settings(
        db_url=db_url, seconds=15, jobs=500, workers=3, concurrency=4, seed=seed,
        workdir=tmp_path, drain_seconds=180, async_share=async_share,
    )  # fmt: skip

    report = run_soak(settings)

    with capsys.disabled():
        print(f"\n{report.summary()}")
    _assert_clean(report)
    assert report.jobs == 500
    assert report.kills + report.stops + report.terms > 0
    assert report.succeeded > 0


@pytest.mark.chaos_long
def test_long_chaos_soak(tmp_path, request, capsys):
    if "chaos_long" not in (request.config.option.markexpr or ""):
        pytest.skip("the long soak runs with `make chaos` (pytest -m chaos_long)")
    minutes = float(os.environ.get("SQLQ_CHAOS_MINUTES", "10"))
    seed = _seed()
    db_url = os.environ.get("SQLQ_CHAOS_DB") or f"sqlite:///{tmp_path / 'chaos.db'}"
    with capsys.disabled():
        print(f"\nlong chaos soak: seed={seed} minutes={minutes} logs={tmp_path}", flush=True)

    report = run_soak(
        Settings(
            db_url=db_url,
            seconds=minutes * 60,
            jobs=3000,
            top_up=3000,
            workers=4,
            concurrency=4,
            seed=seed,
            workdir=tmp_path,
            verbose=True,
        )  # fmt: skip
    )

    with capsys.disabled():
        print(report.summary(), flush=True)
    _assert_clean(report)
