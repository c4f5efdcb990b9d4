"""Every example on the docs site runs: a broken one fails here (and so CI).

The blocks of one page run in a child process of their own (see
:mod:`tests.docs.examples` for how a page marks a block), in a fresh directory, with the
page's database in ``SQLQ_DATABASE_URL``; a failure names the page and line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import ROOT, blocks, page_database, pages, shell_script

RUNNER = r"""
import json, os, subprocess, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__docs__"}
sys.path.insert(0, os.getcwd())
for block in blocks:
    where = f"{block['page']}:{block['line']}"
    if block["language"] == "python":
        code = compile("\n" * (block["line"] - 1) + block["code"], block["page"], "exec")
        try:
            exec(code, namespace)
        except BaseException:
            traceback.print_exc()
            sys.exit(f"the example at {where} failed")
    else:
        done = subprocess.run(["bash", "-eu", "-c", block["code"]])
        if done.returncode:
            sys.exit(f"the shell example at {where} exited {done.returncode}")
"""

PAGES = [p for p in pages() if any(b.action in ("run", "file") for b in blocks(p))]


def _database_url(request: pytest.FixtureRequest, page: Path, tmp_path: Path) -> str:
    if page_database(page) == "postgresql":
        request.applymarker(pytest.mark.postgres)
        url: str = request.getfixturevalue("postgres_url")
        return _fresh_postgres_database(url)
    return f"sqlite:///{tmp_path / 'app.db'}"


def _fresh_postgres_database(session_url: str) -> str:
    """An empty database of its own on the session's PostgreSQL server for one page."""
    import uuid

    import sqlalchemy

    url = sqlalchemy.make_url(session_url)
    name = f"{url.database}_docs_{uuid.uuid4().hex[:6]}"
    admin = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def _drop_postgres_database(url_text: str) -> None:
    import sqlalchemy

    url = sqlalchemy.make_url(url_text)
    admin = sqlalchemy.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')
    admin.dispose()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_pages_examples_run(page: Path, tmp_path: Path, request: pytest.FixtureRequest):
    url = _database_url(request, page, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    to_run = []
    for block in blocks(page):
        if block.action == "file":
            (work / block.argument).write_text(block.code)
        elif block.action == "run":
            code = block.code if block.language == "python" else shell_script(block.code)
            to_run.append({**block.__dict__, "code": code})
    (tmp_path / "blocks.json").write_text(json.dumps(to_run))
    env = {
        **os.environ,
        "SQLQ_DATABASE_URL": url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(work), str(ROOT)]),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, str(tmp_path / "blocks.json")],
            cwd=work, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        if url.startswith("postgresql"):
            _drop_postgres_database(url)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def test_every_page_is_found_and_no_block_is_marked_with_an_unknown_action():
    assert PAGES, "no docs page has a runnable example"
    for page in pages():
        for block in blocks(page):
            assert block.action in ("run", "skip", "file", "show"), (page, block.line, block.action)
            if block.action == "skip":
                assert block.argument, f"{page}:{block.line}: a skipped example says why"
