"""A broken network between the queue and its database (issue 37), through a proxy.

Every test puts :class:`tests.support.netproxy.NetProxy` between a real engine and
the server (PostgreSQL, PgBouncer, MariaDB) and breaks the link on purpose: a black
hole, a reset after a COMMIT went out, a COMMIT that never gets an answer. What is
asserted is what the caller sees (an ``OperationalError``, a log line, the rows), never
how long it took; a hang guard fails a test that would block for ever.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

import sqlq_orm
from sqlq_orm.schema.models import Job
from tests.support.aio_bridge import async_url
from tests.support.backends import BACKENDS, PGBOUNCER
from tests.support.netproxy import NetProxy
from tests.support.pgbouncer import engine_options
from tests.support.worker_helpers import Processes, running, status_is, wait_until

SERVERS = [*BACKENDS[1:], PGBOUNCER]
"""PostgreSQL, MariaDB and PgBouncer: SQLite has no network."""

HANG_GUARD = 45.0
"""A call still blocked after this long fails its test (the bounds under test are a
few seconds; this only keeps a regression from hanging the suite)."""

WORKER_LEASE = 6
"""The lease the test workers' engines are fitted to: a 2 s ``tcp_user_timeout`` on
PostgreSQL, 3 s read and write timeouts on MariaDB."""


def _is_postgres(db_url: str) -> bool:
    return sqlalchemy.make_url(db_url).get_backend_name() == "postgresql"


@pytest.fixture
def proxy(db_url: str) -> Iterator[NetProxy]:
    """A proxy in front of the test's server, stopped at the end of the test."""
    with NetProxy.in_front_of(db_url, lifetime=HANG_GUARD + 30) as started:
        yield started


def engine_through(proxy: NetProxy, db_url: str, **kwargs: Any) -> Engine:
    """An engine on the test's database that reaches it through ``proxy``."""
    return sqlq_orm.create_engine(proxy.url(db_url), **engine_options(db_url), **kwargs)


