"""Write the offline fallback inventories intersphinx uses when it cannot reach the web.

intersphinx reads each project's ``objects.inv`` from its site first (see
``intersphinx_mapping`` in ``docs/conf.py``); a build without network (this project's
CI machines have none) falls back to the files written here, which list the Python,
SQLAlchemy and Alembic objects these docs and the API's signatures name, with their
addresses on those sites. Run it after naming a new one::

    .venv/bin/python docs/_inventories/make_inventories.py
"""

from __future__ import annotations

import builtins
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

SQLALCHEMY = {
    # name: (role, page#anchor); anchors are the name unless given
    "sqlalchemy.orm.Session": ("class", "orm/session_api.html"),
    "sqlalchemy.orm.session.Session": ("class", "orm/session_api.html#sqlalchemy.orm.Session"),
    "sqlalchemy.orm.sessionmaker": ("class", "orm/session_api.html"),
    "sqlalchemy.orm.DeclarativeBase": ("class", "orm/mapping_api.html"),
    "sqlalchemy.orm.Mapped": ("class", "orm/internals.html"),
    "sqlalchemy.orm.mapped_column": ("function", "orm/mapping_api.html"),
    "sqlalchemy.orm.declared_attr": ("class", "orm/mapping_api.html"),
    "sqlalchemy.engine.Engine": ("class", "core/connections.html"),
    "sqlalchemy.engine.base.Engine": ("class", "core/connections.html#sqlalchemy.engine.Engine"),
    "sqlalchemy.engine.Connection": ("class", "core/connections.html"),
    "sqlalchemy.engine.base.Connection": (
        "class",
        "core/connections.html#sqlalchemy.engine.Connection",
    ),
    "sqlalchemy.engine.URL": ("class", "core/engines.html"),
    "sqlalchemy.engine.url.URL": ("class", "core/engines.html#sqlalchemy.engine.URL"),
    "sqlalchemy.create_engine": ("function", "core/engines.html"),
    "sqlalchemy.pool.NullPool": ("class", "core/pooling.html"),
    "sqlalchemy.schema.MetaData": ("class", "core/metadata.html"),
    "sqlalchemy.sql.schema.MetaData": ("class", "core/metadata.html#sqlalchemy.schema.MetaData"),
    "sqlalchemy.schema.Table": ("class", "core/metadata.html"),
    "sqlalchemy.schema.ForeignKey": ("class", "core/constraints.html"),
    "sqlalchemy.ext.asyncio.AsyncEngine": ("class", "orm/extensions/asyncio.html"),
    "sqlalchemy.ext.asyncio.engine.AsyncEngine": (
        "class",
        "orm/extensions/asyncio.html#sqlalchemy.ext.asyncio.AsyncEngine",
    ),
    "sqlalchemy.ext.asyncio.AsyncSession": ("class", "orm/extensions/asyncio.html"),
    "sqlalchemy.ext.asyncio.session.AsyncSession": (
        "class",
        "orm/extensions/asyncio.html#sqlalchemy.ext.asyncio.AsyncSession",
    ),
    "sqlalchemy.ext.asyncio.async_sessionmaker": ("class", "orm/extensions/asyncio.html"),
    "sqlalchemy.ext.asyncio.create_async_engine": ("function", "orm/extensions/asyncio.html"),
}

ALEMBIC = {
    "alembic.operations.Operations": ("class", "ops.html"),
    "alembic.operations.Operations.batch_alter_table": ("method", "ops.html"),
    "alembic.operations.Operations.create_table": ("method", "ops.html"),
    "alembic.runtime.environment.EnvironmentContext": ("class", "api/runtime.html"),
    "alembic.runtime.environment.EnvironmentContext.configure": ("method", "api/runtime.html"),
    "alembic.command.upgrade": ("function", "api/commands.html"),
}

PYTHON = {
    "datetime.datetime": ("class", "library/datetime.html"),
    "datetime.timedelta": ("class", "library/datetime.html"),
    "typing.Any": ("data", "library/typing.html"),
    "collections.abc.Callable": ("class", "library/collections.abc.html"),
    "collections.abc.Iterable": ("class", "library/collections.abc.html"),
    "collections.abc.Iterator": ("class", "library/collections.abc.html"),
    "collections.abc.Sequence": ("class", "library/collections.abc.html"),
    "collections.abc.Mapping": ("class", "library/collections.abc.html"),
    "collections.abc.Awaitable": ("class", "library/collections.abc.html"),
    "logging.Logger": ("class", "library/logging.html"),
    "threading.Event": ("class", "library/threading.html"),
    "asyncio.AbstractEventLoop": ("class", "library/asyncio-eventloop.html"),
    "zoneinfo.ZoneInfo": ("class", "library/zoneinfo.html"),
    "argparse.ArgumentParser": ("class", "library/argparse.html"),
    "secrets": ("module", "library/secrets.html"),
}
for name in dir(builtins):
    value = getattr(builtins, name)
    if isinstance(value, type) and issubclass(value, BaseException):
        PYTHON[name] = ("exception", "library/exceptions.html")
    elif isinstance(value, type):
        PYTHON[name] = ("class", "library/functions.html")


def write(path: Path, project: str, version: str, entries: dict[str, tuple[str, str]]) -> None:
    lines = []
    for name, (role, uri) in sorted(entries.items()):
        if "#" not in uri:
            uri = f"{uri}#{name}"
        lines.append(f"{name} py:{role} 1 {uri} -")
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    path.write_bytes(header.encode() + zlib.compress(("\n".join(lines) + "\n").encode()))


if __name__ == "__main__":
    write(HERE / "sqlalchemy.inv", "SQLAlchemy", "2.0", SQLALCHEMY)
    write(HERE / "alembic.inv", "Alembic", "1.13", ALEMBIC)
    write(HERE / "python.inv", "Python", "3", PYTHON)
