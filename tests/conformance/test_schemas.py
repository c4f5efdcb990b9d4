"""A queue in a schema of its own: ``Queue(engine, schema=...)`` and
``migrate.upgrade(engine, schema=...)``, on PostgreSQL (a schema) and MariaDB (a
database); SQLite has none and refuses.

Two queues in two schemas of one database share nothing: jobs, claims, the version
table, and wake-ups (the NOTIFY channel and the in-process wake-ups are per job table,
schema included).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy

import sqlq_orm
import sqlq_orm.migrations
from sqlq_orm import migrate
from tests.support.backends import engine_for

servers = pytest.mark.parametrize(
    "db_url",
    [
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
    indirect=True,
)


@pytest.fixture
def server(db_url) -> Iterator[sqlalchemy.Engine]:
    engine = engine_for(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def schemas(server) -> Iterator[list[str]]:
    """Two fresh schema names (databases on MariaDB: unique on the shared server),
    dropped afterwards whatever the test made in them."""
    names = [f"sqlq_{tag}_{uuid.uuid4().hex[:8]}" for tag in ("a", "b")]
    yield names
    cascade = " CASCADE" if server.dialect.name == "postgresql" else ""
    quote = '"' if server.dialect.name == "postgresql" else "`"
    with server.begin() as connection:
        for name in names:
            connection.exec_driver_sql(f"DROP SCHEMA IF EXISTS {quote}{name}{quote}{cascade}")


@servers
def test_two_queues_in_two_schemas_of_one_database_do_not_see_each_other(server, schemas):
    first, second = schemas
    migrate.upgrade(server, schema=first)
    migrate.upgrade(server, schema=second)
    a = sqlq_orm.Queue(server, schema=first)
    b = sqlq_orm.Queue(server, schema=second)

    job = a.enqueue("echo", {"n": 1}, dedupe_key="same")
    other = b.enqueue("echo", {"n": 2}, dedupe_key="same")  # another table: no dedupe hit

    assert other.created
    assert b.claim("w", limit=10) != []
    assert b.claim("w", limit=10) == []  # b's one job is taken; a's is not b's
    (lease,) = a.claim("w", limit=10)
    assert (lease.job_id, lease.payload) == (job.id, {"n": 1})
    a.start(lease)
    a.succeed(lease)
    assert a.counts_by_status()["SUCCEEDED"] == 1
    assert b.counts_by_status()["SUCCEEDED"] == 0
    assert a.get_job(job.id).events[-1].event == "SUCCEEDED"  # ORM reads: a's schema
    tables = sqlalchemy.inspect(server).get_table_names()
    assert "sqlq_jobs" not in tables  # nothing in the default schema
    assert "sqlq_alembic_version" not in tables


@servers
def test_migrations_put_the_tables_and_the_version_table_in_the_schema(server, schemas):
    first, _ = schemas
    migrate.upgrade(server, schema=first)
    inspector = sqlalchemy.inspect(server)
    assert {"sqlq_jobs", "sqlq_alembic_version"} <= set(inspector.get_table_names(schema=first))
    newest = set(migrate.newest_revisions())
    assert migrate.current(server, schema=first) == newest
    assert migrate.current(server) == set()  # the default schema records nothing

    migrate.upgrade(server, schema=first)  # again: nothing to do
    migrate.downgrade(server, "base", schema=first)
    assert "sqlq_jobs" not in sqlalchemy.inspect(server).get_table_names(schema=first)
    migrate.upgrade(server, schema=first)
    assert migrate.current(server, schema=first) == newest


@servers
def test_wake_ups_stay_inside_their_schema(server, schemas):
    first, second = schemas
    for name in schemas:
        migrate.upgrade(server, schema=name)
    a = sqlq_orm.Queue(server, schema=first)
    b = sqlq_orm.Queue(server, schema=second)
    assert a.sql.wake_channel != b.sql.wake_channel
    woken = threading.Event()
    watch = a.watch_for_jobs(["default"], woken, listen=False)
    try:
        b.enqueue("echo")
        assert not woken.is_set()
        a.enqueue("echo")
        assert woken.is_set()
    finally:
        watch.close()


def test_the_queue_names_what_a_schema_needs(engine, db_url):
    if engine.dialect.name == "sqlite":
        with pytest.raises(sqlq_orm.InvalidInput, match="SQLite has no schemas"):
            sqlq_orm.Queue(engine, schema="sqlq")
    for bad in ("", "1st", "a-b", "a;b", "x" * 64, 7):
        with pytest.raises(sqlq_orm.InvalidInput, match="schema must be a name"):
            sqlq_orm.Queue(engine, schema=bad)  # type: ignore[arg-type]


@servers
def test_the_cli_works_in_the_schema_sqlq_schema_names(
    db_url, server, schemas, monkeypatch, capsys
):
    from sqlq_orm.cli.entry import main

    first, _ = schemas
    monkeypatch.setenv("SQLQ_SCHEMA", first)
    assert main(["--db", db_url, "migrate"]) == 0
    assert f"in schema {first}" in capsys.readouterr().out
    assert main(["--db", db_url, "enqueue", "echo", "--payload", '{"n": 1}']) == 0
    assert main(["--db", db_url, "stats", "--json"]) == 0
    assert sqlq_orm.Queue(server, schema=first).counts_by_status()["QUEUED"] == 1
    assert "sqlq_jobs" not in sqlalchemy.inspect(server).get_table_names()


@servers
def test_an_enqueue_in_the_callers_session_lands_in_the_queues_schema(server, schemas):
    from sqlalchemy.orm import Session

    first, _ = schemas
    migrate.upgrade(server, schema=first)
    queue = sqlq_orm.Queue(server, schema=first)
    with Session(server) as session:  # a plain session: no schema translation of its own
        job = queue.enqueue("echo", {"n": 1}, session=session)
        session.commit()
    assert queue.get_job(job.id).status == "QUEUED"
    assert queue.claim("w")[0].job_id == job.id


def _host_revision(engine: sqlalchemy.Engine, steps) -> None:
    """Run ``steps(op)`` as a host revision would: Alembic's ``op`` on a live migration."""
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection, connection.begin():
        context = MigrationContext.configure(connection)
        with Operations.context(context):
            from alembic import op

            steps(op)


