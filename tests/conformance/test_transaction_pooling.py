"""Behind a transaction pooler: what ``transaction_pooling`` changes, and what it refuses.

The queue's operations through a real PgBouncer in transaction mode are the
``pgbouncer`` flavour of the modules in ``tests.support.pgbouncer.PGBOUNCER_MODULES``;
this module covers the option itself: where the workers' ``LISTEN`` goes (a direct
``listen_url``, else polling, said in the log), migrations through the pooler, and the
refusals (another database, a listen URL without pooling, bad CLI variables).
"""

from __future__ import annotations

import logging
import threading

import pytest
import sqlalchemy

import sqlq_orm
from sqlq_orm import migrate
from sqlq_orm.cli.connect import CommandError, pooling_options
from sqlq_orm.db.pooling import transaction_pooling_of
from tests.support.backends import PGBOUNCER
from tests.support.pgbouncer import engine_options
from tests.support.worker_helpers import wait_until

through_pgbouncer = pytest.mark.parametrize("db_url", [PGBOUNCER], indirect=True)

WAKE_LIMIT = 10.0


@pytest.mark.parametrize("db_url", ["sqlite", "mariadb"], indirect=True)
def test_transaction_pooling_is_refused_where_there_is_no_pooler(db_url):
    with pytest.raises(sqlq_orm.InvalidInput, match="transaction_pooling is for PostgreSQL"):
        sqlq_orm.create_engine(db_url, transaction_pooling=True)


def test_a_listen_url_without_transaction_pooling_is_refused():
    with pytest.raises(sqlq_orm.InvalidInput, match="pass transaction_pooling=True"):
        sqlq_orm.create_engine(
            "postgresql://app@pooler:6432/app", listen_url="postgresql://app@db:5432/app"
        )


def test_a_listen_url_must_be_postgresqls():
    with pytest.raises(sqlq_orm.InvalidInput, match="must be a PostgreSQL URL.*mysql"):
        sqlq_orm.create_engine(
            "postgresql://app@pooler:6432/app",
            transaction_pooling=True,
            listen_url="mysql://app@db/app",
        )


@through_pgbouncer
def test_behind_the_pooler_with_a_listen_url_the_watch_listens_directly(queue, db_url, caplog):
    caplog.set_level(logging.INFO, logger="sqlq_orm.wakeups")
    woken = threading.Event()
    watch = queue.watch_for_jobs(["default"], woken)
    try:
        assert woken.wait(WAKE_LIMIT), "the listener never connected"
        woken.clear()
        other = sqlq_orm.create_engine(db_url, **engine_options(db_url))  # another process
        sqlq_orm.Queue(other).enqueue("echo")
        other.dispose()
        assert woken.wait(WAKE_LIMIT), "the direct listener did not hear the enqueue"
    finally:
        watch.close()
    direct = sqlalchemy.make_url(engine_options(db_url)["listen_url"])
    assert f"LISTEN on a direct connection to {direct.render_as_string()}" in caplog.text


@through_pgbouncer
def test_behind_the_pooler_without_a_listen_url_workers_poll_and_say_so(db_url, engine, caplog):
    caplog.set_level(logging.INFO, logger="sqlq_orm.wakeups")
    pooled = sqlq_orm.create_engine(db_url, transaction_pooling=True)
    try:
        watch = sqlq_orm.Queue(pooled).watch_for_jobs(["default"], threading.Event())
        wait_until(lambda: not watch.listening, "the listener thread to give up")
        watch.close()
    finally:
        pooled.dispose()
    assert "wake-ups: polling" in caplog.text
    assert "no listen_url" in caplog.text


@through_pgbouncer
def test_migrations_run_through_the_pooler(db_url):
    pooled = sqlq_orm.create_engine(db_url, **engine_options(db_url))
    try:
        with pooled.begin() as connection:  # the engine fixture made the tables: start empty
            connection.exec_driver_sql("DROP SCHEMA public CASCADE")
            connection.exec_driver_sql("CREATE SCHEMA public")
        migrate.upgrade(pooled)
        migrate.downgrade(pooled, "base")
        migrate.upgrade(pooled)
        assert migrate.current(pooled) == set(migrate.newest_revisions())
        assert migrate.check(pooled) == []
        sqlq_orm.Queue(pooled).enqueue("echo")
    finally:
        pooled.dispose()


@through_pgbouncer
def test_an_engine_behind_the_pooler_prepares_nothing_on_the_server(engine):
    assert transaction_pooling_of(engine) is not None
    with engine.connect() as connection:
        for _ in range(10):  # psycopg prepares after 5 runs unless told not to
            connection.exec_driver_sql("SELECT 1").all()
            connection.commit()
        driver_connection = connection.connection.driver_connection
        assert driver_connection is not None
        assert driver_connection.prepare_threshold is None


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, {}),
        ({"SQLQ_TRANSACTION_POOLING": "0"}, {}),
        ({"SQLQ_TRANSACTION_POOLING": "1"}, {"transaction_pooling": True, "listen_url": None}),
        (
            {"SQLQ_TRANSACTION_POOLING": "true", "SQLQ_LISTEN_URL": "postgresql://db/app"},
            {"transaction_pooling": True, "listen_url": "postgresql://db/app"},
        ),
    ],
)
def test_the_cli_reads_transaction_pooling_from_its_environment(monkeypatch, environment, expected):
    monkeypatch.delenv("SQLQ_TRANSACTION_POOLING", raising=False)
    monkeypatch.delenv("SQLQ_LISTEN_URL", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert pooling_options() == expected


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"SQLQ_TRANSACTION_POOLING": "maybe"}, "must be 1 or 0, got 'maybe'"),
        ({"SQLQ_LISTEN_URL": "postgresql://db/app"}, "SQLQ_TRANSACTION_POOLING is not"),
    ],
)
def test_the_cli_refuses_contradictory_pooling_variables(monkeypatch, environment, message):
    monkeypatch.delenv("SQLQ_TRANSACTION_POOLING", raising=False)
    monkeypatch.delenv("SQLQ_LISTEN_URL", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CommandError, match=message):
        pooling_options()
