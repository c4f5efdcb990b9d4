"""The worker's asyncio part: the event loop that runs ``async def`` handlers as tasks."""

from sqlq_orm.worker.aio.loop import HandlerLoop

__all__ = ["HandlerLoop"]
