"""Running behind a transaction pooler (PgBouncer with ``pool_mode = transaction``).

A transaction pooler lends the client a server connection for one transaction at a
time, so nothing may outlive a transaction on the server side:

- **Prepared statements.** psycopg 3 prepares a statement on the server after its
  fifth run on a connection (``prepare_threshold``); the next transaction may run on
  another server connection, where that statement does not exist ("prepared statement
  "_pg3_0" does not exist"). Under transaction pooling every connection of the engine
  gets ``prepare_threshold = None`` (asyncpg: no statement cache, and unique names for
  the statements it must prepare).
- **LISTEN.** The pooler hands the listening server connection to other clients
  between statements, so notifications never reach the worker. The wake-up listener
  connects to ``listen_url`` instead (straight to PostgreSQL, past the pooler), or,
  without one, the worker polls, and says so in its log.
- **Session state.** The queue keeps none: its advisory locks (concurrency keys,
  migrations) are transaction-scoped, isolation levels are set per transaction by the
  driver, and it runs no ``SET`` and makes no temporary tables.

:func:`use_transaction_pooling` marks an engine; :func:`transaction_pooling_of` reads
the mark (the PostgreSQL backend's listener does).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine

from sqlq_orm.errors import InvalidInput

_POOLING_ATTR = "_sqlq_transaction_pooling"


@dataclass(frozen=True)
class TransactionPooling:
    """How an engine behind a transaction pooler reaches PostgreSQL for ``LISTEN``."""

    listen_url: URL | None
    """A direct connection's URL (no pooler in between) for the wake-up listener;
    None: idle workers poll."""


def transaction_pooling_of(engine: Engine) -> TransactionPooling | None:
    """The engine's transaction pooling settings, or None when it connects directly."""
    found: TransactionPooling | None = getattr(engine, _POOLING_ATTR, None)
    return found


def listen_url_of(value: str | URL) -> URL:
    """``value`` as a psycopg URL for the listener (``postgresql://`` gets ``+psycopg``);
    anything but a PostgreSQL URL is refused."""
    try:
        url = sqlalchemy.make_url(value)
    except sqlalchemy.exc.ArgumentError:
        raise InvalidInput(
            f"listen_url {value!r} is not a database URL; give PostgreSQL's own address, "
            "e.g. postgresql://app@db-primary:5432/app"
        ) from None
    if url.get_backend_name() != "postgresql":
        raise InvalidInput(
            f"listen_url must be a PostgreSQL URL (LISTEN is PostgreSQL's), got "
            f"{url.render_as_string(hide_password=True)!r}"
        )
    return url.set(drivername="postgresql+psycopg")


def asyncpg_connect_args() -> dict[str, Any]:
    """``connect_args`` for SQLAlchemy's asyncpg driver behind a transaction pooler:
    no statement cache, and a name of its own for each statement asyncpg prepares, so
    two clients sharing a server connection never collide on ``__asyncpg_stmt_1__``."""
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": lambda: f"__sqlq_{uuid.uuid4().hex}__",
    }


def _no_server_side_prepare(dbapi_connection: Any, connection_record: Any) -> None:
    # SQLAlchemy's async adapters wrap the driver's connection; psycopg's (sync or
    # async) has the attribute, other drivers are handled by their connect_args.
    driver_connection = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    if hasattr(driver_connection, "prepare_threshold"):
        driver_connection.prepare_threshold = None


def use_transaction_pooling(engine: Engine, listen_url: str | URL | None = None) -> None:
    """Mark ``engine`` as connecting through a transaction pooler (see the module).

    Every connection it opens from here on prepares no statement on the server; the
    wake-up listener uses ``listen_url`` (a direct PostgreSQL URL) or, without one,
    idle workers poll. Only PostgreSQL has transaction poolers:
    :class:`~sqlq_orm.errors.InvalidInput` for any other database.
    """
    if engine.dialect.name != "postgresql":
        raise InvalidInput(
            "transaction_pooling is for PostgreSQL behind a pooler such as PgBouncer; "
            f"this engine is {engine.dialect.name}"
        )
    settings = TransactionPooling(None if listen_url is None else listen_url_of(listen_url))
    if transaction_pooling_of(engine) is None:
        event.listen(engine, "connect", _no_server_side_prepare)
    setattr(engine, _POOLING_ATTR, settings)
