"""A queue that works inside a test's transaction, which the test rolls back.

The common SQLAlchemy test pattern runs each test inside a transaction on one
connection and rolls it back at the end, so tests never see (or delete) each other's
rows::

    connection = engine.connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint")
    ...
    outer.rollback()

A :class:`~sqlq_orm.Queue` opens transactions of its own, on connections of its own,
which cannot see that transaction's uncommitted rows. :func:`queue_in_transaction`
gives a copy of the queue whose every operation runs on ``connection`` instead, each
write in a savepoint of its own (so a refused operation undoes only itself): jobs
enqueued through the test's session are claimed, run and recorded by
:func:`~sqlq_orm.testing.drain`, and all of it goes away with the rollback. On
SQLite, PostgreSQL and MariaDB (test sessions at the same time on one database: on
PostgreSQL; on MariaDB two such long transactions can wait on each other's locks).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from sqlq_orm.db.backends.base import AFTER_TRANSACTION
from sqlq_orm.db.context import QueueContext
from sqlq_orm.errors import InvalidInput
from sqlq_orm.queue.queue import Queue


class _ContextInTransaction(QueueContext):
    """A :class:`QueueContext` whose transactions are savepoints on one connection."""

    connection: Connection

    @contextmanager
    def write(self, session: Session | None = None) -> Iterator[Connection]:
        if session is not None:
            with super().write(session) as connection:
                yield connection
            return
        try:
            with self.connection.begin_nested():
                yield self.connection
        finally:
            # What the operation asked to run once its transaction ends (MariaDB's
            # named locks of concurrency keys, let go): its savepoint is that here.
            for call in self.connection.info.pop(AFTER_TRANSACTION, []):
                call(self.connection)

    @contextmanager
    def read(self, *, first_use_check: bool = True) -> Iterator[Connection]:
        # The test's own transaction sees the schema the test made: no first-use check.
        with self.connection.begin_nested():
            yield self.connection

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        with self.connection.begin_nested():
            yield self.connection

    def session(self) -> Session:
        return Session(
            bind=self.connection,
            join_transaction_mode="create_savepoint",
            expire_on_commit=False,
        )


def queue_in_transaction(queue: Queue, connection: Connection) -> Queue:
    """A copy of ``queue`` whose operations all run on ``connection``, inside the
    transaction the caller began there (and will roll back).

    ``connection`` must be on the queue's database, with a transaction begun. The copy
    shares the queue's clock, models and statements; ``queue`` itself is unchanged.
    Use it from one thread at a time (a connection is not shared between threads).
    """
    if not isinstance(connection, Connection):
        raise InvalidInput(
            f"queue_in_transaction needs a sqlalchemy Connection, got {connection!r}"
        )
    if not connection.in_transaction():
        raise InvalidInput(
            "queue_in_transaction needs a connection with a transaction begun "
            "(connection.begin()), which the test rolls back at its end"
        )
    context = copy.copy(queue.context)
    context.__class__ = _ContextInTransaction
    context._require_same_database(connection.engine)
    bound = copy.copy(queue)
    bound.context = context
    context.connection = connection  # type: ignore[attr-defined]
    return bound
