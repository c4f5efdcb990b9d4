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
from sqlalchemy.schema import CreateSchema

from sqlq_orm.core import validation
from sqlq_orm.db.backends import backend_for
from sqlq_orm.db.maintenance import (
    check_foreign_keys,
    foreign_keys_suspended,
    index_order_kept,
    lock_for_migration,
    migration_session_locked,
)
from sqlq_orm.errors import SqlqError
from sqlq_orm.migrations.standing import revision_standing

SQLQ_REVISION_PREFIX = "sqlq_"
"""Every sqlq revision id starts with this."""


@contextmanager
def safe_migration(connection: Connection) -> Iterator[None]:
    """Run the migrations inside as one transaction that cannot silently lose rows.

    On SQLite, Alembic's batch mode alters a table by copying it, dropping the
    original and renaming the copy; with foreign keys ON (as
    :func:`sqlq_orm.create_engine` sets them) dropping ``sqlq_jobs`` deletes every
    attempt and event. This turns foreign keys off around the transaction (SQLite
    ignores the pragma inside one), begins it (``BEGIN IMMEDIATE``, on a plain engine
    too, so the DDL is inside it and a failed run leaves nothing half-made), takes the
    migration lock, and before committing runs ``PRAGMA foreign_key_check``, raising
    :class:`~sqlq_orm.errors.SqlqError` that names the tables with broken references
    (the whole migration is then rolled back). A rebuilt table's indexes come back
    with their DESC columns (SQLite's reflection, which batch mode copies, drops them).
    On PostgreSQL it is one transaction with the migration advisory lock. On MySQL and
    MariaDB, where each DDL statement commits, it holds the named migration lock for the
    whole run and leaves Alembic a transaction per revision, so the revisions done
    before a failing one stay recorded and a rerun goes on from there.

    Enter it on a fresh connection, *before* ``context.configure(connection=...)``:
    Alembic then sees the transaction as the caller's and leaves the commit to it.
    Under Alembic's async template (``alembic init -t async``) enter it the same way,
    inside the function given to ``connection.run_sync``: aiosqlite, asyncpg and
    aiomysql all work.
    """
    if connection.in_transaction():
        raise SqlqError(
            "safe_migration() needs a connection outside any transaction (SQLite ignores "
            "PRAGMA foreign_keys inside one): enter it right after engine.connect(), "
            "before context.configure() and context.begin_transaction()"
        )
    backend = backend_for(connection.engine)
    if backend.ddl_commits:
        # MySQL commits each DDL statement: one transaction around the run would only
        # lose the version row of the last revision done when a later one fails (the
        # rerun then repeats it and stops at "table exists"). Alembic's own transaction
        # per revision records each as it ends; the named lock holds for the whole run.
        with migration_session_locked(connection), _missing_revisions_named():
            yield
        return
    # SQLite: BEGIN IMMEDIATE (the queue's write mode), so two migrations queue up
    # for the write lock instead of one failing on a stale read.
    connection.execution_options(**backend.write_options)
    with foreign_keys_suspended(connection), index_order_kept(connection), connection.begin():
        lock_for_migration(connection)
        with _missing_revisions_named():
            yield
        # Inside the transaction, so a migration that broke a reference rolls back.
        check_foreign_keys(connection)


@contextmanager
def _missing_revisions_named() -> Iterator[None]:
    try:
        yield
    except KeyError as exc:
        clearer = _missing_revision(exc)
        if clearer is None:
            raise
        raise clearer from exc


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


def upgrade(op: Any, *, to: str, from_: str | None = None, schema: str | None = None) -> None:
    """Apply sqlq's schema steps after ``from_`` up to and including ``to``.

    Call it from a host revision's ``upgrade()``, passing Alembic's ``op``. ``to``
    is explicit because a revision is a snapshot: upgrading sqlq_orm later must not
    change what an existing revision does (``to=sqlq_orm.migrations.NEWEST_REVISION``
    names the newest at the time of writing; write the id itself to pin it). Without
    ``from_`` the steps start from where the database stands, read from its schema
    (:mod:`sqlq_orm.migrations.standing`): a new host revision for a new sqlq_orm
    release needs only ``upgrade(op, to="sqlq_0005")``. In ``--sql`` (offline) mode
    nothing can be read: without ``from_`` the steps start from the beginning.

    ``schema`` puts sqlq's tables in that schema (PostgreSQL; a database on MariaDB),
    created if missing, for a ``Queue(engine, schema=...)``: the steps run with it as
    the ``search_path`` (MariaDB: ``USE``), then the host's own operations that follow
    in the revision go where they went before. SQLite has no schemas (SqlqError).
    """
    from sqlq_orm.migrations import ordered_revisions

    revisions = ordered_revisions()
    _require_known(revisions, to, from_)
    _require_running_migration(op)
    with _in_schema(op, schema, create=True):
        if from_ is None and not op.get_context().as_sql:
            from_ = revision_standing(op.get_bind(), revisions)
            if from_ is not None and revisions.index(from_) >= revisions.index(to):
                return  # the database is there already
        for script in reversed(_steps(op, upper=to, lower=from_)):
            script.module.upgrade()


