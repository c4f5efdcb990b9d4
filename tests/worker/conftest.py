"""Fixtures for the worker tests: a queue on the real clock, and worker processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sqlq_orm
from tests.support.worker_helpers import Processes


@pytest.fixture
def live_queue(engine) -> sqlq_orm.Queue:
    """A queue on the database's own clock, like worker processes use (scheduled jobs
    fall due in real time)."""
    return sqlq_orm.Queue(engine)


@pytest.fixture
def processes(tmp_path, db_url) -> Iterator[Processes]:
    """Starts ``sqlq worker`` processes on the test's database; kills them afterwards."""
    started = Processes(tmp_path, db_url)
    try:
        yield started
    finally:
        started.kill_all()
