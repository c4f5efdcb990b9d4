"""Which database the CLI talks to, and how: the URL, the engine, the schema, the queue.

The database comes from ``--db URL``, else ``$SQLQ_DATABASE_URL``, else the SQLite file
``sqlq.db`` in the working directory. Every failure here is a :class:`CommandError`
whose message is shown as is, on one line.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from sqlq_orm.errors import SqlqError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from sqlq_orm.db.tables import Models
    from sqlq_orm.queue.queue import Queue

# SQLAlchemy, the queue and Alembic are imported inside the functions that use them:
# the parser reads this module's names, and ``sqlq --help`` needs none of them.

DEFAULT_DB_URL = "sqlite:///sqlq.db"
DB_ENV_VAR = "SQLQ_DATABASE_URL"
POOLING_ENV_VAR = "SQLQ_TRANSACTION_POOLING"
LISTEN_URL_ENV_VAR = "SQLQ_LISTEN_URL"
SCHEMA_ENV_VAR = "SQLQ_SCHEMA"


def schema_option() -> str | None:
    """The schema the queue's tables live in (``$SQLQ_SCHEMA``; unset: the default)."""
    return os.environ.get(SCHEMA_ENV_VAR) or None


class CommandError(SqlqError):
    """A command could not do what was asked; the message is shown as is."""


def database_url(db: str | None) -> str:
    """The URL to use: ``--db``, else ``$SQLQ_DATABASE_URL``, else ``sqlq.db`` here.

    An empty ``--db ""`` (an unset shell variable, typically) is refused rather than
    taken to mean the default file.
    """
    if db is not None and not db.strip():
        raise CommandError(
            "--db is empty (an unset shell variable?); give a database URL such as "
            f"{DEFAULT_DB_URL} or postgresql://user@host/dbname, or leave --db out"
        )
    return db or os.environ.get(DB_ENV_VAR) or DEFAULT_DB_URL


def require_existing_sqlite_file(url: str) -> None:
    """Refuse a SQLite URL whose file does not exist: connecting would create an empty
    database there (a mistyped path), which only ``sqlq migrate`` and ``sqlq demo``
    should do."""
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = sqlalchemy.make_url(url)
    except ArgumentError:
        return  # open_engine says what is wrong with it
    if parsed.get_backend_name() != "sqlite" or parsed.query.get("uri") in ("true", "1"):
        return
    path = parsed.database
    if not path or path == ":memory:":
        return
    if not os.path.exists(path):
        raise CommandError(
            f"no database at {os.path.abspath(path)} (from {shown_url(url)}); check the "
            "path, or create it with `sqlq migrate`"
        )


def shown_url(url: str) -> str:
    """The URL as it may be printed: password hidden (quoted as is if it does not parse)."""
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError

    try:
        return sqlalchemy.make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def _dialect(url: str) -> str:
    """The URL's ``dialect+driver`` part, e.g. ``mysql`` or ``postgresql+asyncpg``."""
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError

    try:
        return sqlalchemy.make_url(url).drivername
    except ArgumentError:
        return repr(url)


def pooling_options() -> dict[str, Any]:
    """``create_engine`` options for a database behind a transaction pooler (PgBouncer
    in transaction mode), from ``$SQLQ_TRANSACTION_POOLING`` (``1``/``true``) and
    ``$SQLQ_LISTEN_URL`` (a direct URL for the workers' ``LISTEN``; without it they
    poll). See :mod:`sqlq_orm.db.pooling`."""
    flag = os.environ.get(POOLING_ENV_VAR, "").strip().lower()
    listen_url = os.environ.get(LISTEN_URL_ENV_VAR) or None
    if flag in ("", "0", "false", "no"):
        if listen_url is not None:
            raise CommandError(
                f"${LISTEN_URL_ENV_VAR} is set but ${POOLING_ENV_VAR} is not: the listen URL "
                f"is for a database reached through a transaction pooler; set "
                f"{POOLING_ENV_VAR}=1 too, or unset {LISTEN_URL_ENV_VAR}"
            )
        return {}
    if flag not in ("1", "true", "yes"):
        raise CommandError(f"${POOLING_ENV_VAR} must be 1 or 0, got {flag!r}")
    return {"transaction_pooling": True, "listen_url": listen_url}


