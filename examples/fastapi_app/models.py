"""The app's own table. sqlq's tables (the library's default models) live in the same
database; ``create_tables`` makes both (a real app would use Alembic, see
``examples/hostapp``)."""

from __future__ import annotations

from sqlalchemy import Integer, String
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import sqlq_orm


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    number: Mapped[str] = mapped_column(String(40), unique=True)
    total: Mapped[int] = mapped_column(Integer)
    receipt: Mapped[str | None] = mapped_column(String(200), default=None)


async def create_tables(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
        await connection.run_sync(sqlq_orm.Base.metadata.create_all)
