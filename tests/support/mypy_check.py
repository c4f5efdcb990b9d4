"""Run ``mypy --strict`` on a user's module and compare what it flags with what should be.

The typing tests write a small user module whose wrong lines end in ``# MISTAKE``; the
test passes when mypy flags exactly those lines, no more (a false alarm on correct code)
and no fewer (a mistake the types let through).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api


def flagged_and_expected(
    tmp_path: Path, filename: str, source_text: str
) -> tuple[set[int], set[int], str]:
    """Write ``source_text`` to ``tmp_path/filename``, run mypy on it, and return
    (lines mypy flagged, lines marked ``# MISTAKE``, mypy's output for the message)."""
    source = tmp_path / filename
    source.write_text(textwrap.dedent(source_text))
    expected = {
        number
        for number, line in enumerate(source.read_text().splitlines(), start=1)
        if "# MISTAKE" in line
    }
    stdout, stderr, _ = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--show-error-codes", "--no-error-summary", str(source)]
    )  # fmt: skip
    errors = [line for line in stdout.splitlines() if ": error: " in line]
    flagged = {int(line.split(":")[1]) for line in errors}
    return flagged, expected, stdout + stderr