@servers
def test_a_host_revision_runs_sqlq_steps_in_a_schema_and_its_own_where_they_were(server, schemas):
    first, _ = schemas
    newest = max(migrate.newest_revisions())

    def upgrade(op) -> None:
        op.create_table(
            "host_before", sqlalchemy.Column("id", sqlalchemy.Integer, primary_key=True)
        )
        sqlq_orm.migrations.upgrade(op, to=newest, schema=first)
        op.create_table("host_after", sqlalchemy.Column("id", sqlalchemy.Integer, primary_key=True))

    _host_revision(server, upgrade)

    inspector = sqlalchemy.inspect(server)
    assert set(sqlq_orm.Base.metadata.tables) <= set(inspector.get_table_names(schema=first))
    assert {"host_before", "host_after"} <= set(inspector.get_table_names())
    assert "sqlq_jobs" not in inspector.get_table_names()
    queue = sqlq_orm.Queue(server, schema=first)  # checks the schema stands at the newest
    job = queue.enqueue("t", {"tenant": "acme"})
    assert [lease.job_id for lease in queue.claim("w")] == [job.id]

    _host_revision(server, lambda op: sqlq_orm.migrations.downgrade(op, from_=newest, schema=first))

    assert sqlalchemy.inspect(server).get_table_names(schema=first) == []


def test_a_host_revision_into_a_schema_on_sqlite_says_there_are_none(tmp_path):
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'host.db'}")

    with pytest.raises(sqlq_orm.SqlqError, match="schema='tenant_a'.* no schemas"):
        _host_revision(
            engine, lambda op: sqlq_orm.migrations.upgrade(op, to="sqlq_0001", schema="tenant_a")
        )
    engine.dispose()
