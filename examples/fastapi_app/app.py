"""A FastAPI app that enqueues a job inside the request's own database transaction.

``POST /orders`` adds an order and the job that sends its receipt in one transaction:
both commit or neither does (an order refused half-way leaves no job behind).
Run it with ``FASTAPI_APP_DATABASE_URL=sqlite:///shop.db uvicorn app:app`` and the
worker beside it (``python worker.py``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

import sqlq_orm
from models import Order, create_tables

DATABASE_URL = os.environ.get("FASTAPI_APP_DATABASE_URL", "sqlite:///shop.db")
"""sqlite:// uses aiosqlite, postgresql:// asyncpg (sqlq_orm.create_async_engine)."""


class NewOrder(BaseModel):
    number: str
    total: int


def create_app(database_url: str = DATABASE_URL) -> FastAPI:
    """The app, with its engine, session factory and queue made at start-up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = sqlq_orm.create_async_engine(database_url)
        await create_tables(engine)
        app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
        app.state.queue = sqlq_orm.AsyncQueue(engine)
        yield
        await engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def place_order(order: NewOrder, request: Request) -> dict[str, int]:
        queue: sqlq_orm.AsyncQueue = request.app.state.queue
        session: AsyncSession
        async with request.app.state.sessions.begin() as session:
            row = Order(number=order.number, total=order.total)
            session.add(row)
            await session.flush()  # the order's id, for the job's payload
            job = await queue.enqueue(
                "send_receipt", {"order_id": row.id}, queue="mail", session=session
            )
            if order.total <= 0:
                # Raising inside the block rolls the transaction back: no order, no job.
                raise HTTPException(422, f"an order's total must be positive, got {order.total}")
        return {"order_id": row.id, "job_id": job.id}

    @app.get("/orders/{order_id}")
    async def show_order(order_id: int, request: Request) -> dict[str, object]:
        async with request.app.state.sessions() as session:
            row = await session.get(Order, order_id)
        if row is None:
            raise HTTPException(404, f"no order {order_id}")
        return {"number": row.number, "total": row.total, "receipt": row.receipt}

    return app


app = create_app()
