"""The asyncio API: :class:`AsyncQueue`, every :class:`~sqlq_orm.Queue` operation
awaitable, over an :class:`~sqlalchemy.ext.asyncio.AsyncEngine`."""

from sqlq_orm.queue.aio.queue import AsyncQueue

__all__ = ["AsyncQueue"]
