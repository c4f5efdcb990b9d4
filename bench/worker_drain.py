"""sqlq_orm's real ``Worker`` draining pre-enqueued no-op jobs, for the peer comparisons.

One spawned process runs ``Worker(..., burst=True)`` (it exits once nothing is left);
the clock runs from "go" to its report, as in the ``workers`` bench. Afterwards the
database is checked: every job SUCCEEDED and its full history kept (ENQUEUED written,
CLAIMED, STARTED, SUCCEEDED in its attempt row). With ``async_handler=True`` the no-op is an
``async def``, run as a task on the worker's event loop.
"""

from __future__ import annotations

from typing import Any

import sqlq_orm
from bench.core import count_events, count_rows, run_children

POLL_INTERVAL = 0.05
"""As in the ``workers`` bench: a burst worker's last empty poll ends the run."""


def _noop(context: Any) -> None:
    return None


async def _noop_async(context: Any) -> None:
    return None


def _worker_process(
    url: str, concurrency: int, async_handler: bool, pool: str, go: Any, out: Any
) -> None:
    from sqlq_orm.worker.runtime import Worker

    engine = sqlq_orm.create_engine(url)
    worker = Worker(
        sqlq_orm.Queue(engine),
        {"noop": _noop_async if async_handler else _noop},
        concurrency=concurrency,
        poll_interval=POLL_INTERVAL,
        sweep_interval=None,
        burst=True,
        install_signal_handlers=False,
        worker_id=f"bench-drain-{concurrency}",
        pool=pool,
    )
    go.wait()
    stats = worker.run()
    engine.dispose()
    out.put(stats.succeeded)


def enqueue_noops(url: str, jobs: int) -> None:
    """Put ``jobs`` no-op jobs on the queue at ``url`` (setup, never timed)."""
    engine = sqlq_orm.create_engine(url)
    sqlq_orm.Queue(engine).enqueue_many(
        [{"type": "noop", "payload": {"n": n}} for n in range(jobs)]
    )
    engine.dispose()


def drain_with_worker(
    url: str, jobs: int, concurrency: int, *, async_handler: bool = False, pool: str = "thread"
) -> float:
    """Drain the ``jobs`` waiting at ``url`` with one worker process; return jobs/s."""
    child_args = [(url, concurrency, async_handler, pool)]
    elapsed, reports, _ = run_children(_worker_process, child_args, 1.0)
    engine = sqlq_orm.create_engine(url)
    succeeded = count_rows(engine, "sqlq_jobs", "status = 'SUCCEEDED'")
    events = count_events(engine)
    engine.dispose()
    done = sum(reports)
    if not (done == succeeded == jobs and events == 4 * jobs):
        raise AssertionError(f"Worker drain: done={done} succeeded={succeeded} events={events}")
    return jobs / elapsed
