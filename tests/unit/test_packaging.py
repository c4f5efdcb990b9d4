"""Packaging metadata: what pip reads when a user installs sqlq_orm."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_the_license_is_an_spdx_expression_not_a_deprecated_table():
    # setuptools warns on every install about `license = {text = ...}` (PEP 639).
    assert PYPROJECT["project"]["license"] == "MIT"


def test_the_build_backend_understands_spdx_license_strings():
    requires = PYPROJECT["build-system"]["requires"]
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in requires), requires


def test_the_type_marker_ships_with_the_package():
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["sqlq_orm"]
