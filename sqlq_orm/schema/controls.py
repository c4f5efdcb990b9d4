"""Operator controls stored as data: the per-queue control row (paused or not).

Every worker reads these rows inside its claim, so a pause reaches every worker on
every machine without any process keeping state another one needs.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, Integer, PrimaryKeyConstraint, String
from sqlalchemy.orm import Mapped, declared_attr, mapped_column
from sqlalchemy.sql.elements import conv

from sqlq_orm.schema.host_bases import DeclarativeOnly
from sqlq_orm.schema.mixins import MYSQL_TABLE_OPTIONS, QUEUE_MAX, WORKER_ID_MAX


class QueueControlMixin(DeclarativeOnly):
    """One queue's operator state (default table ``sqlq_queues``).

    A row exists once an operator has paused the queue or set its rate limit;
    ``paused_at`` is NULL again after a resume (the row stays, with who resumed it
    and when). A queue without a row is running, without a rate limit.
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
    # A rate limit (sqlq_0011): at most rate_limit job starts per rate_period seconds,
    # counted per rate_key of the queue's jobs; both NULL: no limit.
    rate_limit: Mapped[int | None] = mapped_column(Integer)
    rate_period: Mapped[int | None] = mapped_column(Integer)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (
            PrimaryKeyConstraint("name", name=conv(f"pk_{cls.__tablename__}")),
            CheckConstraint(
                "(rate_limit IS NULL AND rate_period IS NULL)"
                " OR (rate_limit >= 1 AND rate_period >= 1)",
                name=conv(f"ck_{cls.__tablename__}_rate_limit_with_period"),
            ),
            MYSQL_TABLE_OPTIONS,
        )
