"""The backends the conformance suite runs on: every database sqlq_orm supports.

Each entry is a pytest param for the ``db_url`` fixture (tests/conftest.py), so every
test that takes ``db_url``, ``engine`` or ``queue`` runs once per backend. A new backend
(MariaDB, an asyncio flavour) joins the suite by adding an entry here and a branch in
``db_url`` that makes an empty database for it; server backends carry a mark and skip,
with the reason, when their server is not reachable (unless CI requires them).
"""

from __future__ import annotations

import pytest

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]
