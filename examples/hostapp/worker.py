"""The app's worker: ``HOSTAPP_DATABASE_URL=... python worker.py`` (Ctrl-C stops it)."""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import sqlq_orm
from app import make_engine, make_queue
from models import Order

log = logging.getLogger("hostapp")


def make_registry(engine: Engine) -> sqlq_orm.HandlerRegistry:
    """The app's handlers, reading the app's tables through ``engine``."""
    registry = sqlq_orm.HandlerRegistry()

    @registry.handler("send_invoice")
    def send_invoice(job: sqlq_orm.JobContext) -> str:
        # The app's own columns come with the job: follow order_id to the order.
        order_id, tenant_id = job.columns["order_id"], job.columns["tenant_id"]
        with Session(engine) as session:
            order = session.get(Order, order_id) if order_id is not None else None
            if order is None:
                return "order gone: nothing to send"
            log.info("invoice for order %s (tenant %s) sent", order.number, tenant_id)
            return f"invoice:{order.number}"

    return registry


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    engine = make_engine()
    sqlq_orm.Worker(make_queue(engine), make_registry(engine), concurrency=2).run()


if __name__ == "__main__":
    main()
