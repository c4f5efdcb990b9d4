"""AsyncQueue beyond the shared service suite: the caller's AsyncSession, the engine
hooks on every async driver, and many coroutines (and threads) at once.

The service tests (``test_service_*.py``) already run every queue operation through
``AsyncQueue`` (the ``async`` flavours of the ``queue`` fixture); this module covers
what only the asyncio API has.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, event, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm import AsyncQueue, InvalidInput, LeaseLost
from tests.support.aio_bridge import async_url
from tests.support.pgbouncer import engine_options
from tests.support.queue_helpers import (
    assert_histories_are_legal,
    count_events,
    event_names,
    is_sqlite,
    job_row,
    row_counts,
)

app_metadata = MetaData()
orders = Table(
    "orders", app_metadata, Column("id", Integer, primary_key=True), Column("total", Integer)
)

COROUTINES = 24
BACKLOG = 120


def run(factory: Callable[[AsyncEngine], Coroutine[Any, Any, Any]], url: str) -> Any:
    """Run ``factory(engine)`` on a fresh event loop with a fresh async engine."""

    async def main() -> Any:
        engine = sqlq_orm.create_async_engine(url, **engine_options(url))
        try:
            return await factory(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


@pytest.fixture(params=["async", "async-psycopg"])
def aurl(request: pytest.FixtureRequest, db_url: str, engine) -> str:
    """The test database's URL for an async engine (schema made by ``engine``)."""
    return async_url(db_url, request.param)


def _order_count(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(orders)).scalar_one()


# ------------------------------------------------------------------ the caller's AsyncSession


def test_enqueue_in_a_rolled_back_async_session_leaves_no_job(aurl, engine, clock):
    app_metadata.create_all(engine)
    before = row_counts(engine)

    async def scenario(async_engine: AsyncEngine) -> sqlq_orm.EnqueuedJob:
        queue = AsyncQueue(async_engine, clock=clock)
        async with AsyncSession(async_engine) as session:
            await session.execute(insert(orders).values(id=1, total=42))
            job = await queue.enqueue("email_receipt", {"order": 1}, session=session)
            await session.rollback()
        return job

    job = run(scenario, aurl)

    assert job.created
    assert row_counts(engine) == before
    assert _order_count(engine) == 0


def test_enqueue_many_in_a_committed_async_session_commits_with_the_apps_row(aurl, engine, clock):
    app_metadata.create_all(engine)

    async def scenario(async_engine: AsyncEngine) -> list[int]:
        queue = AsyncQueue(async_sessionmaker(async_engine), clock=clock)
        async with AsyncSession(async_engine) as session, session.begin():
            await session.execute(insert(orders).values(id=1, total=42))
            one = await queue.enqueue("email_receipt", {"order": 1}, session=session)
            more = await queue.enqueue_many([{"type": "audit"}] * 2, session=session)
        return [one.id, *more]

    ids = run(scenario, aurl)

    assert _order_count(engine) == 1
    assert [job_row(engine, job_id).status for job_id in ids] == ["QUEUED"] * 3
    assert event_names(engine, ids[0]) == ["ENQUEUED"]


def test_an_async_session_enqueue_wakes_idle_workers_only_on_commit(aurl, engine, clock):
    wake = threading.Event()
    unsubscribe = sqlq_orm.Queue(engine, clock=clock).context.wakeups.subscribe(["mail"], wake)

    async def scenario(async_engine: AsyncEngine) -> tuple[bool, bool, bool]:
        queue = AsyncQueue(async_engine, clock=clock)
        async with AsyncSession(async_engine) as session:
            await queue.enqueue("a", queue="mail", session=session)
            await session.rollback()
            after_rollback = wake.is_set()
            await queue.enqueue("a", queue="mail", session=session)
            before_commit = wake.is_set()
            await session.commit()
        return after_rollback, before_commit, wake.is_set()

    try:
        assert run(scenario, aurl) == (False, False, True)
    finally:
        unsubscribe()


def test_a_synchronous_session_or_engine_is_refused_naming_it(aurl, engine, clock):
    with pytest.raises(
        InvalidInput, match="needs an AsyncEngine or an async_sessionmaker, got Engine"
    ):
        AsyncQueue(engine)  # type: ignore[arg-type]

    async def scenario(async_engine: AsyncEngine) -> None:
        queue = AsyncQueue(async_engine, clock=clock)
        with (
            Session(engine) as session,
            pytest.raises(InvalidInput, match="session= as an AsyncSession, got <sqlalchemy"),
        ):
            await queue.enqueue("a", session=session)  # type: ignore[arg-type]

    run(scenario, aurl)
    assert row_counts(engine)["sqlq_jobs"] == 0


