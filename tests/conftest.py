"""Fixtures shared by every test: one ``engine`` fixture over SQLite, PostgreSQL, MariaDB.

SQLite runs on a real file in ``tmp_path``. PostgreSQL runs against the server named
by ``SQLQ_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``):
each test session creates its own throw-away database there, so parallel runs never
see each other's tables. With no server, PostgreSQL tests skip with the reason;
``SQLQ_REQUIRE_POSTGRES=1`` (set by CI) turns that skip into a failure. MariaDB (or
MySQL) works the same way through ``SQLQ_TEST_MARIADB_URL`` and ``SQLQ_REQUIRE_MARIADB``.
The ``pgbouncer`` flavour runs a few modules through a real PgBouncer in transaction
pooling mode (``tests/support/pgbouncer.py``; ``SQLQ_REQUIRE_PGBOUNCER``).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy
from sqlalchemy.engine import Engine

import sqlq_orm
from sqlq_orm.schema.models import Base
from tests.support import factories, server_reset
from tests.support import pgbouncer as pgbouncer_support
from tests.support.aio_bridge import (
    FLAVOURS,
    PSYCOPG_MODULES,
    BlockingAsyncQueue,
    LoopThread,
    async_url,
)
from tests.support.backends import BACKENDS, PGBOUNCER

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
PINNED_START = 1_700_000_000


def _pg_admin_url() -> sqlalchemy.URL:
    url = sqlalchemy.make_url(os.environ.get("SQLQ_TEST_POSTGRES_URL", DEFAULT_PG_URL))
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url


def _required(variable: str) -> bool:
    return os.environ.get(variable, "") not in ("", "0", "false")


def _throwaway_database(
    admin_url: sqlalchemy.URL, server: str, prefix: str, quote: str, drop_suffix: str = ""
) -> Iterator[str]:
    """A fresh database next to ``admin_url`` for this test session, dropped at the end.

    With no server there, skip with the reason (``SQLQ_TEST_<prefix>_URL`` names it),
    or fail where ``SQLQ_REQUIRE_<prefix>`` is set (CI).
    """
    try:
        admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure to connect means "no server"
        message = (
            f"{server} not reachable at {admin_url.render_as_string(hide_password=True)} "
            f"({type(exc).__name__}); set SQLQ_TEST_{prefix}_URL to run these tests"
        )
        if _required(f"SQLQ_REQUIRE_{prefix}"):
            pytest.fail(f"SQLQ_REQUIRE_{prefix} is set but {message}")
        pytest.skip(message)
    name = f"sqlq_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE DATABASE {quote}{name}{quote}")
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{drop_suffix}")
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this test session (dropped at the end)."""
    yield from _throwaway_database(
        _pg_admin_url(), "PostgreSQL", "POSTGRES", '"', drop_suffix=" WITH (FORCE)"
    )


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    """URL of a fresh MariaDB/MySQL database for this test session (dropped at the end).

    The server is named by ``SQLQ_TEST_MARIADB_URL`` (default
    ``mysql+pymysql://root@127.0.0.1:3306/test``); with none reachable these tests skip
    with the reason, unless ``SQLQ_REQUIRE_MARIADB=1`` (CI) makes that a failure.
    """
    admin_url = sqlalchemy.make_url(os.environ.get("SQLQ_TEST_MARIADB_URL", DEFAULT_MARIADB_URL))
    yield from _throwaway_database(admin_url, "MariaDB", "MARIADB", "`")


