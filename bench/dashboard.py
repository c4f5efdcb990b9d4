"""Bench 8: do the dashboard's reads stay within the stats budget at a million jobs?

The table holds N finished jobs (default 1,000,000: 94% SUCCEEDED, 5% FAILED over seven
error codes, 1% CANCELLED, ten types; see :mod:`bench.fill`). Timed, each the median
of the repetitions, against the stats budget of < 250 ms per query:

- the jobs list (:func:`sqlq_orm.ops.joblist.list_jobs`, one page of 50), with no
  filter, a dense filter (FAILED), a sparse one (CANCELLED), a type, one error code, a
  dedupe key that matches nothing (the worst case: the page reads its whole scan
  budget), and deep in the table (``before`` half-way down). The deep page is set
  beside the same page read with ``OFFSET`` (what keyset pagination avoids);
- one job's detail (:func:`sqlq_orm.ops.timeline.job_timeline`);
- the overview's reads: ``finished_history`` on its own (budgeted) and the whole
  overview (``collect_stats`` + ``finished_history``), set beside ``collect_stats``
  alone (what ``sqlq stats`` reads) as its baseline;
- the workers page's reads (:func:`sqlq_orm.ops.stats.collect_workers`) beside
  ``collect_stats`` (what the page read before), and a bulk action's exact count
  (:func:`sqlq_orm.ops.joblist.count_matching`);
- whole pages through the app (Starlette's test client: routing, reads, templates),
  against the issue's page budget of < 100 ms: ``/``, ``/jobs``, ``/jobs?status=FAILED``,
  one job, ``/workers``, ``/metrics``, ``/jobs?worker=absent`` (a filter no index
  serves: the list's total counts the newest 100,000 ids), and sorted lists (by run
  time and by attempts: a sort of the newest 100,000 ids; oldest first: the key). The overview and
  ``/metrics`` read the report every tab shares (:mod:`sqlq_orm.dashboard.cache`);
  the request that computes it (the first one, and one after a write) is timed apart;
- eight tabs polling the overview every 5 s for ``TABS_SECONDS``: the database's
  busy time per second of wall time (every statement timed at the cursor), with the
  shared report beside the same tabs with ``shared_seconds=0`` (each poll computes it),
  against the issue's < 10% of one core.

``SQLQ_BENCH_DASHBOARD_SQLITE`` (a file path) and ``SQLQ_BENCH_DASHBOARD_PG`` (a URL)
name databases already filled by an earlier run (or by :mod:`bench.fill`): the bench
reads them instead of filling new ones (a million jobs take ~20 s on SQLite, ~50 s on
PostgreSQL to fill).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Engine

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    fresh_sqlite,
    median,
    postgres_database,
    postgres_reachable,
    reset_postgres,
    side_by_side,
    timed,
)
from bench.fill import fill_finished_history
from sqlq_orm.ops.history import finished_history
from sqlq_orm.ops.joblist import JobFilter, count_capped, count_matching, list_jobs
from sqlq_orm.ops.stats import collect_stats, collect_workers
from sqlq_orm.ops.timeline import job_timeline

NAME = "dashboard"
BUDGET_MS = 250.0
PAGE_BUDGET_MS = 100.0
"""Issue 26's budget for a whole dashboard page at 1,000,000 jobs."""
PAGE = 50
TABS = 8
TAB_POLL_SECONDS = 5.0
TABS_SECONDS = 20.0
SMOKE_TAB_POLL_SECONDS = 0.25
SMOKE_TABS_SECONDS = 1.0
"""The smoke run (CI) only checks that the tabs' measure works: 1 s, not 2 x 20 s."""
"""How long the simulated tabs poll (each polls 4 times in 20 s)."""
TABS_BUDGET = 0.10
"""Issue 26: eight open tabs cost < 10% of one core of database time."""


def _ms(call: Callable[[], Any]) -> float:
    return timed(call)[0] * 1000


def _offset_page_ms(engine: Engine, offset: int) -> float:
    """The same page as a keyset page half-way down, read with ORDER BY id DESC OFFSET."""
    statement = text(
        "SELECT id, queue, type, status FROM sqlq_jobs ORDER BY id DESC LIMIT :n OFFSET :o"
    )
    with engine.connect() as connection:
        return _ms(lambda: connection.execute(statement, {"n": PAGE, "o": offset}).all())


