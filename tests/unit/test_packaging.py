"""Packaging metadata: what pip reads when a user installs sqlq_orm."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_license_is_an_spdx_expression_not_a_deprecated_table():
    # setuptools warns on every install about `license = {text = ...}` (PEP 639).
    assert PYPROJECT["project"]["license"] == "MIT"


def test_the_build_backend_understands_spdx_license_strings():
    requires = PYPROJECT["build-system"]["requires"]
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in requires), requires


def test_the_type_marker_ships_with_the_package():
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["sqlq_orm"]


def test_the_license_file_ships_and_says_mit():
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_project_names_its_urls():
    assert {"Homepage", "Source", "Issues", "Documentation"} <= set(PYPROJECT["project"]["urls"])


def test_the_sdist_carries_what_the_readme_links_to_and_the_docs_sources(tmp_path):
    # Built from a copy, with the backend the project declares: nothing lands in the repo.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "*.egg-info", "__pycache__", ".*_cache", "test-artifacts", "*.db*"
        ),
    )
    # A docs build left in the tree must not ship.
    (source / "docs" / "_build" / "html").mkdir(parents=True, exist_ok=True)
    (source / "docs" / "_build" / "html" / "index.html").write_text("<html></html>")
    out = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable, "-c",
            "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))", str(out),
        ],
        cwd=source, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}

    assert {"LICENSE", "README.md", "docs/index.md", "docs/conf.py"} <= names
    assert {"docs/explanation/architecture.md", "docs/explanation/guarantees.md"} <= names
    assert {"docs/reference/cli.md", "docs/_ext/sqlq_cli.py", "docs/_static/dashboard.png"} <= names
    assert {"docs/_inventories/sqlalchemy.inv", "docs/tutorial/first-15-minutes.md"} <= names
    assert not [name for name in names if name.startswith("docs/_build")]
    assert {"examples/hostapp/models.py", "examples/fastapi_app/app.py"} <= names
    assert "sqlq_orm/migrations/versions/0001_initial.py" in names
    assert not [name for name in names if name.endswith((".pyc", ".db"))]
