"""Tools for the reliability tests: break rows on purpose, pause a transaction
mid-flight, and run an actor in a thread. Every tool works on a real database.

- :func:`unchecked` yields a connection on which CHECK and FOREIGN KEY constraints
  are off, to write rows the schema would refuse (SQLite:
  ``ignore_check_constraints`` and ``foreign_keys=OFF``; PostgreSQL: the CHECKs of
  the throw-away test schema are dropped and FK triggers are disabled with
  ``session_replication_role``).
- :class:`PauseAfter` stops the first statement on an engine that matches a pattern
  right after it ran, inside its transaction (locks held), until released.
- :class:`Actor` runs a call in a thread and hands back its result or exception.
- :func:`start_blocked` starts an actor and returns once it is waiting on a lock held
  by a paused transaction (or has finished), so "B tried while A held it" is forced.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine

GIVE_UP_SECONDS = 30.0
"""How long a helper waits for something that should happen at once (a hang guard)."""

SQLQ_TABLES = ("sqlq_jobs", "sqlq_job_attempts", "sqlq_job_events", "sqlq_workers")

UPDATE_JOBS_SET = r"UPDATE sqlq_jobs (?:FORCE INDEX \(PRIMARY\) )?SET"
"""Pattern of the queue's updates of the jobs table (MySQL names the index it reads)."""

# Sessions of this database waiting for a row lock, per server database.
_LOCK_WAITERS = {
    "postgresql": (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ),
    # Not live: InnoDB fills INNODB_TRX (and INNODB_LOCKS, INNODB_LOCK_WAITS) from a
    # cache it refreshes only when no session has read it for 0.1 s, so a poll, or any
    # other session's, more often than that keeps reading the same stale rows.
    "mysql": (
        "SELECT count(*) FROM information_schema.INNODB_TRX t "
        "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
        "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
    ),
}

# One "---TRANSACTION ..." block of SHOW ENGINE INNODB STATUS that waits for a lock:
# its "LOCK WAIT ..." line, then "MariaDB thread id N" (MySQL: "MySQL thread id N").
_INNODB_LOCK_WAIT = re.compile(r"^LOCK WAIT .*?\n(?:MariaDB|MySQL) thread id (\d+),", re.MULTILINE)


def is_mysql(engine: Engine) -> bool:
    """MariaDB or MySQL (SQLAlchemy names the dialect either way)."""
    return engine.dialect.name in ("mysql", "mariadb")


def drop_index_sql(engine: Engine, index: str, table: str) -> str:
    """``DROP INDEX`` as this database spells it (MySQL names the table too)."""
    return f"DROP INDEX {index} ON {table}" if is_mysql(engine) else f"DROP INDEX {index}"


def lock_waiters_sql(engine: Engine) -> str:
    """SQL counting this database's sessions that wait for a lock right now."""
    return _LOCK_WAITERS["mysql" if is_mysql(engine) else engine.dialect.name]


def lock_waiters(connection: Connection) -> int:
    """How many sessions on this connection's database wait for a lock right now.

    PostgreSQL: ``pg_stat_activity``. MySQL: ``SHOW ENGINE INNODB STATUS``, which InnoDB
    writes afresh for each call (unlike ``INNODB_TRX``, see ``_LOCK_WAITERS``), names the
    server thread of each transaction in ``LOCK WAIT``; ``PROCESSLIST`` (live too) then
    keeps the threads on this database, not other tests' on the same server.
    """
    try:
        if not is_mysql(connection.engine):
            return int(connection.exec_driver_sql(lock_waiters_sql(connection.engine)).scalar_one())
        status = str(connection.exec_driver_sql("SHOW ENGINE INNODB STATUS").one()[2])
        threads = sorted({int(found) for found in _INNODB_LOCK_WAIT.findall(status)})
        if not threads:
            return 0
        listed = ", ".join(str(thread) for thread in threads)
        return int(
            connection.exec_driver_sql(
                "SELECT count(*) FROM information_schema.PROCESSLIST "
                f"WHERE DB = DATABASE() AND ID IN ({listed})"
            ).scalar_one()
        )
    finally:
        connection.rollback()


