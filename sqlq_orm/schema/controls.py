"""Operator controls stored as data: the per-queue control row (paused or not).

Every worker reads these rows inside its claim, so a pause reaches every worker on
every machine without any process keeping state another one needs.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, PrimaryKeyConstraint, String
from sqlalchemy.orm import Mapped, declared_attr, mapped_column
from sqlalchemy.sql.elements import conv

from sqlq_orm.schema.mixins import MYSQL_TABLE_OPTIONS, QUEUE_MAX, WORKER_ID_MAX


class QueueControlMixin:
    """One queue's operator state (default table ``sqlq_queues``).

    A row exists once an operator has paused the queue; ``paused_at`` is NULL again
    after a resume (the row stays, with who resumed it and when). A queue without a
    row is running.
    """

    @declared_attr.directive
    def __tablename__(cls) -> str:
        return "sqlq_queues"

    name: Mapped[str] = mapped_column(String(QUEUE_MAX), primary_key=True)
    # When the queue was paused (NULL: it runs); the claim skips paused queues.
    paused_at: Mapped[int | None] = mapped_column(BigInteger)
    # Who last paused or resumed it (an actor name, as on job events).
    changed_by: Mapped[str | None] = mapped_column(String(WORKER_ID_MAX))
    updated_at: Mapped[int] = mapped_column(BigInteger)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (
            PrimaryKeyConstraint("name", name=conv(f"pk_{cls.__tablename__}")),
            MYSQL_TABLE_OPTIONS,
        )
