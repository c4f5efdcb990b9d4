"""What a host app's own Alembic setup calls: in its ``env.py``, and in its revisions.

``safe_migration(connection)`` wraps the migration transaction in ``env.py``::

    with engine.connect() as connection, safe_migration(connection):
        context.configure(connection=connection, target_metadata=Base.metadata)
        with context.begin_transaction():
            context.run_migrations()

``upgrade(op, to=...)`` / ``downgrade(op, from_=...)`` apply sqlq's schema steps
inside one of the host's own revisions, so the host keeps a single head::

    def upgrade():
        op.create_table("orders", ...)
        sqlq_orm.migrations.upgrade(op, to="sqlq_0001")

    def downgrade():
        sqlq_orm.migrations.downgrade(op, from_="sqlq_0001")
        op.drop_table("orders")
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.script import Script, ScriptDirectory
from sqlalchemy.engine import Connection

from sqlq_orm.db.backends import backend_for
from sqlq_orm.db.maintenance import (
    check_foreign_keys,
    foreign_keys_suspended,
    index_order_kept,
    lock_for_migration,
)
from sqlq_orm.errors import SqlqError

SQLQ_REVISION_PREFIX = "sqlq_"
"""Every sqlq revision id starts with this."""


@contextmanager
def safe_migration(connection: Connection) -> Iterator[None]:
    """Run the migrations inside as one transaction that cannot silently lose rows.

    On SQLite, Alembic's batch mode alters a table by copying it, dropping the
    original and renaming the copy; with foreign keys ON (as
    :func:`sqlq_orm.create_engine` sets them) dropping ``sqlq_jobs`` deletes every
    attempt and event. This turns foreign keys off around the transaction (SQLite
    ignores the pragma inside one), begins it, takes the migration lock, and before
    committing runs ``PRAGMA foreign_key_check``, raising
    :class:`~sqlq_orm.errors.SqlqError` that names the tables with broken references
    (the whole migration is then rolled back). A rebuilt table's indexes come back
    with their DESC columns (SQLite's reflection, which batch mode copies, drops them).
    Elsewhere it is one transaction with PostgreSQL's migration advisory lock.

    Enter it on a fresh connection, *before* ``context.configure(connection=...)``:
    Alembic then sees the transaction as the caller's and leaves the commit to it.
    """
    if connection.in_transaction():
        raise SqlqError(
            "safe_migration() needs a connection outside any transaction (SQLite ignores "
            "PRAGMA foreign_keys inside one): enter it right after engine.connect(), "
            "before context.configure() and context.begin_transaction()"
        )
    # SQLite: BEGIN IMMEDIATE (the queue's write mode), so two migrations queue up
    # for the write lock instead of one failing on a stale read.
    connection.execution_options(**backend_for(connection.engine).write_options)
    with foreign_keys_suspended(connection), index_order_kept(connection), connection.begin():
        lock_for_migration(connection)
        try:
            yield
        except KeyError as exc:
            clearer = _missing_revision(exc)
            if clearer is None:
                raise
            raise clearer from exc
        # Inside the transaction, so a migration that broke a reference rolls back.
        check_foreign_keys(connection)


def _missing_revision(exc: KeyError) -> SqlqError | None:
    """Alembic's bare ``KeyError: 'sqlq_0001'`` as an error that says what to do."""
    name = exc.args[0] if exc.args else None
    if not isinstance(name, str) or not name.startswith(SQLQ_REVISION_PREFIX):
        return None
    return SqlqError(
        f"a revision refers to sqlq's revision {name!r}, which Alembic cannot find: add "
        "sqlq_orm.migrations:versions to version_locations in alembic.ini (with "
        "path_separator = space), or drop the dependency and create sqlq's tables in "
        "your own revision with sqlq_orm.migrations.upgrade(op, to=...)"
    )


def upgrade(op: Any, *, to: str, from_: str | None = None) -> None:
    """Apply sqlq's schema steps after ``from_`` up to and including ``to``.

    Call it from a host revision's ``upgrade()``, passing Alembic's ``op``. ``to``
    is explicit because a revision is a snapshot: upgrading sqlq_orm later must not
    change what an existing revision does. When sqlq_orm ships a new revision, write a
    new host revision with ``upgrade(op, from_="sqlq_0001", to="sqlq_0002")``.
    """
    for script in reversed(_steps(op, upper=to, lower=from_)):
        script.module.upgrade()


def downgrade(op: Any, *, from_: str, to: str | None = None) -> None:
    """Undo sqlq's schema steps from ``from_`` down to (not including) ``to``.

    ``to=None`` drops sqlq's tables. The mirror of :func:`upgrade`: a host revision
    that ran ``upgrade(op, to="sqlq_0001")`` runs ``downgrade(op, from_="sqlq_0001")``.
    """
    for script in _steps(op, upper=from_, lower=to):
        script.module.downgrade()


def _steps(op: Any, *, upper: str, lower: str | None) -> list[Script]:
    """sqlq's revisions after ``lower`` up to ``upper``, newest first."""
    scripts = _script_directory()
    known = {script.revision for script in scripts.walk_revisions()}
    for name in (upper, lower):
        if name is not None and name not in known:
            raise SqlqError(f"unknown sqlq revision {name!r}; known: {sorted(known)}")
    # The revision modules say ``from alembic import op``: that proxy is bound to the
    # migration running now, so there must be one.
    try:
        op.get_context()
    except (NameError, AttributeError) as exc:
        raise SqlqError(
            "sqlq_orm.migrations.upgrade()/downgrade() run inside an Alembic revision's "
            "upgrade()/downgrade(), with alembic's op"
        ) from exc
    return list(scripts.iterate_revisions(upper, lower or "base"))


def _script_directory() -> ScriptDirectory:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).resolve().parent))
    cfg.set_main_option("path_separator", "os")
    return ScriptDirectory.from_config(cfg)
