"""The ``peers`` bench on PostgreSQL: pgqueuer and procrastinate beside sqlq_orm.

Drain: N no-op jobs, enqueued first (not timed), drained by one process each,
interleaved in the same run:

- sqlq_orm's real ``Worker`` (``burst=True``) at concurrency 10 and 64, full history;
- pgqueuer's ``QueueManager`` on asyncpg with its defaults (``batch_size=10``, no
  concurrency cap), ``mode=drain``;
- procrastinate's worker (``wait=False``, ``concurrency=10``, its psycopg connector).

The same ``Worker`` with an ``async def`` no-op handler (tasks on the worker's event
loop) runs beside them at both concurrencies, against pgqueuer too.

Enqueue: ``Queue.enqueue_many`` of N jobs against pgqueuer's batch ``Queries.enqueue``
(lists of entrypoints and payloads) and procrastinate's ``Task.batch_defer_async``;
and ``AsyncQueue.enqueue`` (asyncpg) one job at a time against ``Queue.enqueue``
(psycopg), sqlq_orm against itself.

Each side has its own throw-away database on the ``--pg`` server, emptied and given
its schema again before every timed run. Ratios are sqlq_orm / peer (jobs/s), so
below 1 means the peer is faster.

What each keeps per job differs: sqlq_orm a job row, an attempt row and four events
behind a lease token; pgqueuer deletes the job row on completion and appends a
status row to ``pgqueuer_log``; procrastinate keeps the job row (status
``succeeded``) and its ``procrastinate_events``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy

import sqlq_orm
from bench.core import (
    Config,
    Result,
    compare,
    postgres_database,
    postgres_reachable,
    reset_postgres,
    run_children,
    side_by_side,
)
from bench.worker_drain import drain_with_worker, enqueue_noops

NAME = "peers"
CONCURRENCIES = (10, 64)
PROCRASTINATE_CONCURRENCY = 10
PEERS = {"pgqueuer": ("pgqueuer", "asyncpg"), "procrastinate": ("procrastinate",)}
"""Each PostgreSQL peer and the modules it needs."""


def _installed(modules: tuple[str, ...]) -> str | None:
    """None when every module imports; otherwise the first missing one."""
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            return module
    return None


def _dsn(url: str) -> str:
    """A libpq URI (what asyncpg and psycopg take) for a SQLAlchemy URL."""
    parsed = sqlalchemy.make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def _empty(url: str) -> None:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP SCHEMA public CASCADE")
        connection.exec_driver_sql("CREATE SCHEMA public")
    engine.dispose()


# -------------------------------------------------------------------- pgqueuer


async def _pgqueuer_install(dsn: str) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(dsn)
    await Queries(AsyncpgDriver(connection)).install()
    await connection.close()


async def _pgqueuer_enqueue(dsn: str, jobs: int) -> float:
    """Batch-enqueue ``jobs`` no-ops; return the seconds the enqueue call took."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(connection))
    payloads: list[bytes | None] = [f'{{"n":{n}}}'.encode() for n in range(jobs)]
    started = time.perf_counter()
    ids = await queries.enqueue(["noop"] * jobs, payloads, [0] * jobs)
    elapsed = time.perf_counter() - started
    await connection.close()
    assert len(ids) == jobs, (len(ids), jobs)
    return elapsed


def _pgqueuer_fresh(url: str, jobs: int) -> float:
    _empty(url)
    asyncio.run(_pgqueuer_install(_dsn(url)))
    return asyncio.run(_pgqueuer_enqueue(_dsn(url), jobs)) if jobs else 0.0


def _pgqueuer_process(dsn: str, go: Any, out: Any) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    async def main() -> int:
        connection = await asyncpg.connect(dsn)
        manager = QueueManager(Queries(AsyncpgDriver(connection)))
        done = 0

        @manager.entrypoint("noop")
        async def noop(job: Any) -> None:
            nonlocal done
            done += 1

        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await manager.run(mode=QueueExecutionMode.drain)
        await connection.close()
        return done

    out.put(asyncio.run(main()))