def _cases(config: Config, label: str, engine: Engine, rows: int) -> list[Result]:
    queue = sqlq_orm.Queue(engine)
    middle = rows // 2
    pages: dict[str, Callable[[], Any]] = {
        "first page, no filter": lambda: list_jobs(queue, limit=PAGE),
        "status=FAILED": lambda: list_jobs(queue, JobFilter(status="FAILED"), limit=PAGE),
        "status=CANCELLED": lambda: list_jobs(queue, JobFilter(status="CANCELLED"), limit=PAGE),
        "type=type_3": lambda: list_jobs(queue, JobFilter(type="type_3"), limit=PAGE),
        "error_code=FILL:CODE_3": lambda: list_jobs(
            queue, JobFilter(error_code="FILL:CODE_3"), limit=PAGE
        ),
        "dedupe_key matching nothing (whole scan budget)": lambda: list_jobs(
            queue, JobFilter(dedupe_key="absent"), limit=PAGE
        ),
        "job detail (timeline)": lambda: job_timeline(queue, middle),
        "finished_history (overview charts)": lambda: finished_history(queue),
        "list total (capped count), no filter": lambda: count_capped(queue, JobFilter()),
        "list total (capped count), worker matching nothing": lambda: count_capped(
            queue, JobFilter(worker="absent")
        ),
        "bulk confirm count, status=FAILED type=type_3": lambda: count_matching(
            queue, JobFilter(type="type_3"), ["FAILED"]
        ),
    }
    results: list[Result] = []
    for name, call in pages.items():
        call()  # warm the page cache and the statement cache once
        samples = [_ms(call) for _ in range(config.reps)]
        results.append(
            Result(NAME, f"{name} at {rows:,} ({label})", median(samples), "ms",
                   target=f"< {BUDGET_MS:.0f} ms", met=median(samples) < BUDGET_MS,
                   samples=samples)
        )  # fmt: skip

    deep = side_by_side(
        {
            "keyset": lambda: _ms(lambda: list_jobs(queue, before=middle, limit=PAGE)),
            "offset": lambda: _offset_page_ms(engine, rows - middle),
        },
        config.reps,
    )
    deep_result = compare(
        NAME,
        f"page half-way down, keyset at {rows:,} ({label})",
        deep["keyset"],
        "same page by OFFSET",
        deep["offset"],
        "ms",
        higher_is_better=False,
        target_text=f"< {BUDGET_MS:.0f} ms",
    )
    deep_result.met = deep_result.value < BUDGET_MS
    results.append(deep_result)

    overview = side_by_side(
        {
            "overview": lambda: _ms(lambda: (collect_stats(queue), finished_history(queue))),
            "stats": lambda: _ms(lambda: collect_stats(queue)),
        },
        config.reps,
    )
    results.append(
        compare(
            NAME,
            f"overview page's reads at {rows:,} ({label})",
            overview["overview"],
            "collect_stats alone (sqlq stats)",
            overview["stats"],
            "ms",
            higher_is_better=False,
            note="the whole report, like collect_stats in bench scaling: informational",
        )
    )
    workers = side_by_side(
        {
            "workers": lambda: _ms(lambda: collect_workers(queue)),
            "stats": lambda: _ms(lambda: collect_stats(queue)),
        },
        config.reps,
    )
    workers_result = compare(
        NAME,
        f"workers page's reads (collect_workers) at {rows:,} ({label})",
        workers["workers"],
        "collect_stats (what /workers read before)",
        workers["stats"],
        "ms",
        higher_is_better=False,
        target_text=f"< {PAGE_BUDGET_MS:.0f} ms",
    )
    workers_result.met = workers_result.value < PAGE_BUDGET_MS
    results.append(workers_result)
    results += _pages(config, label, queue, rows)
    return results


def _pages(config: Config, label: str, queue: sqlq_orm.Queue, rows: int) -> list[Result]:
    """Whole pages through the app, as a browser on loopback asks for them."""
    from starlette.testclient import TestClient

    from sqlq_orm.dashboard import create_app

    client = TestClient(
        create_app(queue, refresh_seconds=0), base_url="http://127.0.0.1", client=("127.0.0.1", 1)
    )
    results = []
    # The request that computes the shared report: a fresh app per sample.
    cold = []
    for _ in range(config.reps):
        fresh = TestClient(create_app(queue), base_url="http://127.0.0.1", client=("127.0.0.1", 1))
        cold.append(_ms(lambda c=fresh: c.get("/")))
        fresh.close()
    results.append(
        Result(NAME, f"page / computing the shared report at {rows:,} ({label})", median(cold),
               "ms", samples=cold,
               note="once per refresh for every tab, in the background after the first")
    )  # fmt: skip
    paths = (
        "/", "/jobs", "/jobs?status=FAILED", "/jobs?worker=absent", "/jobs?sort=run_at",
        "/jobs?sort=attempts&dir=asc&status=FAILED", "/jobs?sort=id&dir=asc",
        f"/jobs/{rows // 2}", "/workers", "/metrics",
    )  # fmt: skip
    for path in paths:
        assert client.get(path).status_code == 200, path  # warm, and it must answer
        samples = [_ms(lambda p=path: client.get(p)) for _ in range(config.reps)]
        results.append(
            Result(NAME, f"page {path} at {rows:,} ({label})", median(samples), "ms",
                   target=f"< {PAGE_BUDGET_MS:.0f} ms", met=median(samples) < PAGE_BUDGET_MS,
                   samples=samples)
        )  # fmt: skip
    client.close()
    results.append(_tabs(label, queue, rows, config))
    return results


