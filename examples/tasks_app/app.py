"""Enqueue an order's invoice, then its receipt once the invoice is made.

``TASKS_APP_DATABASE_URL=sqlite:///shop.db python app.py`` migrates the database,
enqueues the invoice task, waits for a worker to run it (start one beside it:
``sqlq --db sqlite:///shop.db worker --handlers jobs:registry --queue billing --queue
mail``) and enqueues the receipt with the invoice it returned.
"""

from __future__ import annotations

import os

import sqlq_orm
from jobs import Line, bind, make_invoice, send_receipt

DATABASE_URL = os.environ.get("TASKS_APP_DATABASE_URL", "sqlite:///shop.db")


def place_order(order: str, to: str, timeout: float = 30.0) -> int:
    """Invoice ``order`` and mail the receipt to ``to``; return the receipt's job id."""
    engine = sqlq_orm.create_engine(DATABASE_URL)
    sqlq_orm.migrate.upgrade(engine)
    bind(sqlq_orm.Queue(engine))
    lines = [Line("tea", 2, 450), Line("mug", 1, 1200)]
    job = make_invoice.enqueue(order, lines)  # (order, 3) would fail here, and in mypy
    invoice = make_invoice.wait(job.id, timeout=timeout)  # an Invoice, rebuilt from JSON
    return send_receipt.enqueue(to=to, invoice=invoice).id


if __name__ == "__main__":
    print(place_order("A-1001", "customer@example.com"))
