"""The app's worker: ``HOSTAPP_DATABASE_URL=... python worker.py`` (Ctrl-C stops it)."""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import sqlq_orm
from app import make_engine, make_queue
from models import Job, Order

log = logging.getLogger("hostapp")


def make_registry(engine: Engine) -> sqlq_orm.HandlerRegistry:
    """The app's handlers, reading the app's tables through ``engine``."""
    registry = sqlq_orm.HandlerRegistry()

    @registry.handler("send_invoice")
    def send_invoice(job: sqlq_orm.JobContext) -> str:
        # The job row carries the app's own order_id: follow it to the order.
        with Session(engine) as session:
            row = session.get(Job, job.job_id)
            order = session.get(Order, row.order_id) if row and row.order_id else None
            if order is None:
                return "order gone: nothing to send"
            log.info("invoice for order %s sent", order.number)
            return f"invoice:{order.number}"

    return registry


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    engine = make_engine()
    sqlq_orm.Worker(make_queue(engine), make_registry(engine), concurrency=2).run()


if __name__ == "__main__":
    main()