def test_bad_input_raises_the_same_error_as_queue_and_writes_nothing(aurl, engine, clock):
    async def scenario(async_engine: AsyncEngine) -> None:
        queue = AsyncQueue(async_engine, clock=clock)
        with pytest.raises(InvalidInput, match="priority"):
            await queue.enqueue("a", priority="high")
        with pytest.raises(InvalidInput, match="no_such_column"):
            await queue.enqueue("a", no_such_column=1)

    run(scenario, aurl)
    assert row_counts(engine)["sqlq_jobs"] == 0


# ------------------------------------------------------------------ engine hooks


def test_aiosqlite_connections_get_the_pragmas(db_url, engine):
    if not is_sqlite(engine):
        pytest.skip("SQLite's PRAGMAs")
    url = async_url(db_url, "async")

    async def scenario(async_engine: AsyncEngine) -> tuple[Any, ...]:
        async with async_engine.connect() as connection:
            return tuple(
                [
                    (await connection.exec_driver_sql(f"PRAGMA {name}")).scalar()
                    for name in ("foreign_keys", "journal_mode", "busy_timeout", "synchronous")
                ]
            )

    assert run(scenario, url) == (1, "wal", 30_000, 1)


def test_aiosqlite_write_transactions_begin_immediate(db_url, engine):
    if not is_sqlite(engine):
        pytest.skip("SQLite's BEGIN modes")
    url = async_url(db_url, "async")
    seen: list[str] = []

    async def scenario(async_engine: AsyncEngine) -> None:
        def record(conn, cursor, statement, *rest):
            seen.append(statement)

        queue = AsyncQueue(async_engine)
        await queue.enqueue("first")  # after the queue's one read of the schema
        event.listen(async_engine.sync_engine, "before_cursor_execute", record)
        await queue.enqueue("a")

    run(scenario, url)
    assert [statement.strip() for statement in seen if statement.startswith("BEGIN")] == [
        "BEGIN IMMEDIATE"
    ]


# ------------------------------------------------------------------ many coroutines at once


def test_coroutines_claim_every_job_exactly_once(aurl, engine, clock):
    async def scenario(async_engine: AsyncEngine) -> dict[str, list[int]]:
        queue = AsyncQueue(async_engine, clock=clock)
        await queue.enqueue_many([{"type": "t", "priority": n % 3} for n in range(BACKLOG)])

        async def claimer(worker_id: str) -> tuple[str, list[int]]:
            claimed: list[int] = []
            while leases := await queue.claim(worker_id, limit=3, start=True):
                claimed.extend(lease.job_id for lease in leases)
                await queue.succeed_many(leases)
            return worker_id, claimed

        return dict(await asyncio.gather(*(claimer(f"co-{n}") for n in range(COROUTINES))))

    claims = run(scenario, aurl)

    every = [job_id for claimed in claims.values() for job_id in claimed]
    assert len(every) == BACKLOG and Counter(every).most_common(1)[0][1] == 1
    assert count_events(engine, "CLAIMED") == count_events(engine, "SUCCEEDED") == BACKLOG
    assert assert_histories_are_legal(engine) == BACKLOG


def test_coroutines_and_threads_with_one_dedupe_key_make_one_job(aurl, engine, clock):
    sync_queue = sqlq_orm.Queue(engine, clock=clock)
    barrier = threading.Barrier(3)

    async def scenario(async_engine: AsyncEngine) -> list[tuple[int, bool]]:
        queue = AsyncQueue(async_engine, clock=clock)
        await asyncio.to_thread(barrier.wait)
        results = await asyncio.gather(
            *(queue.enqueue("sync", dedupe_key="nightly") for _ in range(COROUTINES))
        )
        return [(result.id, result.created) for result in results]

    outcomes: list[tuple[int, bool]] = []

    def in_a_loop() -> None:
        outcomes.extend(run(scenario, aurl))

    def in_a_thread() -> None:
        barrier.wait()
        for _ in range(COROUTINES):
            result = sync_queue.enqueue("sync", dedupe_key="nightly")
            outcomes.append((result.id, result.created))

    threads = [threading.Thread(target=in_a_loop) for _ in range(2)]
    threads.append(threading.Thread(target=in_a_thread))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert len(outcomes) == 3 * COROUTINES
    assert len({job_id for job_id, _ in outcomes}) == 1
    assert sum(created for _, created in outcomes) == 1
    assert count_events(engine, "ENQUEUED") == 1