@contextlib.contextmanager
def _database_busy(engine: Engine) -> Iterator[list[float]]:
    """Seconds spent in the database's statements while inside (timed at the cursor)."""
    busy = [0.0]
    started: dict[int, float] = {}
    lock = threading.Lock()

    def before(conn: Any, cursor: Any, *args: Any) -> None:
        started[id(cursor)] = time.perf_counter()

    def after(conn: Any, cursor: Any, *args: Any) -> None:
        spent = time.perf_counter() - started.pop(id(cursor), time.perf_counter())
        with lock:
            busy[0] += spent

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    try:
        yield busy
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)


def _tabs_share(
    queue: sqlq_orm.Queue, shared_seconds: float, poll_seconds: float, duration: float
) -> float:
    """Eight tabs polling ``/`` every ``poll_seconds``: database seconds per wall second."""
    from starlette.testclient import TestClient

    from sqlq_orm.dashboard import create_app

    app = create_app(queue, refresh_seconds=0, shared_seconds=shared_seconds)
    stop = time.monotonic() + duration

    def tab(number: int) -> None:
        client = TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1))
        time.sleep(number * poll_seconds / TABS)  # tabs opened at different moments
        while time.monotonic() < stop:
            client.get("/")
            time.sleep(poll_seconds)
        client.close()

    with _database_busy(queue.context.engine) as busy:
        began = time.monotonic()
        threads = [threading.Thread(target=tab, args=(n,)) for n in range(TABS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return busy[0] / (time.monotonic() - began)


def _tabs(label: str, queue: sqlq_orm.Queue, rows: int, config: Config) -> Result:
    smoke = config.mode == "smoke"
    poll = SMOKE_TAB_POLL_SECONDS if smoke else TAB_POLL_SECONDS
    duration = SMOKE_TABS_SECONDS if smoke else TABS_SECONDS
    shared = _tabs_share(queue, 5.0, poll, duration)
    alone = _tabs_share(queue, 0.0, poll, duration)
    result = compare(
        NAME,
        f"{TABS} tabs polling / every {poll:g} s, database time per second,"
        f" at {rows:,} ({label})",
        [shared * 100],
        "each poll computing the report",
        [alone * 100],
        "% of a core",
        higher_is_better=False,
        target_text=f"< {TABS_BUDGET * 100:.0f}%",
        note=f"{duration:g} s of polling each",
    )
    result.met = shared < TABS_BUDGET
    return result


def _filled(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.exec_driver_sql("SELECT count(*) FROM sqlq_jobs").scalar_one())


def run(config: Config) -> list[Result]:
    rows = config.size(full=1_000_000, quick=200_000, smoke=2_000)
    reuse_sqlite = os.environ.get("SQLQ_BENCH_DASHBOARD_SQLITE")
    if reuse_sqlite:
        engine = sqlq_orm.create_engine(f"sqlite:///{reuse_sqlite}")
        rows = _filled(engine)
        fill_note = f"reused {reuse_sqlite}"
    else:
        _, engine = fresh_sqlite(config, "dashboard_big")
        started = time.perf_counter()
        fill_finished_history(engine, rows)
        fill_note = (
            f"history filled by raw INSERT ... SELECT in {time.perf_counter() - started:.1f} s"
        )
    try:
        results = _cases(config, "sqlite", engine, rows)
    finally:
        engine.dispose()
    results[0].note = fill_note

    reuse_pg = os.environ.get("SQLQ_BENCH_DASHBOARD_PG")
    if reuse_pg:
        engine = sqlq_orm.create_engine(reuse_pg)
        try:
            results += _cases(config, "postgresql", engine, _filled(engine))
        finally:
            engine.dispose()
        return results
    why_not = postgres_reachable(config.pg_url)
    if why_not is None and config.pg_url:
        with postgres_database(config.pg_url) as url:
            engine = reset_postgres(url)
            fill_finished_history(engine, rows)
            try:
                results += _cases(config, "postgresql", engine, rows)
            finally:
                engine.dispose()
    return results