def downgrade(op: Any, *, from_: str, to: str | None = None, schema: str | None = None) -> None:
    """Undo sqlq's schema steps from ``from_`` down to (not including) ``to``.

    ``to=None`` drops sqlq's tables. The mirror of :func:`upgrade`: a host revision
    that ran ``upgrade(op, to="sqlq_0001")`` runs ``downgrade(op, from_="sqlq_0001")``
    (with the same ``schema``; the schema itself stays).
    """
    steps = _steps(op, upper=from_, lower=to)
    with _in_schema(op, schema, create=False):
        for script in steps:
            script.module.downgrade()


@contextmanager
def _in_schema(op: Any, schema: str | None, *, create: bool) -> Iterator[None]:
    """Around sqlq's steps: their unqualified names resolve in ``schema`` (None: as is)."""
    if schema is None:
        yield
        return
    schema = validation.schema_name(schema)
    assert schema is not None
    _require_running_migration(op)
    if op.get_context().as_sql:
        raise SqlqError(
            f"sqlq_orm.migrations upgrade/downgrade with schema={schema!r} needs a live "
            "connection; offline (--sql) scripts cannot switch schemas"
        )
    connection = op.get_bind()
    backend = backend_for(connection.dialect)
    try:
        switch = backend.migrate_in_schema(connection, schema)
        if create:
            connection.execute(CreateSchema(schema, if_not_exists=True))
    except ValueError as exc:
        raise SqlqError(f"schema={schema!r}: {exc}") from None
    with switch:
        yield


def _steps(op: Any, *, upper: str, lower: str | None) -> list[Script]:
    """sqlq's revisions after ``lower`` up to ``upper``, newest first."""
    from sqlq_orm.migrations import ordered_revisions

    _require_known(ordered_revisions(), upper, lower)
    _require_running_migration(op)
    return list(_script_directory().iterate_revisions(upper, lower or "base"))


def _require_known(revisions: list[str], *names: str | None) -> None:
    for name in names:
        if name is not None and name not in revisions:
            raise SqlqError(f"unknown sqlq revision {name!r}; known: {sorted(revisions)}")


def _require_running_migration(op: Any) -> None:
    # The revision modules say ``from alembic import op``: that proxy is bound to the
    # migration running now, so there must be one.
    try:
        op.get_context()
    except (NameError, AttributeError) as exc:
        raise SqlqError(
            "sqlq_orm.migrations.upgrade()/downgrade() run inside an Alembic revision's "
            "upgrade()/downgrade(), with alembic's op"
        ) from exc


def _script_directory() -> ScriptDirectory:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).resolve().parent))
    cfg.set_main_option("path_separator", "os")
    return ScriptDirectory.from_config(cfg)


def place_app_revisions(context: Any, revision: Any, directives: list[Any]) -> None:
    """Alembic's ``process_revision_directives`` for an app that keeps sqlq's revisions
    as a second branch (``sqlq_orm.migrations:versions`` in its ``version_locations``).

    Left alone, ``alembic revision`` bases an app's first revision on sqlq's head and
    writes it into sqlq's folder, inside site-packages. With this hook (``env.py``:
    ``context.configure(..., process_revision_directives=place_app_revisions)``) a new
    revision is the app's: based on the app's own head (``base`` for its first, a new
    branch), written to the app's own version location, and depending on sqlq's newest
    revision, so sqlq's tables exist before it runs. An explicit ``--head`` naming an
    app revision, ``--depends-on`` and ``--version-path`` are kept; a head or version
    path in sqlq's folder is moved to the app's. Set ``revision_environment = true`` in
    ``alembic.ini`` so plain ``alembic revision -m`` runs it too.
    """
    scripts = context.script
    if scripts is None:
        return
    from alembic.util import coerce_resource_to_filename

    from sqlq_orm.migrations import VERSIONS_DIR

    ours = VERSIONS_DIR.resolve()
    locations = [
        Path(coerce_resource_to_filename(location)).resolve()
        for location in (scripts.version_locations or [str(Path(scripts.dir, "versions"))])
    ]
    apps = [location for location in locations if location != ours]

    def is_sqlq(revision_id: str) -> bool:
        return Path(scripts.get_revision(revision_id).path).resolve().parent == ours

    app_heads = [head for head in scripts.get_heads() if not is_sqlq(head)]
    sqlq_heads = [head for head in scripts.get_heads() if is_sqlq(head)]
    for script in directives:
        head = script.head or "head"
        if head in ("head", "heads") or all(
            r is not None and is_sqlq(r.revision) for r in scripts.revision_map.get_revisions(head)
        ):
            if head not in ("head", "heads"):
                sqlq_heads = [str(r.revision) for r in scripts.revision_map.get_revisions(head)]
            if len(app_heads) > 1:
                continue  # Alembic asks which head: the app has to say
            script.head = app_heads[0] if app_heads else "base"
            depends = [d for d in _as_list(script.depends_on) if d not in sqlq_heads]
            script.depends_on = [*depends, *sqlq_heads] or None
        path = script.version_path
        if path is not None and Path(path).resolve() != ours:
            continue
        if path is None and script.head != "base":
            continue  # Alembic writes it next to its head: the app's
        if len(apps) != 1:
            raise SqlqError(
                "cannot tell which version location is the app's "
                f"({', '.join(map(str, apps)) or 'none besides sqlq_orm.migrations:versions'}); "
                "pass --version-path"
            )
        script.version_path = str(apps[0])


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)