@pytest.fixture(scope="session")
def pgbouncer(
    postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[pgbouncer_support.Pooler]:
    """A PgBouncer in transaction pooling mode in front of the test server: this
    session's own (Debian's ``pgbouncer``), or ``SQLQ_TEST_PGBOUNCER_URL``'s. Without
    one, skip with the reason (fail where ``SQLQ_REQUIRE_PGBOUNCER`` is set: CI)."""
    given = os.environ.get("SQLQ_TEST_PGBOUNCER_URL")
    if given:
        url = sqlalchemy.make_url(given)
        pooler = pgbouncer_support.Pooler(url.host or "127.0.0.1", url.port or 6432)
    else:
        executable = pgbouncer_support.find_pgbouncer()
        if executable is None:
            message = (
                "pgbouncer is not installed (Debian: apt-get install pgbouncer), and "
                "SQLQ_TEST_PGBOUNCER_URL names none running; the PgBouncer flavour needs one"
            )
            if _required("SQLQ_REQUIRE_PGBOUNCER"):
                pytest.fail(f"SQLQ_REQUIRE_PGBOUNCER is set but {message}")
            pytest.skip(message)
        pooler = pgbouncer_support.start_pgbouncer(
            executable, _pg_admin_url(), tmp_path_factory.mktemp("pgbouncer")
        )
    pgbouncer_support.CURRENT = pooler
    try:
        yield pooler
    finally:
        pgbouncer_support.CURRENT = None
        pooler.stop()


_SERVERS: dict[str, server_reset.ServerDatabase] = {}
"""This session's server databases (by direct URL), and whether each holds the models'
schema now (``tests/support/server_reset.py``)."""

_SERVER = pytest.StashKey[server_reset.ServerDatabase]()
"""Stashed on a test that runs on a server: its database."""
_SCHEMA_KEPT = pytest.StashKey[bool]()
"""Stashed on a test whose server database kept the models' schema, its tables emptied:
the ``engine`` fixture then skips ``create_all``."""


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A URL for an empty database: a SQLite file, or this session's server database.

    On a server, a test that takes ``engine`` gets the models' schema with every table
    emptied when the previous test left that schema exactly as it was (much cheaper than
    rebuilding it); any other test gets a database with no tables at all.
    """
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    direct: str = request.getfixturevalue(
        "mariadb_url" if request.param == "mariadb" else "postgres_url"
    )
    server = _SERVERS.setdefault(direct, server_reset.ServerDatabase(direct))
    request.node.stash[_SERVER] = server
    if "engine" in request.fixturenames and server.holds_models_schema:
        server.empty_tables()
        request.node.stash[_SCHEMA_KEPT] = True
    else:
        server.rebuild()
    if request.param == "pgbouncer":
        pooler: pgbouncer_support.Pooler = request.getfixturevalue("pgbouncer")
        return pooler.pooled(direct)
    return direct


@pytest.fixture
def engine(request: pytest.FixtureRequest, db_url: str) -> Iterator[Engine]:
    """An engine from ``sqlq_orm.create_engine`` with the schema created from models
    (through PgBouncer: with ``transaction_pooling`` and a direct ``listen_url``)."""
    engine = sqlq_orm.create_engine(db_url, **pgbouncer_support.engine_options(db_url))
    server = request.node.stash.get(_SERVER, None)
    if not request.node.stash.get(_SCHEMA_KEPT, False):
        Base.metadata.create_all(engine)
        if server is not None:
            server.models_created(Base.metadata)
    yield engine
    engine.dispose()
    if server is not None:
        server.test_ended()


@pytest.fixture
def clock() -> sqlq_orm.PinnedClock:
    """A pinned clock; tests move it with ``advance``."""
    return sqlq_orm.PinnedClock(PINNED_START)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run the service tests (``tests/conformance/test_service_*.py``) once per API
    flavour: the ``queue`` fixture is then a ``Queue`` or an ``AsyncQueue``."""
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    chosen = any("db_url" in m.args[0] for m in metafunc.definition.iter_markers("parametrize"))
    if "db_url" in metafunc.fixturenames and not chosen:
        # Every backend; through PgBouncer too for the modules that exercise how
        # connections are used (not all: the suite's time stays in check).
        backends = list(BACKENDS)
        if module in pgbouncer_support.PGBOUNCER_MODULES or _required("SQLQ_PGBOUNCER_EVERYWHERE"):
            backends.append(PGBOUNCER)
        metafunc.parametrize("db_url", backends, indirect=True)
    if "queue" in metafunc.fixturenames and module.startswith("test_service_"):
        flavours = list(FLAVOURS)
        if module in PSYCOPG_MODULES:
            flavours.append(pytest.param("async-psycopg", id="async-psycopg"))
        metafunc.parametrize("queue_flavour", flavours)


@pytest.fixture
def queue_flavour() -> str:
    """Which API the ``queue`` fixture is: ``sync`` unless a test module is parametrised."""
    return "sync"


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    """An event loop on a thread of its own, for calling async code from a test."""
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture
def queue(
    request: pytest.FixtureRequest,
    engine: Engine,
    clock: sqlq_orm.PinnedClock,
    queue_flavour: str,
    db_url: str,
) -> Iterator[sqlq_orm.Queue | BlockingAsyncQueue]:
    """A queue on the test database with the pinned clock: a ``Queue``, or for the
    ``async`` flavours an ``AsyncQueue`` behind the synchronous method names."""
    if queue_flavour == "sync":
        yield sqlq_orm.Queue(engine, clock=clock)
        return
    url = async_url(db_url, queue_flavour)
    loop: LoopThread = request.getfixturevalue("loop_thread")
    async_engine = sqlq_orm.create_async_engine(url, **pgbouncer_support.engine_options(db_url))
    reader = sqlq_orm.Queue(engine, clock=clock)  # for the tests' own reads (read())
    yield BlockingAsyncQueue(sqlq_orm.AsyncQueue(async_engine, clock=clock), loop, reader)
    loop.run(async_engine.dispose())


@pytest.fixture
def session(engine: Engine) -> Iterator[sqlalchemy.orm.Session]:
    """An ORM session bound for the factories."""
    with sqlalchemy.orm.Session(engine) as session:
        factories.bind(session)
        yield session
        factories.bind(None)


@pytest.fixture(autouse=True)
def _recursion_limit_kept() -> Iterator[None]:
    """Give every test the interpreter's recursion limit as it found it.

    mypy's API (the typing tests run it in-process) raises the limit for good, and the
    tests of deeply nested payloads rely on the default one to be refused.
    """
    limit = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(limit)
