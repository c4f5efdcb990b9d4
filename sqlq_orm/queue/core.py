"""The queue's settings and plumbing, shared by every group of operations.

:class:`QueueCore` holds the :class:`~sqlq_orm.db.context.QueueContext` and the
settings (lease length, retry policy, payload cap); the operation groups in this
package (enqueue, claim, lease calls, sweep, administration, worker registry) extend
it, and :class:`~sqlq_orm.Queue` puts them together."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeAlias, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from sqlq_orm.core import validation
from sqlq_orm.core.backoff import RetryPolicy
from sqlq_orm.core.lease import Lease
from sqlq_orm.db.clock import Clock
from sqlq_orm.db.context import QueueContext
from sqlq_orm.db.tables import Models
from sqlq_orm.errors import (
    InvalidInput,
    TransactionRolledBack,
)
from sqlq_orm.queue import app_columns
from sqlq_orm.queue.schema import check_before_first_use, require_current_schema
from sqlq_orm.schema.states import Event

if TYPE_CHECKING:  # the asyncio extension needs greenlet: never imported at run time here
    from sqlalchemy.ext.asyncio import AsyncSession

log = logging.getLogger("sqlq_orm")

SessionArg: TypeAlias = "Session | AsyncSession | None"
"""The ``session=`` of every enqueue call: a :class:`~sqlalchemy.orm.Session` for
:class:`~sqlq_orm.Queue`, an :class:`~sqlalchemy.ext.asyncio.AsyncSession` for
:class:`~sqlq_orm.AsyncQueue` (one definition serves both; each refuses the other's)."""

DEFAULT_LEASE_SECONDS = 30
DEFAULT_HEARTBEAT_EVENT_INTERVAL = 300.0
"""A running job logs a HEARTBEAT event at most this often (seconds, monotonic)."""

SYSTEM_ACTOR = "system"

_ARRAYS_FROM = 4  # events written as arrays from this many on, where the backend can
_IDS_PER_NOTIFY = 300  # job ids per finish NOTIFY payload
FINISH_LISTENERS_TTL = 1.0
"""Seconds a process trusts what it last learnt about finish listeners elsewhere."""
_EVENT_FIELDS = ("job_id", "event", "actor", "detail")


@dataclass
class DeferredWrites:
    """Attempt closes and events collected to be written together, in order."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


RETRIES_AFTER_ROLLBACK = 3
"""How often an operation runs again after the database rolled its transaction back."""

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Q = TypeVar("_Q", bound="QueueCore")


def retry_if_rolled_back(
    method: Callable[Concatenate[_Q, _P], _R],
) -> Callable[Concatenate[_Q, _P], _R]:
    """Run a queue operation again when its own transaction was rolled back whole.

    Only for operations that do all their writes in one transaction of their own: a
    deadlock victim (MySQL 1213) or a lock wait timeout (1205, after which leaving the
    ``with`` block rolls the rest back) has then written nothing, so running it again
    can neither lose nor double a job. With a caller's ``session`` the transaction is
    the caller's, and the error goes to the caller. Which errors qualify is the
    backend's :attr:`~sqlq_orm.db.backends.base.Backend.is_retryable`. With the
    caller's session, an error after which the database rolled the caller's whole
    transaction back raises :class:`~sqlq_orm.errors.TransactionRolledBack`, saying so.
    """

    @functools.wraps(method)
    def run(queue: _Q, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if kwargs.get("session") is not None:
            try:
                return method(queue, *args, **kwargs)
            except DBAPIError as exc:
                if not queue.dialect.rolls_back_transaction(exc):
                    raise
                raise TransactionRolledBack(
                    f"{method.__name__}: {queue.dialect.title} rolled back your whole "
                    f"transaction ({type(exc.orig).__name__}: {str(exc.orig).strip()[:200]}); "
                    "nothing of it will be written: roll the session back and run the "
                    "transaction again"
                ) from exc
        for attempt in range(RETRIES_AFTER_ROLLBACK + 1):
            try:
                return method(queue, *args, **kwargs)
            except DBAPIError as exc:
                if attempt == RETRIES_AFTER_ROLLBACK or not queue.dialect.is_retryable(exc):
                    raise
                log.info(
                    "%s: rolled back by the database (%s); running it again",
                    method.__name__, type(exc.orig).__name__,
                )  # fmt: skip
        raise AssertionError("unreachable")

    return run


def _sync_session(session: SessionArg) -> Session | None:
    """The caller's synchronous session; an ``AsyncSession`` is refused (it belongs to
    :class:`~sqlq_orm.AsyncQueue`, which hands this queue its ``sync_session``)."""
    if session is not None and hasattr(session, "sync_session"):
        raise InvalidInput(
            f"session= got an AsyncSession ({session!r}); pass it to sqlq_orm.AsyncQueue, "
            "or give sqlq_orm.Queue a synchronous Session"
        )
    return session


_DETAIL_JSON = json.JSONEncoder(separators=(",", ":"), default=str)
"""One encoder for every event's detail (``json.dumps`` with options builds one per call)."""