def test_zombie_coroutines_are_fenced_after_a_sweep_and_only_the_new_holder_finishes(
    aurl, engine, clock
):
    async def scenario(async_engine: AsyncEngine) -> tuple[list[Any], list[Any]]:
        queue = AsyncQueue(async_engine, clock=clock, default_lease_seconds=30)
        await queue.enqueue_many([{"type": "t"}] * COROUTINES)
        old = await queue.claim("zombie", limit=COROUTINES, start=True)
        clock.advance(31)
        assert (await queue.sweep()).requeued == COROUTINES
        clock.advance(3600)  # past every retry's backoff
        new = await queue.claim("fresh", limit=COROUTINES, start=True)
        zombies = asyncio.gather(*(queue.succeed(lease) for lease in old), return_exceptions=True)
        holders = asyncio.gather(*(queue.succeed(lease) for lease in new), return_exceptions=True)
        return list(await zombies), list(await holders)

    zombies, holders = run(scenario, aurl)

    assert all(isinstance(outcome, LeaseLost) for outcome in zombies)
    assert holders == [None] * COROUTINES
    assert count_events(engine, "SUCCEEDED") == COROUTINES
    assert assert_histories_are_legal(engine) == COROUTINES


def test_cancel_racing_claims_leaves_every_job_in_one_state(aurl, engine, clock):
    async def scenario(async_engine: AsyncEngine) -> None:
        queue = AsyncQueue(async_engine, clock=clock)
        ids = await queue.enqueue_many([{"type": "t"}] * BACKLOG)

        async def claimer(n: int) -> None:
            while leases := await queue.claim(f"co-{n}", limit=2, start=True):
                outcomes = await asyncio.gather(
                    *(queue.succeed(lease) for lease in leases), return_exceptions=True
                )
                assert all(o is None or isinstance(o, LeaseLost) for o in outcomes), outcomes

        async def canceller() -> None:
            for job_id in ids[::2]:
                with contextlib.suppress(sqlq_orm.InvalidTransition):  # already finished
                    await queue.cancel(job_id, reason="race")

        await asyncio.gather(canceller(), *(claimer(n) for n in range(COROUTINES // 2)))

    run(scenario, aurl)

    counts = sqlq_orm.Queue(engine, clock=clock).counts_by_status()
    assert counts["SUCCEEDED"] + counts["CANCELLED"] == BACKLOG
    assert assert_histories_are_legal(engine) == BACKLOG


def test_one_loops_sqlite_writers_take_turns_one_transaction_at_a_time(db_url, engine, clock):
    if not is_sqlite(engine):
        pytest.skip("SQLite's one writer at a time")
    url = async_url(db_url, "async")
    open_writes = [0]
    most = [0]

    async def scenario(async_engine: AsyncEngine) -> None:
        def began(conn, cursor, statement, *rest):
            if statement.strip() == "BEGIN IMMEDIATE":
                open_writes[0] += 1
                most[0] = max(most[0], open_writes[0])

        def ended(conn):
            if open_writes[0]:
                open_writes[0] -= 1

        event.listen(async_engine.sync_engine, "before_cursor_execute", began)
        event.listen(async_engine.sync_engine, "commit", ended)
        event.listen(async_engine.sync_engine, "rollback", ended)
        queue = AsyncQueue(async_engine, clock=clock)
        await asyncio.gather(*(queue.enqueue("t", {"n": n}) for n in range(BACKLOG)))

    run(scenario, url)

    # Without the loop's turns, the coroutines would all open BEGIN IMMEDIATE at once
    # and wait in SQLite's sleeping busy handler.
    assert most[0] == 1
    assert row_counts(engine)["sqlq_jobs"] == BACKLOG


def test_create_engine_refuses_an_asyncio_driver_naming_it(tmp_path):
    with pytest.raises(InvalidInput, match="'sqlite\\+aiosqlite' names an asyncio driver"):
        sqlq_orm.create_engine(f"sqlite+aiosqlite:///{tmp_path / 'q.db'}")


def test_queue_refuses_an_async_session_naming_asyncqueue(engine, db_url, loop_thread):
    async_engine = sqlq_orm.create_async_engine(async_url(db_url, "async"))
    queue = sqlq_orm.Queue(engine)

    async def scenario() -> None:
        async with AsyncSession(async_engine) as session:
            with pytest.raises(sqlq_orm.InvalidInput, match="pass it to sqlq_orm.AsyncQueue"):
                queue.enqueue("t", session=session)
        await async_engine.dispose()

    loop_thread.run(scenario())
    assert queue.counts_by_status()["QUEUED"] == 0