def _pgqueuer_drain(url: str, jobs: int) -> float:
    _pgqueuer_fresh(url, jobs)
    elapsed, reports, _ = run_children(_pgqueuer_process, [(_dsn(url),)], 1.0)
    assert sum(reports) == jobs, (reports, jobs)
    return jobs / elapsed


# --------------------------------------------------------------- procrastinate


def _procrastinate_app(dsn: str) -> Any:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=dsn))
    return app


async def _procrastinate_enqueue(dsn: str, jobs: int, *, install: bool) -> float:
    app = _procrastinate_app(dsn)

    @app.task(name="noop")
    async def noop(n: int) -> None:
        return None

    async with app.open_async():
        if install:
            await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        ids = await noop.batch_defer_async(*({"n": n} for n in range(jobs))) if jobs else []
        elapsed = time.perf_counter() - started
    assert len(ids) == jobs, (len(ids), jobs)
    return elapsed


def _procrastinate_fresh(url: str, jobs: int) -> float:
    _empty(url)
    asyncio.run(_procrastinate_enqueue(_dsn(url), 0, install=True))
    return asyncio.run(_procrastinate_enqueue(_dsn(url), jobs, install=False))


def _procrastinate_process(dsn: str, go: Any, out: Any) -> None:
    app = _procrastinate_app(dsn)
    done = 0

    @app.task(name="noop")
    async def noop(n: int) -> None:
        nonlocal done
        done += 1

    async def main() -> None:
        async with app.open_async():
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            await app.run_worker_async(
                wait=False, concurrency=PROCRASTINATE_CONCURRENCY, install_signal_handlers=False
            )

    asyncio.run(main())
    out.put(done)


def _procrastinate_drain(url: str, jobs: int) -> float:
    _procrastinate_fresh(url, jobs)
    elapsed, reports, _ = run_children(_procrastinate_process, [(_dsn(url),)], 1.0)
    assert sum(reports) == jobs, (reports, jobs)
    return jobs / elapsed


# ---------------------------------------------------------------------- sqlq_orm


def _sqlq_drain(url: str, jobs: int, concurrency: int, async_handler: bool = False) -> float:
    reset_postgres(url).dispose()
    enqueue_noops(url, jobs)
    return drain_with_worker(url, jobs, concurrency, async_handler=async_handler)


def _sqlq_enqueue_one_by_one(url: str, jobs: int) -> float:
    """``Queue.enqueue`` called ``jobs`` times in a row; return jobs/s."""
    engine = reset_postgres(url)
    queue = sqlq_orm.Queue(engine)
    queue.enqueue("noop", {"n": -1})  # a warm pool, as in the async case
    started = time.perf_counter()
    for n in range(jobs):
        queue.enqueue("noop", {"n": n})
    elapsed = time.perf_counter() - started
    engine.dispose()
    return jobs / elapsed


def _sqlq_async_enqueue_one_by_one(url: str, jobs: int) -> float:
    """``await AsyncQueue.enqueue`` ``jobs`` times in a row (asyncpg); return jobs/s."""
    reset_postgres(url).dispose()

    async def main() -> float:
        engine = sqlq_orm.create_async_engine(_dsn(url))  # postgresql:// -> asyncpg
        queue = sqlq_orm.AsyncQueue(engine)
        await queue.enqueue("noop", {"n": -1})
        started = time.perf_counter()
        for n in range(jobs):
            await queue.enqueue("noop", {"n": n})
        elapsed = time.perf_counter() - started
        await engine.dispose()
        return jobs / elapsed

    return asyncio.run(main())


def _sqlq_enqueue(url: str, jobs: int) -> float:
    engine = reset_postgres(url)
    queue = sqlq_orm.Queue(engine)
    specs = [{"type": "noop", "payload": {"n": n}} for n in range(jobs)]
    started = time.perf_counter()
    ids = queue.enqueue_many(specs)
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert len(ids) == jobs, (len(ids), jobs)
    return elapsed


# ------------------------------------------------------------------------- run