def detail_json(detail: Mapping[str, Any] | None) -> str | None:
    if not detail:
        return None
    return _DETAIL_JSON.encode(detail)


class QueueCore:
    """A job queue stored in the tables of ``models`` on ``bind``'s database.

    ``bind`` is an :class:`~sqlalchemy.engine.Engine` (configure it with
    :func:`sqlq_orm.configure_engine`, or create it with :func:`sqlq_orm.create_engine`)
    or a :class:`~sqlalchemy.orm.sessionmaker` bound to one. ``clock`` defaults to the
    database's clock; tests pass a :class:`~sqlq_orm.db.clock.PinnedClock`.
    ``schema`` keeps the tables in a PostgreSQL schema of that name (a database of
    that name on MariaDB; SQLite has none): migrate it with
    ``sqlq_orm.migrate.upgrade(engine, schema=...)``. Two queues in two schemas of one
    database never see each other's jobs.
    """

    def __init__(
        self,
        bind: Engine | sessionmaker[Any],
        *,
        models: Models | None = None,
        clock: Clock | None = None,
        retry_policy: RetryPolicy | None = None,
        default_lease_seconds: int = DEFAULT_LEASE_SECONDS,
        payload_max_bytes: int = validation.DEFAULT_PAYLOAD_MAX_BYTES,
        heartbeat_event_interval: float = DEFAULT_HEARTBEAT_EVENT_INTERVAL,
        check_schema: bool = True,
        schema: str | None = None,
    ) -> None:
        if isinstance(bind, sessionmaker):
            engine = bind.kw.get("bind")
            if not isinstance(engine, Engine):
                raise InvalidInput("the sessionmaker passed to Queue must be bound to an Engine")
            bind = engine
        if not isinstance(bind, Engine):
            raise InvalidInput(f"Queue needs an Engine or a sessionmaker, got {bind!r}")
        self.context = QueueContext(bind, models=models, clock=clock, schema=schema)
        self.engine = bind
        self.models = self.context.models
        self.clock = self.context.clock
        self.retry_policy = retry_policy or RetryPolicy()
        self.default_lease_seconds = validation.lease_seconds(default_lease_seconds)
        self.payload_max_bytes = validation.require_int(
            "payload_max_bytes", payload_max_bytes, minimum=1
        )
        self.heartbeat_event_interval = heartbeat_event_interval
        self.dialect = self.context.dialect
        self.tables = self.context.tables
        self.sql = self.context.sql
        self._app_columns = frozenset(self.sql.app_column_names)
        self._app_column_rules = app_columns.describe(self.sql.app_columns)
        if check_schema and not bind.dialect.is_async:
            # Before the first use, not here: a module-level queue must import without a
            # reachable, migrated database (an Alembic env.py imports it). An asyncio
            # engine cannot read outside a coroutine: AsyncQueue checks on its first
            # operation instead.
            check_before_first_use(self.context)

    def check_schema(self, *, refuse_unmapped: bool = False) -> None:
        """Raise :class:`~sqlq_orm.errors.SchemaBehindCode` if the database lacks tables or
        columns the models declare, naming the revision or command that adds them; warn
        (:class:`~sqlq_orm.errors.SqlqWarning`) if its tables have columns the models
        do not map, or with ``refuse_unmapped`` raise
        :class:`~sqlq_orm.errors.ModelsMissColumns` if the job table has any (a worker
        does: its handlers read them in ``ctx.columns``). The database is read once per
        engine and models in a process, before the queue's first use (constructing it
        reads nothing), and never while Alembic runs migrations; ``check_schema=False``
        skips the automatic check."""
        require_current_schema(self.context, stacklevel=2, refuse_unmapped=refuse_unmapped)

    # ------------------------------------------------------------------ plumbing

    def _write(self, session: SessionArg = None) -> AbstractContextManager[Connection]:
        """A write transaction: the caller's session's, or a short one of our own."""
        return self.context.write(_sync_session(session))

    def read(self) -> AbstractContextManager[Connection]:
        """A read-only transaction that never takes SQLite's write lock."""
        return self.context.read()

    def session(self) -> Session:
        """An ORM session for reads (``Job``, its ``attempts`` and ``events``)."""
        return self.context.session()

    def _announce_jobs(self, connection: Connection, queues: Iterable[str]) -> None:
        """Tell other processes' workers, when this transaction commits, that ``queues``
        got jobs (PostgreSQL ``NOTIFY``; a rollback tells nobody)."""
        if self.sql.notify_jobs is None:
            return
        for name in sorted(set(queues)):
            connection.execute(
                self.sql.notify_jobs, {"p_channel": self.sql.wake_channel, "p_queue": name}
            )

    def _announce_finished(self, connection: Connection, job_ids: Iterable[int]) -> None:
        """Tell other processes' ``wait`` callers, when this transaction commits, that
        ``job_ids`` ended (PostgreSQL ``NOTIFY``, the ids as its payload; a rollback
        tells nobody). Elsewhere they hear it otherwise (SQLite) or poll (MariaDB)."""
        if self.sql.notify_jobs is None or not self._finish_listeners(connection):
            return
        ids = [str(job_id) for job_id in job_ids]
        # A payload must stay under 8000 bytes: 300 ids of up to 19 digits do.
        for start in range(0, len(ids), _IDS_PER_NOTIFY):
            connection.execute(
                self.sql.notify_jobs,
                {
                    "p_channel": self.sql.finish_channel,
                    "p_queue": ",".join(ids[start : start + _IDS_PER_NOTIFY]),
                },
            )

    def _finish_listeners(self, connection: Connection) -> bool:
        """Whether any process listens for finishes (a NOTIFY per finishing transaction
        cost the PostgreSQL drain about 10%: sent only while someone would hear it).
        Looked up at most every :data:`FINISH_LISTENERS_TTL` seconds per process; a
        listener that started since is trusted only after that long (``Queue.wait``
        reads its job often until then)."""
        wakeups = self.context.wakeups
        looked_at, present = wakeups.finish_listeners_seen
        now = time.monotonic()
        if now - looked_at < FINISH_LISTENERS_TTL:
            return present
        if self.sql.finish_waiters is None:
            present = True
        else:
            k1, k2 = self.sql.finish_listener_mark
            present = bool(
                connection.execute(self.sql.finish_waiters, {"p_k1": k1, "p_k2": k2}).scalar()
            )
        wakeups.finish_listeners_seen = (now, present)
        return present

    def _finished(self, job_ids: Iterable[int]) -> None:
        """Wake this process's ``wait`` callers on ``job_ids``: their runs just ended
        (the transaction has committed)."""
        self.context.wakeups.notify_finished(job_ids)

    def _wake_workers(self, session: SessionArg, queues: Iterable[str]) -> None:
        """Wake this process's idle workers on ``queues``: now (our own transaction has
        committed) or when the caller's ``session`` commits."""
        caller = _sync_session(session)
        if caller is None:
            self.context.wakeups.notify(queues)
        else:
            self.context.wakeups.notify_after_commit(caller, queues)

    def _write_events(self, connection: Connection, rows: list[dict[str, Any]]) -> None:
        if len(rows) >= _ARRAYS_FROM and self.sql.insert_events_from_arrays is not None:
            # One short statement for the lot, instead of a statement per row.
            arrays = {f"a_{name}": [row[f"p_{name}"] for row in rows] for name in _EVENT_FIELDS}
            connection.execute(self.sql.insert_events_from_arrays, arrays)
        elif rows:
            self.sql.write(connection, self.sql.insert_event, rows)

    @staticmethod
    def _event(
        job_id: int, event: Event, actor: str, detail: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return {
            "p_job_id": job_id,
            "p_event": event.value,
            "p_actor": actor,
            "p_detail": detail_json(detail),
        }

    def _storable_json(self, argument: str, text: str | None) -> str | None:
        """JSON text from the encoder, unless the database's JSON column cannot store it
        (a NUL in a string, on PostgreSQL): InvalidInput before anything is written. On
        PostgreSQL big floats are spelled out so they come back as floats."""
        if self.dialect.json_refuses_nul:  # PostgreSQL's JSONB
            text = validation.refuse_nul_in_json(argument, text, self.dialect.title)
            return validation.plain_big_floats(text)
        return text

    def _check_app_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """App column values by name, checked against their columns (InvalidInput)."""
        checked = validation.app_columns(dict(values), self._app_columns)
        app_columns.check_values(self.tables.jobs.name, self._app_column_rules, checked)
        return checked

    @contextmanager
    def _app_values_refused(
        self, connection: Connection, shown: str, session: SessionArg
    ) -> Iterator[None]:
        """Around a job insert: what the database refuses of the app's columns is the
        caller's bad input (a job table without app columns has nothing to refuse)."""
        if not self._app_column_rules:
            yield
            return
        with app_columns.refusals_reported(
            connection, shown, in_callers_transaction=session is not None
        ):
            yield

    def _lease_params(self, lease: Lease) -> dict[str, Any]:
        if not isinstance(lease, Lease):
            raise InvalidInput(f"expected a Lease returned by claim(), got {lease!r}")
        return {"p_id": lease.job_id, "p_token": lease.token}
