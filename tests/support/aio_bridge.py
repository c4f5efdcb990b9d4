"""The asyncio flavour of the conformance suite: :class:`~sqlq_orm.AsyncQueue` behind
the synchronous method names, so one test body runs against ``Queue`` and ``AsyncQueue``.

:class:`LoopThread` owns an event loop on a thread of its own; :class:`BlockingAsyncQueue`
runs each ``AsyncQueue`` coroutine there (``asyncio.run_coroutine_threadsafe``) and
waits for the result, so it can be called from the test's thread and from many threads
at once: their calls then interleave as coroutines on the one loop, which is the
concurrency an asyncio app has.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
import sqlalchemy
from sqlalchemy.orm import Session

from sqlq_orm import AsyncQueue, Queue

_T = TypeVar("_T")

RESULT_WAIT_SECONDS = 120.0

ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg", "mysql": "aiomysql"}
"""The async driver each backend's async flavour runs on."""

FLAVOURS = [
    pytest.param("sync", id="sync"),
    pytest.param("async", id="async"),
]
"""The API flavours of the service tests: ``Queue``, and ``AsyncQueue`` on aiosqlite,
asyncpg or aiomysql."""

PSYCOPG_MODULES = frozenset({"test_service_enqueue", "test_service_fencing"})
"""Service test modules that also run on psycopg 3's async driver (PostgreSQL only)."""


def async_url(db_url: str, flavour: str) -> str:
    """The URL of the same database for an async engine of ``flavour``."""
    url = sqlalchemy.make_url(db_url)
    backend = url.get_backend_name()
    if flavour == "async-psycopg":
        if backend != "postgresql":
            pytest.skip("psycopg's async driver is a PostgreSQL driver")
        driver = "psycopg"
    else:
        driver_or_none = ASYNC_DRIVERS.get(backend)
        if driver_or_none is None:
            pytest.skip(f"no asyncio driver for {backend} in the test dependencies")
        driver = driver_or_none
    return url.set(drivername=f"{backend}+{driver}").render_as_string(hide_password=False)


class LoopThread:
    """An event loop running on a daemon thread until :meth:`close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="aio-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the loop and return its result (or raise its error)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(RESULT_WAIT_SECONDS)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(RESULT_WAIT_SECONDS)
        self.loop.close()


READ_HELPERS = frozenset({"read", "session", "context"})
"""What tests use to look at the database, not queue operations (``read()``, and the
``context`` that ``sqlq_orm.ops`` readers such as the invariant checker take): served by
a ``Queue`` on the test's own synchronous engine."""


class BlockingAsyncQueue:
    """An :class:`AsyncQueue` called with the synchronous queue's method names."""

    def __init__(self, async_queue: AsyncQueue, loop: LoopThread, reader: Queue) -> None:
        self.async_queue = async_queue
        self.loop = loop
        self.reader = reader

    def __getattr__(self, name: str) -> Any:
        if name in READ_HELPERS:
            return getattr(self.reader, name)
        attribute = getattr(self.async_queue, name, None)
        if attribute is None:
            attribute = getattr(self.async_queue.sync_queue, name)
            if callable(attribute):
                raise AttributeError(f"AsyncQueue has no {name}(); the test needs Queue")
            return attribute
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if isinstance(kwargs.get("session"), Session):
                pytest.skip(
                    "a synchronous Session cannot join AsyncQueue; the AsyncSession "
                    "cases are in tests/conformance/test_aio_queue.py"
                )
            return self.loop.run(attribute(*args, **kwargs))

        return call
