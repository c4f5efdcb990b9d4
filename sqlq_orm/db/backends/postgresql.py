"""PostgreSQL: ``FOR UPDATE SKIP LOCKED`` claims in a ``MATERIALIZED`` CTE, READ COMMITTED.

Foreign keys are always enforced; concurrent first-time migrations are serialised
with a transaction-scoped advisory lock.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select as selectors
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Table, Text, bindparam, cast, func, text, type_coerce
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import FromClause, Select
from sqlalchemy.sql.elements import ColumnElement, Grouping
from sqlalchemy.types import TypeEngine

from sqlq_orm.db.backends.base import Backend, MaintenanceStatement, WakeListener
from sqlq_orm.db.clock import epoch_now
from sqlq_orm.db.pooling import transaction_pooling_of

log = logging.getLogger("sqlq_orm.wakeups")

MIGRATION_LOCK_KEY = 0x5351_4C51  # "SQLQ": one advisory lock id for schema changes


@compiles(epoch_now, "postgresql")
def _epoch_now(element: epoch_now, compiler: Any, **kw: Any) -> str:
    # CURRENT_TIMESTAMP is fixed for the transaction: one transition, one time.
    return "CAST(FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP)) AS BIGINT)"


def _lock_rows(select: Select[Any], skip_locked: bool) -> Select[Any]:
    return select.with_for_update(skip_locked=skip_locked)


def _pick(select: Select[Any], name: str) -> FromClause:
    # MATERIALIZED: evaluate the locking SELECT exactly once. Inlined as
    # "IN (SELECT ... LIMIT n)" it may be re-run and claim more than n rows.
    return select.cte(name).prefix_with("MATERIALIZED")


def _insert(table: Any) -> Any:
    # SQLAlchemy's PostgreSQL dialect is imported where it is used, not with the package
    # (importing it costs more than the rest of the backends together).
    from sqlalchemy.dialects.postgresql import insert

    return insert(table)


def _token_for_row(rn: ColumnElement[int]) -> ColumnElement[str]:
    from sqlalchemy.dialects.postgresql import ARRAY

    tokens = bindparam("tokens", type_=ARRAY(Text))
    # (CAST(:tokens AS TEXT[]))[rn]: the parentheses are required before a subscript.
    array = type_coerce(Grouping(cast(tokens, ARRAY(Text))), ARRAY(Text))
    return array[rn]


def _rows_from_arrays(columns: Sequence[tuple[str, TypeEngine[Any]]]) -> FromClause:
    """``unnest(:a_x::type[], ...) WITH ORDINALITY AS rows(x, ..., ord)``: one bound
    array per column, so a thousand rows are a short statement with a few parameters
    (psycopg parses a long multi-row VALUES statement again on every batch)."""
    from sqlalchemy.dialects.postgresql import ARRAY

    arrays = [bindparam(f"a_{name}", type_=ARRAY(type_)) for name, type_ in columns]
    return (
        func.unnest(*arrays)
        .table_valued(*(name for name, _ in columns), with_ordinality="ord")
        .render_derived(name="rows")
    )


RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
"""deadlock_detected, serialization_failure: the transaction is aborted whole and can
run again."""


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` (a SQLAlchemy or driver error) is a deadlock or serialization
    failure (psycopg's ``sqlstate``, asyncpg's and psycopg2's ``pgcode``)."""
    orig = getattr(exc, "orig", exc)
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code in RETRYABLE_SQLSTATES


QUERY_CANCELED = "57014"
"""query_canceled: what a statement past ``statement_timeout`` raises."""


@contextmanager
def _time_limited(connection: Connection, seconds: float) -> Iterator[None]:
    # SET LOCAL: gone with the transaction (safe behind a transaction pooler). A
    # cancelled statement aborts the transaction; the caller's read ends with it.
    milliseconds = max(1, math.ceil(seconds * 1000))
    connection.exec_driver_sql(f"SET LOCAL statement_timeout = {milliseconds}")
    yield