def run(config: Config) -> list[Result]:
    drained = config.size(full=5_000, quick=2_000, smoke=30)
    enqueued = config.size(full=20_000, quick=5_000, smoke=100)
    singles = config.size(full=3_000, quick=1_000, smoke=20)
    why_not = postgres_reachable(config.pg_url)
    if why_not is not None:
        return [
            Result(NAME, "PostgreSQL peers (pgqueuer, procrastinate)", float("nan"), "jobs/s",
                   note=f"skipped: {why_not}")
        ]  # fmt: skip
    assert config.pg_url is not None
    results: list[Result] = []
    available: dict[str, bool] = {}
    for peer, modules in PEERS.items():
        missing = _installed(modules)
        if missing is None:
            available[peer] = True
            continue
        results.append(
            Result(NAME, f"{peer} (postgresql)", float("nan"), "jobs/s",
                   note=f"skipped: {missing} is not installed (pip install -e '.[bench]')")
        )  # fmt: skip
    if not available:
        return results
    with contextlib.ExitStack() as stack:
        urls = {
            side: stack.enter_context(postgres_database(config.pg_url))
            for side in ("sqlq", *available)
        }
        drains: dict[str, Callable[[], float]] = {
            f"sqlq c{c}": (lambda c=c: _sqlq_drain(urls["sqlq"], drained, c))  # type: ignore[misc]
            for c in CONCURRENCIES
        }
        drains.update(
            {
                f"sqlq async c{c}": (  # type: ignore[misc]
                    lambda c=c: _sqlq_drain(urls["sqlq"], drained, c, async_handler=True)
                )
                for c in CONCURRENCIES
            }
        )
        enqueues: dict[str, Callable[[], float]] = {
            "sqlq": lambda: enqueued / _sqlq_enqueue(urls["sqlq"], enqueued)
        }
        if "pgqueuer" in available:
            drains["pgqueuer"] = lambda: _pgqueuer_drain(urls["pgqueuer"], drained)
            enqueues["pgqueuer"] = lambda: enqueued / _pgqueuer_fresh(urls["pgqueuer"], enqueued)
        if "procrastinate" in available:
            drains["procrastinate"] = lambda: _procrastinate_drain(urls["procrastinate"], drained)
            enqueues["procrastinate"] = lambda: (
                enqueued / _procrastinate_fresh(urls["procrastinate"], enqueued)
            )
        drain_samples = side_by_side(drains, config.heavy_reps)
        enqueue_samples = side_by_side(enqueues, config.heavy_reps)
        one_by_one = side_by_side(
            {
                "async": lambda: _sqlq_async_enqueue_one_by_one(urls["sqlq"], singles),
                "sync": lambda: _sqlq_enqueue_one_by_one(urls["sqlq"], singles),
            },
            config.heavy_reps,
        )
    results.append(
        compare(
            NAME,
            f"enqueue x{singles:,} one at a time: AsyncQueue (asyncpg) (postgresql)",
            one_by_one["async"],
            "Queue.enqueue (psycopg)",
            one_by_one["sync"],
            "jobs/s",
            note="sqlq_orm against itself: the greenlet bridge's cost",
        )
    )
    labels = {
        "pgqueuer": "pgqueuer (asyncpg, defaults: batch_size=10)",
        "procrastinate": f"procrastinate (concurrency={PROCRASTINATE_CONCURRENCY})",
    }
    for peer in available:
        for concurrency in CONCURRENCIES:
            for kind, handler in (("", "sqlq"), (" async def", "sqlq async")):
                if kind and peer != "pgqueuer":
                    continue
                results.append(
                    compare(
                        NAME,
                        f"drain x{drained:,}: Worker c{concurrency}{kind} vs {peer} (postgresql)",
                        drain_samples[f"{handler} c{concurrency}"],
                        labels[peer],
                        drain_samples[peer],
                        "jobs/s",
                        note="one process each; sqlq_orm keeps attempt + 4 events per job",
                    )
                )
        batch = "Queries.enqueue(lists)" if peer == "pgqueuer" else "Task.batch_defer_async"
        results.append(
            compare(
                NAME,
                f"enqueue_many x{enqueued:,} vs {peer} {batch} (postgresql)",
                enqueue_samples["sqlq"],
                f"{peer} {batch}",
                enqueue_samples[peer],
                "jobs/s",
            )
        )
    return results
