"""Every example on the docs site runs: a broken one fails here (and so CI).

All pages run in one child process (one import of the package, not one per page; see
:mod:`tests.docs.examples` for how a page marks its blocks), each page in a directory
of its own with a fresh database in ``SQLQ_DATABASE_URL`` and a namespace of its own;
each page is then one test here, and a failure names the page and line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from tests.docs.examples import ROOT, blocks, page_database, pages, shell_script

RUNNER = r"""
import json, os, subprocess, sys, traceback
plan = json.load(open(sys.argv[1]))
results = {}
for page in plan:
    os.chdir(page["cwd"])
    os.environ["SQLQ_DATABASE_URL"] = page["url"]
    sys.path.insert(0, page["cwd"])
    namespace = {"__name__": "__docs__"}
    failure = None
    for block in page["blocks"]:
        where = f"{block['page']}:{block['line']}"
        if block["language"] == "python":
            code = compile("\n" * (block["line"] - 1) + block["code"], block["page"], "exec")
            try:
                exec(code, namespace)
            except BaseException:
                failure = f"{traceback.format_exc()}\nthe example at {where} failed"
        else:
            done = subprocess.run(
                ["bash", "-eu", "-c", block["code"]], capture_output=True, text=True
            )
            if done.returncode:
                failure = (
                    f"{done.stdout}\n{done.stderr}\n"
                    f"the shell example at {where} exited {done.returncode}"
                )
        if failure:
            break
    results[page["page"]] = failure
    sys.path.remove(page["cwd"])
    for name, module in list(sys.modules.items()):  # the page's own modules (jobs.py)
        if (getattr(module, "__file__", None) or "").startswith(page["cwd"]):
            del sys.modules[name]
json.dump(results, open(sys.argv[2], "w"))
"""

PAGES = [p for p in pages() if any(b.action in ("run", "file") for b in blocks(p))]
_NOT_RUN = "not run: "


def _postgres_database(session_url: str) -> str:
    """An empty database of its own on the session's PostgreSQL server for one page."""
    url = sqlalchemy.make_url(session_url)
    name = f"{url.database}_docs_{uuid.uuid4().hex[:6]}"
    admin = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def _drop_postgres_database(url_text: str) -> None:
    url = sqlalchemy.make_url(url_text)
    admin = sqlalchemy.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')
    admin.dispose()


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory) -> dict[str, str | None]:
    """Each page's outcome: None when its examples ran, else what failed."""
    root = tmp_path_factory.mktemp("docs-examples")
    postgres: str | None = None
    skipped: dict[str, str] = {}
    plan: list[dict[str, Any]] = []
    for index, page in enumerate(PAGES):
        name = str(page.relative_to(ROOT))
        work = root / f"page{index}"
        work.mkdir()
        if page_database(page) == "postgresql":
            try:
                postgres = postgres or request.getfixturevalue("postgres_url")
            except pytest.skip.Exception as exc:
                skipped[name] = f"{_NOT_RUN}{exc}"
                continue
            url = _postgres_database(postgres)
        else:
            url = f"sqlite:///{work / 'app.db'}"
        to_run = []
        for block in blocks(page):
            if block.action == "file":
                (work / block.argument).write_text(block.code)
            elif block.action == "run":
                code = block.code if block.language == "python" else shell_script(block.code)
                to_run.append({**block.__dict__, "code": code})
        plan.append({"page": name, "cwd": str(work), "url": url, "blocks": to_run})
    (root / "plan.json").write_text(json.dumps(plan))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, str(root / "plan.json"), str(root / "out.json")],
            cwd=root, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        for page in plan:
            if page["url"].startswith("postgresql"):
                _drop_postgres_database(page["url"])
    assert done.returncode == 0, f"the examples' runner failed:\n{done.stdout}\n{done.stderr}"
    return {**json.loads((root / "out.json").read_text()), **skipped}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_pages_examples_run(page: Path, outcomes: dict[str, str | None]):
    outcome = outcomes[str(page.relative_to(ROOT))]
    if outcome and outcome.startswith(_NOT_RUN):
        pytest.skip(outcome.removeprefix(_NOT_RUN))
    assert outcome is None, outcome


def test_every_page_is_found_and_no_block_is_marked_with_an_unknown_action():
    assert PAGES, "no docs page has a runnable example"
    for page in pages():
        for block in blocks(page):
            assert block.action in ("run", "skip", "file", "show"), (page, block.line, block.action)
            if block.action == "skip":
                assert block.argument, f"{page}:{block.line}: a skipped example says why"
