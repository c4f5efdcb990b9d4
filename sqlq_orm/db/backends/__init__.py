"""The database backends: one module per database, chosen by SQLAlchemy's dialect name.

:func:`backend_for` returns the :class:`~sqlq_orm.db.backends.base.Backend` record of
an engine's database. Nothing outside this package asks which database it talks to.
Importing this package also registers each database's compilation of
:class:`~sqlq_orm.db.clock.epoch_now`.

May import: :mod:`sqlq_orm.errors`, :mod:`sqlq_orm.schema` (names and sizes the
mixins declare), :mod:`sqlq_orm.db.clock`, SQLAlchemy.
"""

from __future__ import annotations

from sqlalchemy.engine import Dialect, Engine

from sqlq_orm.db.backends import mysql, postgresql, sqlite
from sqlq_orm.db.backends.base import Backend, MaintenanceStatement, WakeListener
from sqlq_orm.errors import InvalidInput

_REGISTRY: dict[str, Backend] = {
    sqlite.BACKEND.name: sqlite.BACKEND,
    postgresql.BACKEND.name: postgresql.BACKEND,
    mysql.MYSQL.name: mysql.MYSQL,
    mysql.MARIADB.name: mysql.MARIADB,
}


def supported() -> list[str]:
    """The databases sqlq_orm supports, as people write their names."""
    return list(dict.fromkeys(backend.title for backend in _REGISTRY.values()))


def find_backend(dialect: Dialect | Engine) -> Backend | None:
    """The backend of an engine's database, or None if sqlq_orm does not support it."""
    name = dialect.dialect.name if isinstance(dialect, Engine) else dialect.name
    return _REGISTRY.get(name)


def backend_named(name: str) -> Backend | None:
    """The backend of a dialect name (a URL's ``get_backend_name()``), or None."""
    return _REGISTRY.get(name)


def backend_for(dialect: Dialect | Engine) -> Backend:
    """The backend of an engine's database, or a clear error naming the dialect."""
    backend = find_backend(dialect)
    if backend is None:
        name = dialect.dialect.name if isinstance(dialect, Engine) else dialect.name
        raise InvalidInput(f"sqlq_orm supports {', '.join(supported())}; got dialect {name!r}")
    return backend


__all__ = [
    "Backend",
    "MaintenanceStatement",
    "WakeListener",
    "backend_for",
    "backend_named",
    "find_backend",
    "supported",
]