@contextmanager
def unchecked(engine: Engine) -> Iterator[Connection]:
    """A transaction in which CHECK and FOREIGN KEY constraints are not enforced."""
    if engine.dialect.name == "sqlite":
        # A plain engine: pysqlite leaves foreign_keys off, and issues its implicit
        # BEGIN only before DML, so the PRAGMA below runs outside the transaction.
        plain = sqlalchemy.create_engine(engine.url)
        try:
            with plain.begin() as connection:
                connection.exec_driver_sql("PRAGMA ignore_check_constraints = ON")
                yield connection
        finally:
            plain.dispose()
        return
    if is_mysql(engine):
        # Session switches, set before the transaction and put back after it.
        with engine.connect() as connection:
            connection.exec_driver_sql("SET SESSION check_constraint_checks = OFF")
            connection.exec_driver_sql("SET SESSION foreign_key_checks = 0")
            connection.commit()
            try:
                with connection.begin():
                    yield connection
            finally:
                connection.exec_driver_sql("SET SESSION check_constraint_checks = ON")
                connection.exec_driver_sql("SET SESSION foreign_key_checks = 1")
                connection.commit()
        return
    with engine.begin() as connection:
        checks = connection.execute(
            text(
                "SELECT rel.relname, con.conname FROM pg_constraint con "
                "JOIN pg_class rel ON rel.oid = con.conrelid "
                "WHERE con.contype = 'c' AND rel.relname = ANY(:tables)"
            ),
            {"tables": list(SQLQ_TABLES)},
        ).all()
        for table, name in checks:
            connection.exec_driver_sql(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
        connection.exec_driver_sql("SET LOCAL session_replication_role = replica")
        yield connection


class PauseAfter:
    """Hold the first statement on ``engine`` whose SQL matches ``pattern``.

    Patterns are matched against the statement with its whitespace collapsed.
    The statement has run (its locks are taken) and its transaction is still open;
    the thread that ran it waits until :meth:`release`. ``reached`` is set when that
    happens. Use as a context manager so the hook is always removed.
    """

    def __init__(self, engine: Engine, pattern: str) -> None:
        self.engine = engine
        self.pattern = re.compile(pattern, re.IGNORECASE | re.DOTALL)
        self.reached = threading.Event()
        self._go = threading.Event()
        self._fired = False
        self._lock = threading.Lock()

    def _hook(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        with self._lock:
            if self._fired or not self.pattern.search(" ".join(statement.split())):
                return
            self._fired = True
        self.reached.set()
        if not self._go.wait(GIVE_UP_SECONDS):
            raise RuntimeError(f"paused statement was never released: {statement[:80]}")

    def wait(self) -> None:
        """Block until the paused statement has been reached."""
        if not self.reached.wait(GIVE_UP_SECONDS):
            raise AssertionError(f"no statement matching {self.pattern.pattern!r} ran")

    def release(self) -> None:
        self._go.set()

    def __enter__(self) -> PauseAfter:
        event.listen(self.engine, "after_cursor_execute", self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        # Disarm rather than remove: another thread may be iterating the engine's
        # listeners right now, and removing one under it breaks that iteration.
        with self._lock:
            self._fired = True
        self.release()


class Actor:
    """Run ``call`` in a daemon thread; :meth:`result` returns its value or raises."""

    def __init__(self, call: Callable[[], Any], name: str = "actor") -> None:
        self._call = call
        self._value: Any = None
        self._error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.started.set()
        try:
            self._value = self._call()
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self._error = exc

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> Any:
        self.thread.join(GIVE_UP_SECONDS)
        if self.thread.is_alive():
            raise AssertionError(f"{self.thread.name} did not finish")
        if self._error is not None:
            raise self._error
        return self._value

    def error(self) -> BaseException | None:
        self.thread.join(GIVE_UP_SECONDS)
        if self.thread.is_alive():
            raise AssertionError(f"{self.thread.name} did not finish")
        return self._error


class StatementSeen:
    """Set ``seen`` once ``engine`` is about to run a statement matching ``pattern``."""

    def __init__(self, engine: Engine, pattern: str) -> None:
        self.engine = engine
        self.pattern = re.compile(pattern, re.IGNORECASE | re.DOTALL)
        self.seen = threading.Event()
        self._armed = True

    def _hook(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self._armed and self.pattern.search(" ".join(statement.split())):
            self.seen.set()

    def __enter__(self) -> StatementSeen:
        event.listen(self.engine, "before_cursor_execute", self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self._armed = False  # disarmed, not removed (see PauseAfter.__exit__)


def wait_until_blocked_or_done(actor: Actor, observer: Engine, seen: StatementSeen) -> None:
    """Return once ``actor`` finished or is stuck behind another transaction's lock.

    ``seen`` watches the actor's engine for the statement that will block. On SQLite
    that is its ``BEGIN IMMEDIATE`` (the single writer lock; the wait happens inside
    it); on PostgreSQL the server is asked until a backend waits on a lock.
    """
    deadline = time.monotonic() + GIVE_UP_SECONDS
    while not (seen.seen.is_set() or actor.done):
        if time.monotonic() > deadline:
            raise AssertionError("the actor never reached its blocking statement")
        time.sleep(0.005)
    if actor.done or observer.dialect.name == "sqlite":
        return
    with observer.connect() as connection:
        while not actor.done:
            if lock_waiters(connection):
                return
            if time.monotonic() > deadline:
                raise AssertionError("the actor never blocked on a lock")
            time.sleep(0.005)


def start_blocked(call: Callable[[], Any], actor_engine: Engine, observer: Engine) -> Actor:
    """Start ``call`` (which uses ``actor_engine``) and return once it is blocked
    behind a lock held by a paused transaction, or already finished."""
    seen = StatementSeen(actor_engine, r"^BEGIN IMMEDIATE|^\s*(UPDATE|SELECT|WITH|INSERT)")
    with seen:
        actor = Actor(call, name="blocked-actor")
        wait_until_blocked_or_done(actor, observer, seen)
    return actor
