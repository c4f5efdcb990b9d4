"""Engines with sqlq_orm's hooks: :func:`create_engine`, :func:`create_async_engine`
and :func:`configure_engine`.

What a hook does depends on the database (see :mod:`sqlq_orm.db.backends`): on SQLite,
PRAGMAs on every connection and ``BEGIN IMMEDIATE`` for writes. On every database, a
forked child drops the pooled connections it inherited.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import sqlalchemy
from sqlalchemy.engine import Engine

from sqlq_orm.db.backends import backend_named, find_backend
from sqlq_orm.db.pooling import asyncpg_connect_args, use_transaction_pooling
from sqlq_orm.errors import InvalidInput, SqlqWarning

if TYPE_CHECKING:
    # Imported where used: SQLAlchemy's asyncio extension needs greenlet, which a
    # synchronous install (SQLAlchemy 2.1 and later) does not bring.
    from sqlalchemy.ext.asyncio import AsyncEngine

DEFAULT_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite connection waits for the write lock before giving up."""

_HOOKED_ATTR = "_sqlq_hooks_installed"

DEFAULT_DRIVERS = {"postgresql": "psycopg", "mysql": "pymysql", "mariadb": "pymysql"}
"""The driver a URL without one gets (SQLAlchemy's own defaults need C libraries)."""

DEFAULT_ASYNC_DRIVERS = {
    "sqlite": "aiosqlite",
    "postgresql": "asyncpg",
    "mysql": "aiomysql",
    "mariadb": "aiomysql",
}
"""The asyncio driver a URL without one gets in :func:`create_async_engine`."""

DEFAULT_ENGINE_OPTIONS: dict[str, dict[str, Any]] = {
    # The level the queue's writes need (backends/mysql.py), for every connection at
    # connect time: no isolation statements per transaction.
    "mysql": {"isolation_level": "READ COMMITTED"},
    "mariadb": {"isolation_level": "READ COMMITTED"},
}
""":func:`create_engine` (and :func:`create_async_engine`) keyword arguments per
database, unless the caller passes them."""


def with_link_timeouts(
    url: sqlalchemy.URL, kwargs: dict[str, Any], worker_lease_seconds: float | None = None
) -> dict[str, Any]:
    """``kwargs`` for the engine of ``url``, with ``connect_args`` that bound how long
    a connection waits on a link that stopped answering (see each backend's
    ``link_timeouts``): fitted in ``worker_lease_seconds`` for a worker's engine, else
    safe fixed defaults. A setting the caller made in the URL's query or in
    ``connect_args`` is kept as it is."""
    backend = backend_named(url.get_backend_name())
    if backend is None:
        return kwargs
    bounds = backend.link_timeouts(url.get_driver_name(), worker_lease_seconds)
    given = dict(kwargs.get("connect_args") or {})
    chosen = {k: v for k, v in bounds.items() if k not in url.query and k not in given}
    if not chosen:
        return kwargs
    return {**kwargs, "connect_args": {**chosen, **given}}


_INHERITED_POOLS: list[Any] = []
"""In a forked child: the pools it inherited, kept from the garbage collector."""


def _install_fork_guard(engine: Engine) -> None:
    # A pooled connection inherited across fork() is shared with the parent and
    # corrupts both; the child drops its copies without closing the parent's. It also
    # keeps them referenced: collected, an asyncio driver's connection (aiomysql's
    # __del__) closes its transport through the inherited event loop, whose epoll
    # instance the parent shares, so the parent's loop would stop hearing that socket
    # and hang on its next read.
    ref = weakref.ref(engine)

    def _after_fork_in_child() -> None:
        inherited = ref()
        if inherited is not None:
            _INHERITED_POOLS.append(inherited.pool)
            inherited.dispose(close=False)

    os.register_at_fork(after_in_child=_after_fork_in_child)


def hooks_installed(engine: Engine) -> bool:
    """Whether :func:`configure_engine` (or :func:`create_engine`) set this engine up."""
    return bool(getattr(engine, _HOOKED_ATTR, False))


