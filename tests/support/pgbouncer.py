"""A real PgBouncer in transaction pooling mode, in front of the test PostgreSQL server.

The ``pgbouncer`` flavour of the conformance suite (``tests/support/backends.py``)
runs the modules in :data:`PGBOUNCER_MODULES` through it, with the queue's engine made
by ``sqlq_orm.create_engine(url, transaction_pooling=True, listen_url=direct)``.

:func:`start_pgbouncer` writes a configuration into a temporary directory (every
database name routed to the test server, ``pool_mode = transaction``, trust
authentication for the test server's user) and starts Debian's ``pgbouncer`` on a free
port. Set ``SQLQ_TEST_PGBOUNCER_URL`` to use a PgBouncer already running instead (it
must route any database name to the server of ``SQLQ_TEST_POSTGRES_URL`` in
transaction mode). Without either the flavour skips with the reason;
``SQLQ_REQUIRE_PGBOUNCER=1`` (CI) turns that into a failure.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy

PGBOUNCER_MODULES = frozenset(
    {
        "test_service_lifecycle",
        "test_service_claim",
        "test_service_concurrency_keys",
        "test_wakeups",
        "test_worker_processes",
    }
)
"""The modules that also run through PgBouncer: the job's life (enqueue, claim,
heartbeat, finish, dependencies released), claims side by side, concurrency keys
(advisory locks), wake-ups across connections, and worker processes (the soak).
The rest of the suite exercises no other connection behaviour;
``SQLQ_PGBOUNCER_EVERYWHERE=1`` runs every module through PgBouncer too (slow)."""

STARTUP_SECONDS = 15.0


@dataclass
class Pooler:
    """A running PgBouncer (``process`` None: started by someone else)."""

    host: str
    port: int
    process: subprocess.Popen[bytes] | None = None
    directory: Path | None = None
    direct_urls: dict[str, str] = field(default_factory=dict)
    """Pooled URL -> the same database's direct URL, for the URLs handed out."""

    def pooled(self, direct_url: str) -> str:
        """``direct_url`` with PgBouncer's address: the same database, through it."""
        url = sqlalchemy.make_url(direct_url).set(host=self.host, port=self.port)
        pooled = url.render_as_string(hide_password=False)
        self.direct_urls[pooled] = direct_url
        return pooled

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)


CURRENT: Pooler | None = None
"""This test session's PgBouncer, once started (see ``pgbouncer`` in tests/conftest.py)."""


def engine_options(db_url: str) -> dict[str, Any]:
    """What ``sqlq_orm.create_engine`` (or ``create_async_engine``) needs for
    ``db_url``: for a URL through the session's PgBouncer (any driver), transaction
    pooling with a direct ``listen_url`` on the same database."""
    if CURRENT is None:
        return {}
    url = sqlalchemy.make_url(db_url)
    for pooled, direct in CURRENT.direct_urls.items():
        known = sqlalchemy.make_url(pooled)
        if (url.host, url.port, url.database) == (known.host, known.port, known.database):
            return {"transaction_pooling": True, "listen_url": direct}
    return {}


def worker_environment(db_url: str) -> dict[str, str]:
    """The variables that tell ``sqlq`` the same (see ``sqlq_orm/cli/connect.py``)."""
    options = engine_options(db_url)
    if not options:
        return {}
    return {"SQLQ_TRANSACTION_POOLING": "1", "SQLQ_LISTEN_URL": options["listen_url"]}


def find_pgbouncer() -> str | None:
    """The ``pgbouncer`` executable (Debian installs it in /usr/sbin)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepts(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def start_pgbouncer(executable: str, server_url: sqlalchemy.URL, directory: Path) -> Pooler:
    """Start ``executable`` on a free port of 127.0.0.1 in front of ``server_url``'s
    server, in transaction pooling mode; its log goes to ``directory/pgbouncer.log``."""
    user = server_url.username or "postgres"
    port = _free_port()
    config = directory / "pgbouncer.ini"
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    config.write_text(
        "[databases]\n"
        f"* = host={server_url.host or '127.0.0.1'} port={server_url.port or 5432} "
        f"user={user}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "pool_mode = transaction\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'users.txt'}\n"
        "max_client_conn = 1000\n"
        "default_pool_size = 40\n"
        # Nothing may be reset between clients in transaction mode: no query at all.
        "server_reset_query =\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    command = [executable, str(config)]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; it can switch to another user itself.
        runner = "postgres" if _user_exists("postgres") else "nobody"
        command[1:1] = ["-u", runner]
        directory.chmod(0o755)
        for path in directory.iterdir():
            path.chmod(0o644)
    log = open(directory / "pgbouncer.log", "ab")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + STARTUP_SECONDS
    while not _accepts("127.0.0.1", port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            output = (directory / "pgbouncer.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pgbouncer did not start on port {port}: {output}")
        time.sleep(0.05)
    return Pooler("127.0.0.1", port, process, directory)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
