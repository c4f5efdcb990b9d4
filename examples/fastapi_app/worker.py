"""The app's worker: ``FASTAPI_APP_DATABASE_URL=... python worker.py`` (Ctrl-C stops it).

Its handler is an ``async def``: the worker runs it as a task on its own event loop,
many at once (up to ``concurrency``), while claiming, heartbeats and recording
outcomes stay on the worker's threads.
"""

from __future__ import annotations

import logging

from sqlalchemy import String, cast, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

import sqlq_orm
from app import DATABASE_URL
from models import Order

log = logging.getLogger("fastapi_app")


def make_registry(engine: AsyncEngine) -> sqlq_orm.HandlerRegistry:
    """The handlers, reading and writing the app's tables through ``engine`` (an
    AsyncEngine used only on the worker's event loop)."""
    registry = sqlq_orm.HandlerRegistry()
    sessions = async_sessionmaker(engine)
    # The engine's connections live on the worker's event loop: close them there.
    registry.on_loop_shutdown(engine.dispose)

    @registry.handler("send_receipt")
    async def send_receipt(ctx: sqlq_orm.AsyncJobContext) -> str:
        # A real app would await its mail API here (ctx.sleep wakes at shutdown).
        await ctx.sleep(0)
        async with sessions.begin() as session:
            # One UPDATE, no read before it: on SQLite a transaction that reads first
            # and writes later can find another writer's commit in its way.
            sent = await session.execute(
                update(Order)
                .where(Order.id == ctx.payload["order_id"])
                .values(receipt="receipt for " + Order.number + ": " + cast(Order.total, String))
            )
        if sent.rowcount == 0:  # type: ignore[attr-defined]
            return "order gone"
        log.info("receipt sent for order %s", ctx.payload["order_id"])
        return f"receipt:{ctx.payload['order_id']}"

    return registry


def make_worker(database_url: str = DATABASE_URL, **options: object) -> sqlq_orm.Worker:
    """A worker on the ``mail`` queue: a synchronous queue (the pipeline's threads) and
    the async handlers' own AsyncEngine."""
    queue = sqlq_orm.Queue(sqlq_orm.create_engine(database_url))
    handlers = make_registry(sqlq_orm.create_async_engine(database_url))
    return sqlq_orm.Worker(queue, handlers, queues=["mail"], concurrency=8, **options)  # type: ignore[arg-type]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    make_worker().run()