def adopt_engine(engine: Engine) -> None:
    """Make sure an engine handed to a queue carries sqlq_orm's hooks.

    On SQLite a plain engine runs with foreign keys off (no ``ON DELETE CASCADE``, no
    ``SET NULL``), the rollback journal and no busy timeout. The hooks are installed
    here; if the engine has already connected, the connections pooled without them are
    dropped and a :class:`~sqlq_orm.errors.SqlqWarning` says to configure the engine at
    start-up (an engine that never connected missed nothing: no warning).
    Elsewhere the hooks are installed quietly: nothing depends on when (MariaDB's set
    the isolation of the queue's own write transactions as each begins).
    """
    backend = find_backend(engine)
    if hooks_installed(engine) or backend is None:
        return
    configure_engine(engine)
    if not backend.needs_hooks:
        return  # nothing a pooled connection missed (MariaDB's hooks act per transaction)
    if engine.dialect.server_version_info is None:
        # Never connected (the dialect reads the server's version on the first
        # connection): every connection gets the hooks, as if configured at start-up.
        # Flask-SQLAlchemy's db.engine, made by init_app, is such an engine.
        return
    engine.dispose()  # idle connections made before the hooks: the next ones get them
    warnings.warn(
        f"the queue was given a {backend.title} engine without sqlq_orm's connection "
        "settings (foreign keys, WAL, busy timeout); they are installed now, for "
        "connections opened from here on. Create the engine with sqlq_orm.create_engine() "
        "or call sqlq_orm.configure_engine(engine) before the app first uses it",
        SqlqWarning,
        stacklevel=4,
    )


def configure_engine(
    engine: Engine,
    *,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    transaction_pooling: bool = False,
    listen_url: str | sqlalchemy.URL | None = None,
) -> Engine:
    """Install sqlq_orm's hooks on an existing engine (a host app's) and return it.

    On SQLite every new pooled connection gets ``foreign_keys=ON``,
    ``journal_mode=WAL`` (file databases), ``busy_timeout`` and
    ``synchronous=NORMAL``, and transactions begin with ``BEGIN IMMEDIATE`` unless
    the connection asks for a read. Connections already in the pool are not touched,
    so call this before the engine is first used. Calling it twice is harmless.

    ``transaction_pooling``: the engine reaches PostgreSQL through a transaction
    pooler (PgBouncer, ``pool_mode = transaction``); see :mod:`sqlq_orm.db.pooling`.
    Its connections prepare no server-side statements, and the workers' ``LISTEN``
    goes to ``listen_url`` (PostgreSQL's own address), or they poll without one.
    """
    if listen_url is not None and not transaction_pooling:
        raise InvalidInput(
            "listen_url is for an engine behind a transaction pooler; pass "
            "transaction_pooling=True with it (a direct engine listens on its own URL)"
        )
    if transaction_pooling:
        use_transaction_pooling(engine, listen_url)
    if getattr(engine, _HOOKED_ATTR, False):
        return engine
    backend = find_backend(engine)
    if backend is not None:
        backend.install_hooks(engine, busy_timeout_ms)
    _install_fork_guard(engine)
    setattr(engine, _HOOKED_ATTR, True)
    return engine


def create_engine(
    url: str | sqlalchemy.URL,
    *,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    transaction_pooling: bool = False,
    listen_url: str | sqlalchemy.URL | None = None,
    worker_lease_seconds: float | None = None,
    **kwargs: Any,
) -> Engine:
    """Create a SQLAlchemy engine with sqlq_orm's hooks installed.

    Keyword arguments go to :func:`sqlalchemy.create_engine`. A URL with no driver
    uses the one its extra installs: psycopg 3 for ``postgresql://``
    (``sqlq_orm[postgres]``), PyMySQL for ``mysql://`` and ``mariadb://``
    (``sqlq_orm[mysql]``). On MariaDB and MySQL the engine's connections run at READ
    COMMITTED, the level the queue's writes need, unless ``isolation_level=`` says
    otherwise (the queue then asks for it per write transaction). An asyncio driver
    (``+asyncpg``, ``+aiosqlite``) raises :class:`~sqlq_orm.errors.InvalidInput`: that
    is :func:`create_async_engine`'s.

    Waits on the network are bounded (see the "Network and database failures" page):
    on PostgreSQL (psycopg) a connect timeout, TCP keepalives and ``tcp_user_timeout``
    notice a dead link within about a minute. ``worker_lease_seconds`` fits them in a
    worker's lease (a third of it) and, on MariaDB (PyMySQL), adds read and write
    timeouts of half of it; ``sqlq worker`` passes its ``--lease``. Whatever the URL's
    query or ``connect_args`` sets is kept.
    """
    parsed = sqlalchemy.make_url(url)
    default_driver = DEFAULT_DRIVERS.get(parsed.drivername)
    if default_driver is not None:
        parsed = parsed.set(drivername=f"{parsed.drivername}+{default_driver}")
    kwargs = {**DEFAULT_ENGINE_OPTIONS.get(parsed.get_backend_name(), {}), **kwargs}
    kwargs = with_link_timeouts(parsed, kwargs, worker_lease_seconds)
    engine = sqlalchemy.create_engine(parsed, **kwargs)
    if engine.dialect.is_async:
        # Every statement would fail with SQLAlchemy's MissingGreenlet, far from here.
        engine.dispose()
        raise InvalidInput(
            f"{parsed.drivername!r} names an asyncio driver; create_engine needs a "
            "synchronous driver (e.g. postgresql+psycopg://), or use "
            "sqlq_orm.create_async_engine with sqlq_orm.AsyncQueue"
        )
    return configure_engine(
        engine,
        busy_timeout_ms=busy_timeout_ms,
        transaction_pooling=transaction_pooling,
        listen_url=listen_url,
    )


