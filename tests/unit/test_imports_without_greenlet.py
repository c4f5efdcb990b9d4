"""The synchronous package works without greenlet, as a plain install leaves it.

SQLAlchemy 2.1 no longer installs greenlet by itself, and its asyncio extension cannot
be imported without it; only the asyncio extras (``sqlq_orm[asyncpg]``, ...) bring it.
A fresh Python makes greenlet unimportable, then imports and uses the package."""

from __future__ import annotations

import subprocess
import sys

from tests.support.worker_helpers import subprocess_env

WITHOUT_GREENLET = """
import sys
sys.modules["greenlet"] = None  # import greenlet now raises ImportError
import sqlq_orm, sqlq_orm.cli, sqlq_orm.worker, sqlq_orm.scheduler
engine = sqlq_orm.create_engine("sqlite:///" + sys.argv[1])
sqlq_orm.migrate.upgrade(engine)
queue = sqlq_orm.Queue(engine)
queue.enqueue("t")
(lease,) = queue.claim("w", start=True)
queue.succeed(lease)
try:
    sqlq_orm.AsyncQueue
except ImportError as exc:
    print("AsyncQueue:", "greenlet" in str(exc))
"""


def test_the_synchronous_package_imports_and_runs_without_greenlet(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_GREENLET, str(tmp_path / "q.db")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "AsyncQueue: True"
