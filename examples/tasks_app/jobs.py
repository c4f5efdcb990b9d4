"""The app's tasks: typed functions, their arguments checked at the call.

``registry`` is what the worker loads: ``sqlq worker --handlers jobs:registry``. It is
bound to the app's queue in :func:`bind` (no global connection: the app decides).
"""

from __future__ import annotations

import dataclasses
import logging

import sqlq_orm
from sqlq_orm import JobContext

log = logging.getLogger("tasks_app")

registry = sqlq_orm.TaskRegistry()


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    quantity: int
    cents: int


@dataclasses.dataclass(frozen=True)
class Invoice:
    order: str
    total_cents: int


@registry.task(queue="billing", max_retries=5, dedupe_key=lambda order, lines: f"invoice-{order}")
def make_invoice(ctx: JobContext, order: str, lines: list[Line]) -> Invoice:
    """Total an order's lines (a dataclass result, stored with the job)."""
    total = sum(line.quantity * line.cents for line in lines)
    log.info("job %s (attempt %s): invoice for %s, %s cents", ctx.job_id, ctx.attempt, order, total)
    return Invoice(order, total)


@registry.task(queue="mail", no_retry_on=ValueError)
async def send_receipt(to: str, invoice: Invoice) -> None:
    """Mail the receipt (an ``async def`` task, run on the worker's event loop)."""
    if "@" not in to:
        raise ValueError(f"not an address: {to!r}")  # EXCEPTION:VALUE_ERROR, not retried
    log.info("receipt for %s (%s cents) sent to %s", invoice.order, invoice.total_cents, to)


def bind(queue: sqlq_orm.Queue) -> sqlq_orm.TaskRegistry:
    """Make ``queue`` the one the tasks enqueue into."""
    return registry.bind(queue)