def create_async_engine(
    url: str | sqlalchemy.URL,
    *,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    transaction_pooling: bool = False,
    listen_url: str | sqlalchemy.URL | None = None,
    **kwargs: Any,
) -> AsyncEngine:
    """Create a SQLAlchemy :class:`~sqlalchemy.ext.asyncio.AsyncEngine` with sqlq_orm's
    hooks installed on its ``sync_engine`` (for :class:`sqlq_orm.AsyncQueue`).

    Keyword arguments go to :func:`sqlalchemy.ext.asyncio.create_async_engine`. A URL
    with no driver gets aiosqlite for ``sqlite://`` (``sqlq_orm[aiosqlite]``),
    asyncpg for ``postgresql://`` (``sqlq_orm[asyncpg]``) and aiomysql for
    ``mysql://`` and ``mariadb://`` (``sqlq_orm[aiomysql]``); ``postgresql+psycopg://``
    uses psycopg 3's async connection. The hooks are the synchronous engine's (on
    SQLite the same PRAGMAs and ``BEGIN IMMEDIATE`` for writes): SQLAlchemy runs them
    through its greenlet bridge on every driver, and so are the engine options of
    :func:`create_engine` (MariaDB at READ COMMITTED). With ``transaction_pooling``
    (PgBouncer in transaction mode) asyncpg keeps no statement cache and names each
    statement it prepares uniquely; psycopg prepares none on the server. Through
    psycopg the connections get :func:`create_engine`'s bounds on network waits;
    asyncpg and aiomysql keep their drivers' defaults (asyncpg: pass
    ``connect_args={"command_timeout": SECONDS}`` for a bound per statement).
    """
    parsed = sqlalchemy.make_url(url)
    default_driver = DEFAULT_ASYNC_DRIVERS.get(parsed.drivername)
    if default_driver is not None:
        parsed = parsed.set(drivername=f"{parsed.drivername}+{default_driver}")
    kwargs = {**DEFAULT_ENGINE_OPTIONS.get(parsed.get_backend_name(), {}), **kwargs}
    kwargs = with_link_timeouts(parsed, kwargs)  # libpq's, for postgresql+psycopg
    if transaction_pooling and parsed.get_driver_name() == "asyncpg":
        kwargs["connect_args"] = {**asyncpg_connect_args(), **kwargs.get("connect_args", {})}
    # Needs greenlet: see the TYPE_CHECKING import at the top.
    from sqlalchemy.ext.asyncio import create_async_engine as create_asyncio_engine

    engine = create_asyncio_engine(parsed, **kwargs)
    configure_engine(
        engine.sync_engine,
        busy_timeout_ms=busy_timeout_ms,
        transaction_pooling=transaction_pooling,
        listen_url=listen_url,
    )
    return engine


def require_shared_database(engine: Engine, user: str) -> None:
    """Refuse an engine whose connections would each see a different database.

    An in-memory SQLite database (``sqlite://``, ``:memory:``) exists once per
    connection: a worker's threads, each with a connection of its own, would each find
    an empty database ("no such table"). ``user`` names who needs the sharing.
    """
    url = engine.url
    backend = find_backend(engine)
    if backend is not None and not backend.connections_share_database(url):
        raise InvalidInput(
            f"{user} needs a database its threads share, but "
            f"{url.render_as_string(hide_password=True)!r} is an in-memory SQLite database, "
            "which exists once per connection; use a file, e.g. sqlite:///queue.db"
        )
