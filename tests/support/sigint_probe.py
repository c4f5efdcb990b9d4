"""Run only by tests/acceptance/test_tasks_interrupt.py, through ``tasks.py test``: takes
this session's throw-away PostgreSQL and MariaDB databases, says which, then waits to
be interrupted."""

from __future__ import annotations

import os
import time
from pathlib import Path

import sqlalchemy


def test_waits_holding_the_throwaway_databases(postgres_url, mariadb_url):
    names = [sqlalchemy.make_url(url).database for url in (postgres_url, mariadb_url)]
    Path(os.environ["SQLQ_SIGINT_PROBE"]).write_text(" ".join(names))
    time.sleep(600)  # until the SIGINT
