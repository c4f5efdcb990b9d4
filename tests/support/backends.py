"""The backends the conformance suite runs on: every database sqlq_orm supports.

Each entry is a pytest param for the ``db_url`` fixture (tests/conftest.py), so every
test that takes ``db_url``, ``engine`` or ``queue`` runs once per backend. A new backend
(MariaDB, an asyncio flavour) joins the suite by adding an entry here and a branch in
``db_url`` that makes an empty database for it; server backends carry a mark and skip,
with the reason, when their server is not reachable (unless CI requires them).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import Engine

import sqlq_orm
from tests.support.pgbouncer import engine_options

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]

PGBOUNCER = pytest.param("pgbouncer", id="pgbouncer", marks=pytest.mark.pgbouncer)
"""PostgreSQL through a real PgBouncer in transaction pooling mode: a flavour only the
modules in ``tests.support.pgbouncer.PGBOUNCER_MODULES`` run (``tests/conftest.py``)."""


def engine_for(db_url: str, **kwargs: Any) -> Engine:
    """Another engine on the test's database, made as the ``engine`` fixture makes its
    own (through PgBouncer: with transaction pooling and a direct listen URL)."""
    return sqlq_orm.create_engine(db_url, **engine_options(db_url), **kwargs)
