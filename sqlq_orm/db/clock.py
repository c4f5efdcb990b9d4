"""Where "now" comes from: the database's clock by default, or a pinned one in tests.

Lease arithmetic is done in SQL with the clock's expression, so a worker whose local
wall clock is wrong cannot shorten or stretch a lease. Local timers (heartbeat
intervals, grace periods) use ``time.monotonic()`` and never touch these clocks.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from sqlalchemy import BigInteger, bindparam
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement


class epoch_now(FunctionElement[int]):  # noqa: N801 - reads like the SQL function it is
    """The database's current time as integer UTC epoch seconds.

    Each backend module in :mod:`sqlq_orm.db.backends` compiles it for its database.
    """

    type = BigInteger()
    name = "epoch_now"
    inherit_cache = True


@compiles(epoch_now)
def _epoch_now_unsupported(element: epoch_now, compiler: Any, **kw: Any) -> str:
    raise CompileError(
        f"sqlq_orm has no database clock for dialect {compiler.dialect.name!r}; "
        "use a supported database, or pass a clock explicitly"
    )


class Clock(Protocol):
    """Anything that can say "now" as a SQL expression of UTC epoch seconds."""

    def sql_now(self) -> ColumnElement[int]:
        """Return the expression the service embeds wherever it needs the time."""
        ...


class DatabaseClock:
    """The database server's own clock (the default)."""

    def sql_now(self) -> ColumnElement[int]:
        return epoch_now()


class PinnedClock:
    """A clock that only moves when told to; for tests and simulations.

    The value is bound at execution time, so statements built once keep seeing the
    current pinned value after :meth:`advance` or :meth:`set`.
    """

    def __init__(self, now: int) -> None:
        self._now = int(now)
        self._lock = threading.Lock()
        self._param = bindparam("sqlq_pinned_now", type_=BigInteger(), callable_=self.now)

    def now(self) -> int:
        """Return the pinned time in epoch seconds."""
        with self._lock:
            return self._now

    def set(self, now: int) -> None:
        """Pin the clock to ``now`` (forward or backward)."""
        with self._lock:
            self._now = int(now)

    def advance(self, seconds: int) -> int:
        """Move the clock by ``seconds`` (may be negative) and return the new time."""
        with self._lock:
            self._now += int(seconds)
            return self._now

    def sql_now(self) -> ColumnElement[int]:
        return self._param