def is_out_of_time(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement cancelled by ``statement_timeout``."""
    orig = getattr(exc, "orig", exc)
    return (getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)) == QUERY_CANCELED


def _lock_for_migration(connection: Connection) -> None:
    # Two first-time upgrades at once would both create the version table, and one
    # would fail; the second now waits and then finds the work done.
    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")


def _maintenance(engine: Engine, task: str, tables: Sequence[Any]) -> MaintenanceStatement:
    if task == "checkpoint":
        return MaintenanceStatement(
            task, None, "PostgreSQL checkpoints its write-ahead log itself; nothing to do"
        )
    preparer = engine.dialect.identifier_preparer
    listed = ", ".join(preparer.format_table(table) for table in tables)
    return MaintenanceStatement(
        task,
        f"VACUUM (ANALYZE) {listed}",
        "made dead rows' space reusable and refreshed planner statistics "
        "(the files do not shrink; VACUUM FULL would, under an exclusive lock)",
    )


@contextmanager
def _migrate_in_schema(connection: Connection, schema: str) -> Iterator[None]:
    # Local to the migration transaction: nothing outlives it (a transaction pooler
    # may hand the server connection to someone else next). Set back afterwards, for
    # a host revision whose own operations follow sqlq's steps; not after an error,
    # which has aborted the transaction anyway.
    before = connection.execute(text("SELECT current_setting('search_path')")).scalar_one()
    connection.execute(
        text("SELECT set_config('search_path', :p_path, true)"), {"p_path": f'"{schema}"'}
    )
    yield
    connection.execute(text("SELECT set_config('search_path', :p_path, true)"), {"p_path": before})


class _Listener:
    """A psycopg 3 connection of its own, in autocommit, listening on one channel.

    It has the engine's libpq link timeouts (issue 37): ``connect_timeout``,
    keepalives and ``tcp_user_timeout``. An idle LISTEN connection sends nothing, so
    a link that went black would never be noticed: when no notification came for
    ``keepalives_idle`` seconds, it probes with ``SELECT 1``, and a probe with no
    answer within ``tcp_user_timeout`` cuts the socket, so :meth:`wait` raises and the
    watch replaces the connection.
    """

    def __init__(
        self, engine: Engine, channel: str, url: URL, mark: tuple[int, int] | None = None
    ) -> None:
        import psycopg
        from psycopg import sql

        # A listen_url is psycopg's whatever driver the engine has: its own dialect.
        dialect = engine.dialect if url is engine.url else url.get_dialect()()
        cargs, cparams = dialect.create_connect_args(url)
        bounds = _listener_link_timeouts(engine)
        cparams = {**{k: v for k, v in bounds.items() if k not in cparams}, **cparams}
        # Not from the engine's pool: this connection is held for the worker's life.
        self._connection = psycopg.connect(*cargs, **{**cparams, "autocommit": True})
        self._probe_every = float(cparams.get("keepalives_idle") or bounds["keepalives_idle"])
        self._probe_timeout = (
            float(cparams.get("tcp_user_timeout") or bounds["tcp_user_timeout"]) / 1000
        )
        self._quiet_since = time.monotonic()
        self._queues: set[str] = set()
        # psycopg 3.2 can wait for notifications with a timeout; 3.1 hears them while
        # running a statement, so there we wait for the socket and then run one.
        self._has_timeout = tuple(map(int, psycopg.__version__.split(".")[:2])) >= (3, 2)
        # Also on 3.2: what arrives while a probe runs comes to the handler (a set: a
        # queue heard twice is heard once).
        self._connection.add_notify_handler(lambda notify: self._queues.add(notify.payload))
        self._connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        if mark is not None:
            # Held as long as this connection lives (a crash lets go of it too): what
            # tells finishing transactions that someone listens (``waiters_sql``).
            self._connection.execute("SELECT pg_advisory_lock_shared(%s, %s)", mark)

    def wait(self, timeout: float) -> frozenset[str]:
        if self._has_timeout:
            # (Not when a probe already heard some: they are handed over at once.)
            for notify in self._connection.notifies(
                timeout=0 if self._queues else timeout, stop_after=1
            ):
                self._queues.add(notify.payload)
            if self._queues:  # take the ones that came with it too
                for notify in self._connection.notifies(timeout=0):
                    self._queues.add(notify.payload)
        elif not self._queues:
            readable, _, _ = selectors.select([self._connection.fileno()], [], [], timeout)
            if readable:
                self._connection.execute("SELECT 1")
        heard = frozenset(self._queues)
        self._queues.clear()
        now = time.monotonic()
        if heard:
            self._quiet_since = now
        elif now - self._quiet_since >= self._probe_every:
            self._probe()
            self._quiet_since = time.monotonic()
        return heard

    def _probe(self) -> None:
        """``SELECT 1`` on the listening connection, its answer awaited at most
        ``tcp_user_timeout``: past that the socket is shut down under it (a link that
        acknowledges bytes but never answers, such as a black-holed proxy, would
        otherwise block it for good), and the probe raises."""
        cut = threading.Event()

        def cut_the_socket() -> None:
            cut.set()
            with (
                contextlib.suppress(OSError),
                socket.socket(fileno=os.dup(self._connection.fileno())) as sock,
            ):
                sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(self._probe_timeout, cut_the_socket)
        timer.daemon = True
        timer.start()
        try:
            self._connection.execute("SELECT 1")
        except Exception:
            if cut.is_set():
                raise OSError(
                    f"the LISTEN connection did not answer a probe in {self._probe_timeout:g}s"
                ) from None
            raise
        finally:
            timer.cancel()

    def close(self) -> None:
        self._connection.close()


def _listener_link_timeouts(engine: Engine) -> dict[str, Any]:
    """libpq's link timeouts for a LISTEN connection: those of the engine's own
    connections (a worker's engine fits them in its lease), else the defaults."""
    bounds = _link_timeouts("psycopg", None)
    with engine.connect() as connection:
        info = getattr(connection.connection.driver_connection, "info", None)
        given = info.get_parameters() if info is not None else {}
    return {**bounds, **{k: v for k, v in given.items() if k in bounds}}


_WAITERS_SQL = (
    # The shared advisory lock a finish listener holds (pg_locks: two int4 keys are
    # classid, objid and objsubid 2), in this database.
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND classid = CAST(:p_k1 AS oid) AND objid = CAST(:p_k2 AS oid) AND objsubid = 2)"
)

_KEY_LOCKS = text(
    # hashtext collisions only make two keys wait for each other; never unsafe.
    "SELECT pg_advisory_xact_lock(hashtext(:p_scope), hashtext(k))"
    " FROM (SELECT DISTINCT unnest(CAST(:p_keys AS TEXT[])) AS k ORDER BY k) AS keys"
)


def _lock_concurrency_keys(connection: Connection, scope: str, keys: Sequence[str]) -> bool:
    # Transaction-scoped: let go at commit or rollback, nothing to undo.
    connection.execute(_KEY_LOCKS, {"p_scope": scope, "p_keys": list(keys)})
    return True


def _open_wake_listener(
    engine: Engine,
    channel: str,
    poll_seconds: float | None = None,
    mark: tuple[int, int] | None = None,
) -> WakeListener | None:
    # poll_seconds is SQLite's: notifications arrive as they come.
    pooling = transaction_pooling_of(engine)
    if pooling is None:
        if engine.dialect.driver != "psycopg":
            return None  # LISTEN needs psycopg 3's notifications; other drivers poll
        return _Listener(engine, channel, engine.url, mark)
    if pooling.listen_url is None:
        # A transaction pooler hands the listening server connection to other
        # clients between statements: the notifications would go to them.
        log.info(
            "wake-ups: polling; the engine goes through a transaction pooler, where "
            "LISTEN cannot work, and no listen_url names a direct connection"
        )
        return None
    log.info(
        "wake-ups: LISTEN on a direct connection to %s (the queue's own connections go "
        "through a transaction pooler)",
        pooling.listen_url.render_as_string(hide_password=True),
    )
    return _Listener(engine, channel, pooling.listen_url, mark)


def _table_bytes(connection: Connection, tables: Sequence[Table]) -> dict[str, int]:
    """``pg_total_relation_size``: the heap, its indexes and TOAST, of each table."""
    found: dict[str, int] = {}
    for table in tables:
        # quote_ident: the names as the catalog spells them, in the table's schema.
        size = connection.execute(
            text(
                "SELECT pg_total_relation_size(to_regclass("
                "coalesce(quote_ident(CAST(:s AS text)) || '.', '') || quote_ident(:t)))"
            ),
            {"s": table.schema, "t": table.name},
        ).scalar()
        if size is not None:
            found[table.name] = int(size)
    return found


_LIBPQ_DRIVERS = frozenset({"psycopg", "psycopg_async", "psycopg2", "psycopg2cffi"})
"""SQLAlchemy driver names whose connections go through libpq (its conninfo options)."""

DEFAULT_LINK_TIMEOUTS = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}
"""libpq's bounds for an engine of :func:`sqlq_orm.create_engine`: a dead link is
noticed within about a minute. Keepalives only probe an idle socket and the server's
kernel answers them while a long query runs, so no healthy statement is cut short."""


