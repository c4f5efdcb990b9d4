"""The docs' structure: pages the code names exist, the API reference covers the public
surface, and the command reference is generated, not restated."""

from __future__ import annotations

import re

import sqlq_orm
from sqlq_orm.core import docs
from tests.docs.examples import DOCS, ROOT


def test_every_page_the_cli_and_the_dashboard_name_exists():
    for url in docs.PAGES:
        assert url.startswith(docs.DOCS_URL), url
        assert (DOCS / url.removeprefix(docs.DOCS_URL)).is_file(), url


def test_the_api_reference_documents_every_public_name():
    page = (DOCS / "reference" / "api.md").read_text()
    documented = set(re.findall(r"^\.\. auto(?:class|function):: sqlq_orm\.(\w+)$", page, re.M))
    modules = {"migrate", "invariants"}  # documented as modules further down the page
    assert set(sqlq_orm.__all__) - modules <= documented
    assert ".. automodule:: sqlq_orm.migrate\n" in page
    assert ".. automodule:: sqlq_orm.ops.invariants\n" in page


def test_the_command_reference_is_generated_from_the_parser():
    page = (DOCS / "reference" / "cli.md").read_text()
    assert "```{sqlq-cli}" in page
    assert "--concurrency" not in page  # options come from the parser, never restated


def test_the_home_page_globs_each_section_of_the_site():
    home = (DOCS / "index.md").read_text()
    for section in ("tutorial", "howto", "reference", "explanation"):
        assert f"\n{section}/*\n" in home, section
        assert list((DOCS / section).glob("*.md")), section


def test_the_readme_is_a_landing_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "python3 tasks.py demo" in readme and "python3 tasks.py test" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_the_dashboard_links_error_codes_and_refusals_to_their_pages(tmp_path):
    from starlette.testclient import TestClient

    from sqlq_orm.dashboard import create_app

    engine = sqlq_orm.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    sqlq_orm.migrate.upgrade(engine)
    queue = sqlq_orm.Queue(engine)
    queue.enqueue("x", max_retries=0)
    (lease,) = queue.claim("w", limit=1, start=True)
    queue.fail(lease, "UPSTREAM:REFUSED", "no")
    let_in = TestClient(create_app(queue, authorize=lambda request: True), "http://localhost")
    keep_out = TestClient(create_app(queue, authorize=lambda request: False), "http://localhost")

    assert docs.ERROR_CODES_PAGE in let_in.get("/jobs/1").text
    assert docs.ERROR_CODES_PAGE in let_in.get("/").text
    refused = keep_out.get("/")
    assert refused.status_code == 403 and docs.DASHBOARD_AUTH_PAGE in refused.text
    engine.dispose()
