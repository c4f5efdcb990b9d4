"""Which database errors are worth the same statement again, and which never will be.

A worker that cannot record an outcome tries again while the database is away (a
lost connection, a lock wait, a deadlock, a pool timeout): that passes. An error that
the statement itself causes (a value the schema refuses, a CHECK constraint, bad SQL)
comes back every time, so trying again would hold the job, and the worker, forever.
"""

from __future__ import annotations

from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.exc import (
    TimeoutError as PoolTimeout,
)


def is_transient(exc: BaseException) -> bool:
    """Whether running the same statement later may succeed: a lost or refused
    connection, a pool timeout, or the driver's operational errors (lock waits,
    deadlocks, a busy SQLite file). Integrity, data and programming errors, and
    anything that is not a database error at all, are not transient. MariaDB's CHECK
    failure (4025), which PyMySQL reports as operational, reaches here as an
    IntegrityError (``db/backends/mysql.py`` ``install_hooks``)."""
    if isinstance(exc, (DisconnectionError, PoolTimeout)):
        return True
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError))
    return False