def _link_timeouts(driver: str, worker_lease_seconds: float | None) -> dict[str, Any]:
    # libpq has no read timeout. A link that drops packets leaves sent bytes (a
    # statement, a keepalive probe) unacknowledged, and tcp_user_timeout then closes the
    # socket: the blocked call raises OperationalError. For a worker everything fits in
    # a third of the lease, so it knows before the lease runs out; lease 30 s gives the
    # settings that bounded a real partition: connect 5 s, keepalives 5/2/3, 10 s.
    if driver not in _LIBPQ_DRIVERS:
        return {}
    if worker_lease_seconds is None:
        return dict(DEFAULT_LINK_TIMEOUTS)
    lease = float(worker_lease_seconds)
    return {
        "connect_timeout": max(2, round(lease / 6)),
        "keepalives": 1,
        "keepalives_idle": max(1, round(lease / 6)),
        "keepalives_interval": max(1, round(lease / 15)),
        "keepalives_count": 3,
        "tcp_user_timeout": max(1000, round(lease * 1000 / 3)),
    }


BACKEND = Backend(
    name="postgresql",
    link_timeouts=_link_timeouts,
    table_bytes=_table_bytes,
    title="PostgreSQL",
    insert=_insert,
    read_options={},  # MVCC: reads never block writers
    write_options={},
    pick=_pick,
    token_for_row=_token_for_row,
    bind_tokens=list,
    lock_rows=_lock_rows,
    rows_changed=lambda connection, result: int(result.rowcount),
    history_in_one_statement=True,
    concurrency_recheck=True,
    lock_concurrency_keys=_lock_concurrency_keys,
    is_retryable=is_retryable,
    rolls_back_transaction=is_retryable,
    time_limited=_time_limited,
    is_out_of_time=is_out_of_time,
    rows_from_arrays=_rows_from_arrays,
    json_string=lambda text: cast(func.to_json(text), Text),
    json_column_types=frozenset({"JSONB"}),
    json_refuses_nul=True,
    maintenance=_maintenance,
    autocommit=("autocommit", True),
    # READ COMMITTED takes a new snapshot per statement; checks that join several
    # queries would see a job move between them and report a false violation.
    snapshot_options={"isolation_level": "REPEATABLE READ"},
    lock_for_migration=_lock_for_migration,
    migrate_in_schema=_migrate_in_schema,
    notify_sql="SELECT pg_notify(:p_channel, :p_queue)",
    waiters_sql=_WAITERS_SQL,
    open_wake_listener=_open_wake_listener,
)
