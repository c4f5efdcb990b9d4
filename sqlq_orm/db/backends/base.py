"""What the queue needs to know about one database: the :class:`Backend` record.

Each database gets one module in this package that builds its record; the registry
in :mod:`sqlq_orm.db.backends` picks one by SQLAlchemy's dialect name. A new database
(as MariaDB/MySQL was) is a new module here plus one line in the registry, and must pass
the conformance suite in ``tests/conformance``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Table
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.sql import FromClause, Select
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeEngine


@dataclass(frozen=True)
class MaintenanceStatement:
    """The statement one maintenance task runs on a database (``sql`` None: not needed)."""

    task: str
    sql: str | None
    note: str


class WakeListener(Protocol):
    """A dedicated connection that hears other connections add jobs (see ``open_wake_listener``)."""

    def wait(self, timeout: float) -> frozenset[str] | None:
        """Wait up to ``timeout`` seconds for news; return the queues that got jobs
        (empty: nothing happened), or None when any queue may have (a bare commit)."""
        ...

    def close(self) -> None:
        """Close the connection (from the thread that waits on it)."""
        ...


@contextmanager
def _nothing_to_suspend(connection: Connection) -> Iterator[None]:
    yield


@contextmanager
def _no_time_limit(connection: Connection, seconds: float) -> Iterator[None]:
    yield


def _no_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    return None


def _no_link_timeouts(driver: str, worker_lease_seconds: float | None) -> dict[str, Any]:
    return {}


def _no_lock(connection: Connection) -> None:
    return None


def _one_database_for_all(url: URL) -> bool:
    return True


def _always_enforced(connection: Connection) -> bool:
    return True


def _never_broken(connection: Connection) -> list[str]:
    return []


def _never_retry(exc: BaseException) -> bool:
    return False


AFTER_TRANSACTION = "sqlq_after_transaction"
"""``Connection.info`` key: calls to make on the connection once the queue's own
transaction on it has ended (committed or rolled back)."""


def after_transaction(connection: Connection, call: Callable[[Connection], None]) -> None:
    """Have ``call(connection)`` run once the queue's own write transaction on
    ``connection`` has ended (see :meth:`sqlq_orm.db.context.QueueContext.write`)."""
    connection.info.setdefault(AFTER_TRANSACTION, []).append(call)


def materialized_cte(select: Select[Any], name: str) -> FromClause:
    """``WITH name AS MATERIALIZED (select)`` (PostgreSQL 12+, SQLite 3.35+)."""
    return select.cte(name).prefix_with("MATERIALIZED")


def _no_schemas(connection: Connection, schema: str) -> AbstractContextManager[None]:
    raise ValueError(f"this database has no schemas to migrate into ({schema!r})")


def _no_generated_columns(index: Any) -> str | None:
    return None


def _as_planned(update: Update) -> Update:
    return update


def _limit_in_subquery_as_is(select: Select[Any]) -> Select[Any]:
    return select


def _planner_picks(select: Select[Any], table: Table) -> Select[Any]:
    return select


def _no_autoincrement_keyword(connection: Connection, table: str) -> bool:
    return False


def _reflection_keeps_sort_order(connection: Connection, table: str, index: str) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    """What the service, the migrations and maintenance need to know about one database."""

    name: str
    """SQLAlchemy's dialect name, the registry's key."""
    title: str
    """The database's name as people write it, for messages."""
    insert: Callable[..., Any]
    """``insert`` construct with ``on_conflict_do_update`` / ``do_nothing``."""
    read_options: dict[str, Any]
    """Execution options for a read-only transaction."""
    write_options: dict[str, Any]
    """Execution options for the queue's write transactions (SQLite: take the write
    lock at BEGIN). Connections without them begin the database's default way, so an
    app sharing the engine is not serialised behind the queue."""
    lock_rows: Callable[[Select[Any], bool], Select[Any]]
    """Make a claim's candidate ``SELECT`` lock what it reads (``skip_locked``: pass
    over rows another transaction holds instead of waiting for them)."""
    pick: Callable[[Select[Any], str], FromClause]
    """Wrap the claim's ``SELECT ... LIMIT n`` so an ``UPDATE ... FROM`` can use it."""
    token_for_row: Callable[[ColumnElement[int]], ColumnElement[str]]
    """Expression picking row ``rn``'s token (1-based) out of the ``tokens`` param."""
    bind_tokens: Callable[[Sequence[str]], Any]
    """Turn a list of tokens into the value bound to the ``tokens`` param."""
    rows_changed: Callable[[Connection, Any], int]
    """How many rows the statement that produced ``result`` changed (all fetched)."""
    maintenance: Callable[[Engine, str, Sequence[Any]], MaintenanceStatement]
    """What a maintenance task ("checkpoint", "vacuum") runs on this database."""
    autocommit: tuple[str, Any]
    """The driver connection's attribute and value that switch autocommit on."""
    snapshot_options: dict[str, Any] = field(default_factory=dict)
    """Execution options for a read-only transaction whose statements all see one
    snapshot (several queries that must agree, e.g. :mod:`sqlq_orm.ops.invariants`)."""
    install_hooks: Callable[[Engine, int], None] = _no_hooks
    """Install per-connection settings on an engine (SQLite's PRAGMAs and BEGIN mode)."""
    foreign_keys_enforced: Callable[[Connection], bool] = _always_enforced
    """Whether ``ON DELETE CASCADE`` fires on this connection."""
    foreign_key_problems: Callable[[Connection], list[str]] = _never_broken
    """The table of each row that breaks a foreign key (databases that let one through)."""
    suspend_foreign_keys: Callable[[Connection], AbstractContextManager[None]] = _nothing_to_suspend
    """Turn foreign key enforcement off around a table rebuild, where it would cascade."""
    keep_index_order: Callable[[Connection], AbstractContextManager[None]] = _nothing_to_suspend
    """Around a migration: a table rebuilt by copy-and-drop keeps its indexes' DESC."""
    lock_for_migration: Callable[[Connection], None] = _no_lock
    """Serialise concurrent schema changes inside the migration transaction."""
    needs_hooks: bool = False
    """Whether the queue's guarantees depend on :attr:`install_hooks` having run on the
    engine (SQLite: foreign keys are off unless each connection turns them on)."""
    rows_from_arrays: Callable[[Sequence[tuple[str, TypeEngine[Any]]]], FromClause] | None = None
    """Rows from one bound array per column, numbered in an ``ord`` column (PostgreSQL
    ``unnest``), for bulk inserts as ``INSERT ... SELECT``; None: multi-row VALUES."""
    json_column_types: frozenset[str] = frozenset()
    """Names the payload column's reflected type has once it is this database's JSON
    type (sqlq_0010's probe); empty where it stays text (SQLite)."""
    json_refuses_nul: bool = False
    """Whether the JSON column cannot store the character NUL (``\\u0000``) in a string
    (PostgreSQL's JSONB): the queue then refuses such a payload or result itself."""
    json_string: Callable[[ColumnElement[Any]], ColumnElement[str]] | None = None
    """SQL turning a text column into a JSON string literal (quoted and escaped), for
    event details written by a statement itself; None where not needed."""
    history_in_one_statement: bool = False
    """Whether a change and the attempt rows and events it writes may go out as one
    statement (data-modifying ``WITH``, PostgreSQL): one round trip per batch."""
    serialize_writes: bool = False
    """Whether the queue's own writes in one process take turns on a Python lock first
    (:mod:`sqlq_orm.db.write_locks`): for a database with one writer at a time, whose
    busy wait sleeps (SQLite)."""
    connections_share_database: Callable[[URL], bool] = _one_database_for_all
    """Whether every connection to this URL sees the same database (not so for an
    in-memory SQLite database, which exists once per connection)."""
    descending_index_columns: Callable[[Connection, str, str], set[str] | None] = (
        _reflection_keeps_sort_order
    )
    """The columns an index sorts DESC as stored, where SQLAlchemy's reflection loses
    them (SQLite); None when reflection keeps them (Alembic then compares them itself)
    or there is no such index."""
    notify_sql: str | None = None
    """A statement (params ``p_channel``, ``p_queue``) run in an enqueue's transaction
    that tells other connections, once it commits, that ``p_queue`` got jobs; None
    where the database has no such messages (SQLite)."""
    open_wake_listener: Callable[..., WakeListener | None] | None = None
    """``(engine, channel, poll_seconds=..., mark=...)``: open a connection of its own
    on the engine's database that hears commits of other connections (PostgreSQL:
    ``LISTEN`` on the channel, holding the shared advisory lock ``mark`` if given;
    SQLite: watching ``PRAGMA data_version`` every ``poll_seconds``); None if this
    engine's driver cannot (polling only). Workers listen for jobs on the enqueue
    channel, ``Queue.wait`` for finishes on the finish channel."""
    waiters_sql: str | None = None
    """A query (params ``p_k1``, ``p_k2``) telling whether some connection holds the
    listener ``mark`` lock: finishes are announced (``notify_sql``) only while one
    does, as a NOTIFY in every finishing transaction costs the drain about 10%."""
    prebuilt_as_driver_sql: bool = False
    """Whether the prebuilt statements of a job's life (enqueue, start, finish) run as
    SQL compiled once and sent with ``exec_driver_sql`` (:mod:`sqlq_orm.db.driver_sql`):
    on SQLite, SQLAlchemy's per-call work costs more than the statement itself."""
    update_returning: bool = True
    """Whether the database has ``UPDATE ... RETURNING``. Where it has not (MariaDB,
    MySQL), each statement that reads back what it changed runs as: lock the rows
    (``SELECT ... FOR UPDATE``), update them by id, read them again, in the caller's
    transaction (:mod:`sqlq_orm.db.statements.returning`)."""
    is_duplicate_key: Callable[[BaseException], bool] | None = None
    """Set where ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` cannot say that it
    skipped a row (MySQL's ``ON DUPLICATE KEY UPDATE`` returns the existing one): the
    dedupe insert then runs in a savepoint, and this tells its duplicate-key error
    from any other. None: the backend's ``insert`` skips conflicts itself."""
    link_timeouts: Callable[[str, float | None], dict[str, Any]] = _no_link_timeouts
    """``connect_args`` that bound how long a connection of this driver (the URL's
    driver name) waits on a link that stopped answering; for a worker's engine when
    the lease is given (the bounds then fit in it), else safe fixed defaults."""
    table_bytes: Callable[[Connection, Sequence[Table]], dict[str, int]] | None = None
    """Bytes on disk of each named table with its indexes (the ones it could measure);
    None: the database cannot tell."""
    database_bytes: Callable[[Connection], int] | None = None
    """The whole database's size where it is one file (SQLite); None elsewhere."""
    materialize: Callable[[Select[Any], str], FromClause] = materialized_cte
    """A ``SELECT`` the planner must run first, on its own, as a named CTE
    (``MATERIALIZED`` where the database has the keyword)."""
    limited_in_subquery: Callable[[Select[Any]], Select[Any]] = _limit_in_subquery_as_is
    """Make a ``SELECT ... LIMIT n`` usable in ``id IN (...)`` of a DELETE on the same
    table (MySQL allows neither LIMIT there nor the target table: wrap it)."""
    by_primary_key: Callable[[Update], Update] = _as_planned
    """Make an ``UPDATE`` whose guard names rows by id read them by primary key. InnoDB
    locks index records as it reads them: on a small table MySQL may reach the row
    through a status index, lock that entry, then wait for the row, while the
    transaction holding the row waits for the entry to change status: a deadlock."""
    in_claim_order: Callable[[Select[Any], Table], Select[Any]] = _planner_picks
    """Make a claim's candidate ``SELECT`` read the job table through its claim index
    (``ix_<table>_claim``), whatever the planner's statistics say. InnoDB locks every
    row a locking read matches before it sorts: through any other index, a claim of
    3 jobs locks every ready job of the queue, and concurrent claimers skip them all
    and get nothing. MariaDB picks such a plan once rows have come and gone."""
    generated_key_column: Callable[[Any], str | None] = _no_generated_columns
    """The generated column behind an index the database cannot declare as the model
    does (MySQL: a partial unique index), or None. Schema comparison then takes the
    stored index on that column for the model's, and the column for part of it."""
    hold_migration_lock: Callable[[Connection], AbstractContextManager[None]] = _nothing_to_suspend
    """Around a whole migration run, where DDL commits as it goes (MySQL): a lock held
    by the session, so a second migrator never sees the first one's half-made schema."""
    autoincrement_missing: Callable[[Connection, str], bool] = _no_autoincrement_keyword
    """Whether ``table`` lacks SQLite's ``AUTOINCREMENT`` (ids would come again once the
    newest rows are deleted). Elsewhere sequences never go back: always False."""
    ddl_commits: bool = False
    """Whether each DDL statement commits the transaction it is in (MySQL). A migration
    run there cannot be one transaction: it runs one per revision (Alembic's own), so
    each revision done is recorded before the next begins."""
    concurrency_recheck: bool = False
    """Whether a claim that took jobs with a concurrency key counts those keys' held
    jobs again before it commits. Needed where concurrent claims run side by side on
    snapshots that miss each other (PostgreSQL, MySQL); not on SQLite, whose one
    writer at a time always counts what is there."""
    lock_concurrency_keys: Callable[[Connection, str, Sequence[str]], bool] | None = None
    """That recount's lock (``connection``, a scope naming the job table, the keys in
    order): one lock per key, taken before counting and held until the claim's
    transaction ends, so of two claims of one key the later one counts after the
    earlier one committed (PostgreSQL: transaction-scoped advisory locks; MySQL:
    named locks, let go once the transaction ended: :func:`after_transaction`). It
    never waits on job rows, so a row an app transaction holds locked does not stall
    claims. Returns False when a lock could not be had in time (claim again). None:
    no recount."""
    migrate_in_schema: Callable[[Connection, str], AbstractContextManager[None]] = _no_schemas
    """Around a migration run into a schema (``migrate.upgrade(schema=...)``): make the
    revisions' unqualified table names (Alembic's ALTERs, raw SQL) resolve there.
    PostgreSQL: a transaction-local ``search_path`` (safe behind a transaction pooler);
    MySQL: ``USE`` the schema's database for the run, and back."""
    rolls_back_transaction: Callable[[BaseException], bool] = _never_retry
    """Whether an error means the database rolled back (or aborted) the whole
    transaction, so a caller's ``session=`` transaction is lost and must run again
    (MySQL 1213; PostgreSQL deadlocks and serialization failures). A MySQL lock wait
    timeout (1205) undoes only the statement: not so."""
    time_limited: Callable[[Connection, float], AbstractContextManager[None]] = _no_time_limit
    """Around reads that must give up after ``seconds`` (an exact count of the jobs
    list): the statements run inside it are cancelled by the database once they take
    longer, raising an error :attr:`is_out_of_time` recognises. PostgreSQL: a
    transaction-local ``statement_timeout``; MariaDB ``max_statement_time``, MySQL
    ``max_execution_time`` (the session's, put back after); SQLite: a progress handler
    that interrupts the statement past its deadline. The default sets no limit."""
    is_out_of_time: Callable[[BaseException], bool] = _never_retry
    """Whether an error is a statement cancelled by :attr:`time_limited`."""
    is_retryable: Callable[[BaseException], bool] = _never_retry
    """Whether an error means the transaction was a deadlock victim or timed out
    waiting for a lock, so that running the whole transaction again is safe (MySQL
    1213, 1205; PostgreSQL deadlocks, 40P01, and serialization failures, 40001).
    SQLite waits (busy timeout)."""