def outcome_of(call: Callable[[], Any], proxy: NetProxy) -> Any:
    """Run ``call`` on a thread; return what it raised (or returned). Past
    :data:`HANG_GUARD` the proxy is stopped (its connections reset) and the test fails."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=target, name="netfault-call", daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    if thread.is_alive():
        proxy.stop()
        thread.join(10)
        pytest.fail(f"the call was still blocked after {HANG_GUARD:g}s on a black-holed link")
    return outcome[0]


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_worker_engine_whose_link_goes_black_mid_statement_raises(db_url, proxy):
    engine = engine_through(proxy, db_url, worker_lease_seconds=WORKER_LEASE)
    # libpq has no read timeout: on PostgreSQL the bound is tcp_user_timeout, which
    # counts while sent bytes go unacknowledged. Behind a proxy (whose kernel
    # acknowledges what fits its buffers) that takes a statement larger than the
    # buffers between; a lossy link leaves even a small one unacknowledged.
    # PyMySQL's read timeout also bounds a small statement whose answer never comes.
    payload = "x" * (16 << 20) if _is_postgres(db_url) else "x"
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
            proxy.set_mode("blackhole")

            raised = outcome_of(
                lambda: connection.execute(text("SELECT LENGTH(:p)"), {"p": payload}), proxy
            )

            assert isinstance(raised, OperationalError), raised
    finally:
        engine.dispose()


@pytest.mark.mariadb
@pytest.mark.parametrize("db_url", [BACKENDS[2]], indirect=True)
def test_a_mariadb_greeting_that_never_comes_does_not_blame_postgresql(db_url, proxy):
    proxy.set_mode("blackhole")  # the partition: the TCP connect works, nothing answers
    engine = sqlq_orm.create_engine(proxy.url(db_url) + "?connect_timeout=1")
    try:
        raised = outcome_of(engine.connect, proxy)
    finally:
        engine.dispose()

    assert isinstance(raised, OperationalError), raised
    assert "did not answer in time" in str(raised)
    assert "PostgreSQL" not in str(raised)


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_success_whose_commit_landed_before_a_reset_is_not_said_to_be_unwritten(
    db_url, proxy, engine, caplog
):
    job_id = sqlq_orm.Queue(engine).enqueue("echo").id
    # The completer's success transaction names the status it writes: its COMMIT is
    # the one held, sent on, and its answer lost with the connection.
    proxy.set_mode("hold_commit", after=b"SUCCEEDED")
    worker_engine = engine_through(proxy, db_url, worker_lease_seconds=30)
    worker = sqlq_orm.Worker(
        sqlq_orm.Queue(worker_engine),
        {"echo": lambda ctx: None},
        lease_seconds=30,
        poll_interval=0.2,
        sweep_interval=None,
        install_signal_handlers=False,
        run_schedules=False,
    )
    caplog.set_level(logging.WARNING, logger="sqlq_orm")
    try:
        with running(worker):
            assert proxy.commit_seen.wait(HANG_GUARD), "the success COMMIT never came"
            proxy.release_and_reset()
            discarded = wait_until(
                lambda: [r for r in caplog.records if "outcome discarded" in r.getMessage()],
                "the worker to give up on the outcome it could not confirm",
            )
    finally:
        worker_engine.dispose()

    assert status_is(sqlq_orm.Queue(engine), job_id, "SUCCEEDED")()  # it was written
    message = discarded[0].getMessage()
    assert "nothing was written" not in message
    assert "unknown" in message


def _jobs_with_key(engine: Engine, key: str) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                select(func.count()).select_from(Job).where(Job.dedupe_key == key)
            ).scalar_one()
        )


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_after_a_reset_at_commit_a_retry_with_the_same_dedupe_key_makes_one_job(
    db_url, proxy, engine
):
    key = "netfault-retry-key"
    producer_engine = engine_through(proxy, db_url)
    producer = sqlq_orm.Queue(producer_engine)
    try:
        proxy.set_mode("hold_commit", after=key.encode())
        enqueue = lambda: producer.enqueue("report", {"n": 1}, dedupe_key=key)  # noqa: E731
        first: list[Any] = []
        thread = threading.Thread(target=lambda: first.append(outcome_of(enqueue, proxy)))
        thread.start()
        assert proxy.commit_seen.wait(HANG_GUARD), "the enqueue's COMMIT never came"
        proxy.release_and_reset()  # the COMMIT lands; its answer is lost
        thread.join(HANG_GUARD)
        assert isinstance(first[0], OperationalError), first  # the caller cannot tell

        retried = producer.enqueue("report", {"n": 1}, dedupe_key=key)  # the recipe
    finally:
        producer_engine.dispose()

    assert not retried.created  # the first one had landed: the retry found it
    assert _jobs_with_key(engine, key) == 1


@pytest.mark.mariadb
@pytest.mark.parametrize("db_url", [BACKENDS[2]], indirect=True)
def test_a_black_holed_commit_raises_and_the_retry_with_its_dedupe_key_is_safe(
    db_url, proxy, engine
):
    key = "netfault-black-commit"
    producer_engine = engine_through(proxy, f"{db_url}?read_timeout=2")
    producer = sqlq_orm.Queue(producer_engine)
    try:
        proxy.set_mode("hold_commit", after=key.encode())

        raised = outcome_of(lambda: producer.enqueue("report", dedupe_key=key), proxy)

        assert isinstance(raised, OperationalError), raised
        proxy.release()  # the late COMMIT reaches the server after the caller gave up
        retried = producer.enqueue("report", dedupe_key=key)
    finally:
        producer_engine.dispose()

    assert _jobs_with_key(engine, key) == 1
    assert retried.id is not None


ISSUE_RECIPE = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
"""The libpq settings that bounded a real partition in issue 37 (for a 30 s lease)."""


def _libpq_options(engine: Engine) -> dict[str, str]:
    with engine.connect() as connection:
        dsn = connection.connection.driver_connection.info.dsn  # type: ignore[union-attr]
    return dict(part.split("=", 1) for part in dsn.split())


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", [BACKENDS[1]], indirect=True)
def test_postgresql_connections_bound_their_waits_by_default_and_a_worker_fits_its_lease(db_url):
    app = sqlq_orm.create_engine(db_url)
    worker = sqlq_orm.create_engine(db_url, worker_lease_seconds=30)
    try:
        assert {k: _libpq_options(app)[k] for k in ISSUE_RECIPE} == {
            "connect_timeout": "10",
            "keepalives": "1",
            "keepalives_idle": "30",
            "keepalives_interval": "10",
            "keepalives_count": "3",
            "tcp_user_timeout": "60000",
        }
        assert {k: _libpq_options(worker)[k] for k in ISSUE_RECIPE} == ISSUE_RECIPE
    finally:
        app.dispose()
        worker.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", [BACKENDS[1]], indirect=True)
def test_what_the_caller_sets_in_the_url_or_connect_args_is_kept(db_url):
    engine = sqlq_orm.create_engine(
        f"{db_url}?tcp_user_timeout=1234",
        worker_lease_seconds=30,
        connect_args={"keepalives_idle": 42},
    )
    try:
        options = _libpq_options(engine)
    finally:
        engine.dispose()

    assert options["tcp_user_timeout"] == "1234"
    assert options["keepalives_idle"] == "42"
    assert options["keepalives_interval"] == "2"  # the rest still fits the lease


@pytest.mark.mariadb
@pytest.mark.parametrize("db_url", [BACKENDS[2]], indirect=True)
def test_a_mariadb_worker_engine_reads_and_writes_within_half_its_lease(db_url):
    app = sqlq_orm.create_engine(db_url)
    worker = sqlq_orm.create_engine(db_url, worker_lease_seconds=WORKER_LEASE)
    chosen = sqlq_orm.create_engine(f"{db_url}?read_timeout=7", worker_lease_seconds=WORKER_LEASE)
    try:
        timeouts = {}
        for name, engine in (("app", app), ("worker", worker), ("chosen", chosen)):
            with engine.connect() as connection:
                raw = connection.connection.driver_connection
                timeouts[name] = (raw._read_timeout, raw._write_timeout)  # type: ignore[union-attr]
    finally:
        for engine in (app, worker, chosen):
            engine.dispose()

    assert timeouts == {"app": (None, None), "worker": (3.0, 3.0), "chosen": (7, 3.0)}


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", [BACKENDS[1]], indirect=True)
def test_an_async_psycopg_engine_bounds_its_waits_as_the_sync_one(db_url, loop_thread):
    engine = sqlq_orm.create_async_engine(async_url(db_url, "async-psycopg"))

    async def options() -> dict[str, str]:
        async with engine.connect() as connection:
            raw = await connection.get_raw_connection()
            dsn = raw.driver_connection.info.dsn  # type: ignore[union-attr]
        await engine.dispose()
        return dict(part.split("=", 1) for part in dsn.split())

    assert loop_thread.run(options())["tcp_user_timeout"] == "60000"


@pytest.mark.mariadb
@pytest.mark.parametrize("db_url", [BACKENDS[2]], indirect=True)
def test_sqlq_worker_whose_database_goes_silent_says_so_instead_of_hanging(
    db_url, proxy, engine, tmp_path
):
    # `sqlq worker` fits its engine's waits in --lease: PyMySQL's read timeout ends the
    # claim that gets no answer (through the proxy a silent server and a lossy link look
    # the same to MariaDB's client; see the black-hole test for PostgreSQL's bound).
    processes = Processes(tmp_path, proxy.url(db_url))
    try:
        worker = processes.worker("silent-link", "--lease", "4", "--no-sweep")
        wait_until(lambda: "started" in processes.log(worker), "the worker to start")
        proxy.set_mode("blackhole")

        wait_until(
            lambda: "claim failed" in processes.log(worker),
            "the worker to report that its claim got no answer",
            timeout=HANG_GUARD,
        )
    finally:
        processes.kill_all()


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_claim_whose_commit_landed_before_a_reset_hands_its_leases_over(db_url, proxy, engine):
    # Phantom claims: the claim's COMMIT reaches the server, its answer is lost with the
    # connection. The claimer minted the tokens, so it finds its leases and runs them
    # instead of leaving them to expire (and be charged a retry they never used).
    queue = sqlq_orm.Queue(engine)
    job_ids = sorted(queue.enqueue("echo", {"n": n}).id for n in range(4))
    claimer_engine = engine_through(proxy, db_url, worker_lease_seconds=30)
    claimer = sqlq_orm.Queue(claimer_engine)
    try:
        claimer.check_schema()  # the first use's check, before the COMMIT is held
        proxy.set_mode("hold_commit", after=b"phantom-claimer")
        result: list[Any] = []
        claim = lambda: claimer.claim(  # noqa: E731
            "phantom-claimer", limit=4, start=True, start_at_most=2, lease_seconds=30
        )
        thread = threading.Thread(target=lambda: result.append(outcome_of(claim, proxy)))
        thread.start()
        assert proxy.commit_seen.wait(HANG_GUARD), "the claim's COMMIT never came"
        proxy.release_and_reset()  # the COMMIT lands; its answer is lost
        thread.join(HANG_GUARD)
        leases = result[0]
        assert isinstance(leases, list), leases

        assert [lease.job_id for lease in leases] == job_ids
        assert [lease.started for lease in leases] == [True, True, False, False]
        assert [lease.payload for lease in leases] == [{"n": n} for n in range(4)]
        assert claimer.start_many(leases[2:]) == []  # the prefetch starts as any other
        for lease in leases:
            claimer.succeed(lease)  # and each lease is the one the database holds
    finally:
        claimer_engine.dispose()

    assert all(status_is(queue, job_id, "SUCCEEDED")() for job_id in job_ids)


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", [BACKENDS[1]], indirect=True)
def test_a_black_holed_listen_connection_is_replaced_and_hears_again(db_url, proxy, caplog):
    # An idle LISTEN connection sends nothing, so a black hole under it went unnoticed:
    # wake-ups fell back to the poll. Its probe (after keepalives_idle, 1 s here, with
    # no notification) gets no answer within tcp_user_timeout (2 s), so it is replaced.
    listen_engine = engine_through(proxy, db_url, worker_lease_seconds=WORKER_LEASE)
    queue = sqlq_orm.Queue(listen_engine)
    woken = threading.Event()
    caplog.set_level(logging.INFO, logger="sqlq_orm")
    watch = queue.watch_for_jobs(["default"], woken)
    try:
        assert woken.wait(HANG_GUARD), "the listener never connected"
        proxy.set_mode("blackhole")
        wait_until(
            lambda: "wake-up listener failed" in caplog.text,
            "the listener to notice its link is dead",
            timeout=HANG_GUARD,
        )
        proxy.set_mode("pass")
        wait_until(
            lambda: "wake-up listener reconnected" in caplog.text,
            "the listener to be replaced",
            timeout=HANG_GUARD,
        )
        woken.clear()
        other = sqlalchemy.create_engine(db_url)  # another process's enqueue, as heard
        try:
            with other.begin() as connection:
                connection.execute(
                    queue.sql.notify_jobs,
                    {"p_channel": queue.sql.wake_channel, "p_queue": "default"},
                )
        finally:
            other.dispose()
        assert woken.wait(HANG_GUARD), "the new listener did not hear the notification"
    finally:
        watch.close()
        listen_engine.dispose()
    assert "did not answer a probe" in caplog.text
