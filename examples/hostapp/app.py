"""The app's side of the queue: its engine, its queue, and an order placed with its job."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import sqlq_orm
from models import MODELS, Order

DATABASE_URL = os.environ.get("HOSTAPP_DATABASE_URL", "sqlite:///hostapp.db")
"""The app's database; sqlq's tables live in it next to ``orders``."""


def make_engine(url: str = DATABASE_URL, **kwargs: Any) -> Engine:
    # sqlq's hooks: on SQLite, foreign keys ON, WAL, busy_timeout; the queue's own
    # writes begin IMMEDIATE, the app's sessions begin as SQLite does (DEFERRED).
    return sqlq_orm.create_engine(url, **kwargs)


def make_queue(engine: Engine) -> sqlq_orm.Queue:
    return sqlq_orm.Queue(engine, models=MODELS)


def place_order(session: Session, queue: sqlq_orm.Queue, *, number: str, tenant_id: int) -> Order:
    """Add an order and the job that invoices it, in the session's transaction.

    Both commit together or neither does: ``session=`` writes the job through the
    session's connection.
    """
    order = Order(number=number)
    session.add(order)
    session.flush()  # the order's id, for the job's order_id
    queue.enqueue(
        "send_invoice",
        {"number": number},
        session=session,
        tenant_id=tenant_id,
        order_id=order.id,
    )
    return order
