"""``python3 tasks.py test`` and Ctrl-C (issue 22, item 9): the interrupt reaches pytest,
which stops, drops its throw-away databases and prints its summary; nothing is killed.

The test runs the real ``tasks.py test`` (it reuses this checkout's ``.venv``) on a probe
test that holds this session's throw-away PostgreSQL and MariaDB databases, sends SIGINT
to ``tasks.py`` as a Ctrl-C would, and checks that both databases are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy

from tests.support.worker_helpers import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.mariadb]

START_LIMIT_SECONDS = 300.0
"""How long ``tasks.py`` may take to install and reach the probe (pip runs first)."""


def _databases(url: str, query: str) -> set[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return {row[0] for row in connection.exec_driver_sql(query)}
    finally:
        engine.dispose()


def test_ctrl_c_lets_pytest_drop_its_databases_and_print_its_summary(
    postgres_url, mariadb_url, tmp_path
):
    probe = tmp_path / "databases"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(SQLQ_SIGINT_PROBE=str(probe), SQLQ_VENV=str(ROOT / ".venv"))
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("needs the checkout's .venv (made by tasks.py)")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tasks.py"), "test", "tests/support/sigint_probe.py",
         "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_LIMIT_SECONDS
        while not probe.exists() or not probe.read_text():
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "tasks.py test never reached the probe"
            time.sleep(0.2)
        postgres_db, mariadb_db = probe.read_text().split()
        pg_admin = sqlalchemy.make_url(postgres_url).set(database="postgres")
        maria_admin = sqlalchemy.make_url(mariadb_url).set(database=None)
        assert postgres_db in _databases(pg_admin, "SELECT datname FROM pg_database")
        assert mariadb_db in _databases(maria_admin, "SHOW DATABASES")

        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()

    assert process.returncode == 2, output  # pytest's "interrupted"
    assert "KeyboardInterrupt" in output and "no tests ran" in output or "1 error" in output
    assert "Traceback" not in output.split("KeyboardInterrupt")[0], output
    assert postgres_db not in _databases(pg_admin, "SELECT datname FROM pg_database")
    assert mariadb_db not in _databases(maria_admin, "SHOW DATABASES")