def open_engine(db: str | None, **kwargs: Any) -> Engine:
    """An engine for the chosen database, with a clear error for a bad URL (behind a
    transaction pooler when the environment says so: :func:`pooling_options`)."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from sqlq_orm.db.engine import create_engine

    url = database_url(db)
    try:
        return create_engine(url, **{**pooling_options(), **kwargs})
    except ImportError as exc:  # the dialect's DBAPI driver is not installed
        raise CommandError(
            f"cannot use the database URL {shown_url(url)}: the dialect {_dialect(url)!r} is "
            f"not supported or its driver is not installed ({exc}); sqlq_orm supports "
            "sqlite://, postgresql:// and mysql:// / mariadb:// (install sqlq_orm[postgres] "
            "for PostgreSQL's driver, sqlq_orm[mysql] for MariaDB's and MySQL's)"
        ) from None
    except NoSuchModuleError:
        raise CommandError(
            f"unsupported database URL {shown_url(url)}: sqlq_orm supports sqlite://, "
            "postgresql:// (install sqlq_orm[postgres]) and mysql:// or mariadb:// "
            "(install sqlq_orm[mysql])"
        ) from None
    except ArgumentError as exc:
        raise CommandError(
            f"invalid database URL {url!r} ({exc}); expected e.g. sqlite:///sqlq.db or "
            "postgresql://user@host/dbname"
        ) from None


def migrate_schema(engine: Engine) -> str:
    """Bring the schema to the newest revision with the packaged Alembic migrations
    (the tables in ``$SQLQ_SCHEMA`` when it is set)."""
    from sqlq_orm.migrate import current, upgrade

    schema = schema_option()
    upgrade(engine, schema=schema)
    where = "" if schema is None else f" in schema {schema}"
    return f"schema{where} at revision {', '.join(sorted(current(engine, schema=schema)))} (newest)"


MODELS_ENV_VAR = "SQLQ_MODELS"


def load_models(spec: str | None) -> Models | None:
    """The app's models from ``"package.module:NAME"`` (``--models``, else ``$SQLQ_MODELS``).

    ``NAME`` is a :class:`~sqlq_orm.Models`; None (no option, no variable) means the
    library's own models. The working directory is importable, as for ``python -m``.
    """
    from sqlq_orm.db.tables import Models

    spec = spec or os.environ.get(MODELS_ENV_VAR)
    if not spec:
        return None
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CommandError(f"--models must look like 'package.module:MODELS', got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import models module {module_name!r}: {exc}") from None
    found = getattr(module, attribute, None)
    if not isinstance(found, Models):
        raise CommandError(
            f"--models {spec!r} names a {type(found).__name__}, not a sqlq_orm.Models "
            "(e.g. MODELS = sqlq_orm.Models(job=Job, attempt=JobAttempt, event=JobEvent, "
            "worker=Worker))"
        )
    return found


def worker_queue(
    db: str | None,
    bound: Queue | None,
    *,
    models: str | None = None,
    retry_base: float | None = None,
    **engine_kwargs: Any,
) -> Queue:
    """The queue ``sqlq worker`` runs: :func:`open_queue`'s, except that with neither
    ``--db`` nor ``$SQLQ_DATABASE_URL`` a ``--handlers`` registry ``bound`` to a queue
    lends its engine, and without ``--models`` (or ``$SQLQ_MODELS``) its models: the
    app's configuration, given once."""
    if bound is None:
        return open_queue(db, models=models, retry_base=retry_base, **engine_kwargs)
    chosen = load_models(models) or bound.models
    if db is not None or os.environ.get(DB_ENV_VAR):
        return open_queue(db, models=chosen, retry_base=retry_base, **engine_kwargs)
    if bound.engine.dialect.is_async:
        raise CommandError(
            "the --handlers registry is bound to an AsyncQueue, whose engine the worker "
            "cannot use from its threads: give the worker the database with --db (or "
            f"${DB_ENV_VAR}) as a synchronous URL, e.g. postgresql+psycopg://..."
        )
    url = bound.engine.url.render_as_string(hide_password=False)
    return open_queue(
        url, models=chosen, retry_base=retry_base, engine=bound.engine, schema=bound.context.schema
    )


def open_queue(
    db: str | None,
    *,
    models: str | Models | None = None,
    refuse_newer_schema: bool = True,
    retry_base: float | None = None,
    engine: Engine | None = None,
    schema: str | None = None,
    **engine_kwargs: Any,
) -> Queue:
    """A :class:`Queue` on the chosen database, after checking its tables exist.

    With ``refuse_newer_schema`` (commands that run or change jobs), a schema that a
    newer sqlq_orm migrated is refused (:class:`~sqlq_orm.errors.SchemaNewerThanCode`):
    this code cannot know what that revision changed, so it must not write as if
    nothing had. Read-only commands and the database's upkeep pass False. ``models``
    names the app's :class:`~sqlq_orm.Models` (see :func:`load_models`), or is one.
    ``engine`` is an app's engine on ``db`` to use instead of opening one, ``schema``
    the schema it keeps the tables in when ``$SQLQ_SCHEMA`` does not say.
    """
    import sqlalchemy

    from sqlq_orm.core.backoff import RetryPolicy
    from sqlq_orm.db.tables import Models
    from sqlq_orm.queue.queue import Queue

    require_existing_sqlite_file(database_url(db))
    if engine is None:
        engine = open_engine(db, **engine_kwargs)
    retry_policy = None
    if retry_base is not None:
        retry_policy = RetryPolicy(base_seconds=retry_base, max_seconds=max(retry_base, 3600.0))
    queue = Queue(
        engine,
        retry_policy=retry_policy,
        models=models if isinstance(models, Models) else load_models(models),
        check_schema=False,
        schema=schema_option() or schema,
    )
    jobs_table = queue.tables.jobs
    with queue.read() as connection:
        exists = sqlalchemy.inspect(connection).has_table(jobs_table.name, schema=jobs_table.schema)
    if not exists:
        raise CommandError(
            f"the database {shown_url(database_url(db))} has no {jobs_table.name} table; "
            "run `sqlq migrate` first"
        )
    if refuse_newer_schema:
        # Alembic, only for the commands that run or change jobs.
        from sqlq_orm.migrate import check_schema_revision

        check_schema_revision(engine, schema=queue.context.schema)
    queue.check_schema()  # tables or columns missing: the revision or command to run
    return queue
