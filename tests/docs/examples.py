"""The code blocks of the docs pages, and how the docs test runs them.

A page's blocks run in order, in one namespace per page, in a fresh directory, so a
later block sees the names an earlier one made (a tutorial builds up as the reader does).
An HTML comment on the line before a block (hidden on the page) changes what is done
with it:

``<!-- docs-test: skip REASON -->``
    not run (a template for another program's file, or a sketch); say why.
``<!-- docs-test: file NAME -->``
    written to ``NAME`` in the page's directory (a module a later block imports or a
    ``sqlq worker --handlers`` names), not run.
``<!-- docs-test: run -->``
    a shell block that runs (shell blocks are only shown unless marked: most start
    servers or name your app's modules).

A page that holds ``<!-- docs-test: page postgresql -->`` runs on a throw-away
PostgreSQL database; every other page on a SQLite file. Either way the database's URL is
in ``SQLQ_DATABASE_URL``, which the examples read, as ``sqlq`` does; a shell block's own
``export SQLQ_DATABASE_URL=...`` line is left out.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(`{3,})\s*([\w{}-]*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
PYTHON = {"python", "py", "python3"}
SHELL = {"sh", "bash", "shell", "console"}


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int  # the first line of code, 1-based
    language: str  # "python" or "shell"
    code: str
    action: str  # "run", "skip", "file"
    argument: str = ""


def pages() -> list[Path]:
    """Every page of the site (Markdown under docs/, the build output left out), and the
    README, whose example is the first a reader runs."""
    site = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    return [ROOT / "README.md", *site]


def page_database(path: Path) -> str:
    text = path.read_text()
    return "postgresql" if "<!-- docs-test: page postgresql -->" in text else "sqlite"


def blocks(path: Path) -> list[Block]:
    """The page's python and shell blocks, each with what to do with it."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    directive: tuple[str, str] | None = None
    while index < len(lines):
        line = lines[index]
        marker = _DIRECTIVE.match(line.strip())
        if marker and marker.group(1) != "page":
            directive = (marker.group(1), marker.group(2))
            index += 1
            continue
        fence = _FENCE.match(line.strip())
        if fence and fence.group(2):
            ticks, language = fence.groups()
            end = index + 1
            while end < len(lines) and lines[end].strip() != ticks:
                end += 1
            code = "\n".join(lines[index + 1 : end]) + "\n"
            kind = "python" if language in PYTHON else "shell" if language in SHELL else None
            if kind is not None:
                action, argument = directive or ("run" if kind == "python" else "show", "")
                page = str(path.relative_to(ROOT))
                found.append(Block(page, index + 2, kind, code, action, argument))
            directive = None
            index = end + 1
            continue
        if line.strip():
            directive = None
        index += 1
    return found


def shell_script(code: str) -> str:
    """A shell block as a script: prompts dropped, the database URL left to the test."""
    kept = []
    for line in code.splitlines():
        line = line[2:] if line.startswith("$ ") else line
        if line.startswith("export SQLQ_DATABASE_URL="):
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"
