"""What every renderer shares: escaping, colours, times, durations, aligned tables, JSON.

Colour is ANSI and only when asked (the CLI asks when stdout is a TTY and ``NO_COLOR``
is unset); :func:`table` measures widths on the visible text, so coloured cells align.

Text from the database (types, queues, worker ids, dedupe keys, error details, app
columns, schedule names, ...) is anyone's input: every text renderer passes it through
:func:`printable` before it reaches a terminal, so an escape sequence or a newline in a
job type cannot clear the screen or forge a line. :func:`table` and :class:`Paint` do
it for their cells; renderers call it for what they interpolate themselves. JSON
output needs none of this (``json.dumps`` escapes control characters itself).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlq_orm.ops.stats.views import WorkerState
from sqlq_orm.schema.states import JobStatus

STATUS_ORDER = [s.value for s in JobStatus]

_RESET = "\033[0m"
_COLOURS = {
    "red": "\033[31m",
    "green": "\033[32m",
    "yellow": "\033[33m",
    "blue": "\033[34m",
    "dim": "\033[2m",
    "bold": "\033[1m",
}
_STATUS_COLOUR = {
    "WAITING": "dim",
    "QUEUED": "blue",
    "CLAIMED": "yellow",
    "RUNNING": "yellow",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "dim",
    "alive": "green",
    "silent": "red",
    "unregistered": "red",
}
_ANSI = re.compile(r"\033\[[0-9;]*m")

_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f"  # C0 and C1 controls: ESC, CSI, newline, carriage return, ...
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi controls: reorder the line
    "\u2028\u2029]"  # line and paragraph separators
)
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


class Styled(str):
    """Text this layer made terminal-ready itself (escaped, then wrapped in its own ANSI
    colour): :func:`printable` passes it through unchanged."""

    __slots__ = ()


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> str:
    """``value`` as text safe to print on a terminal: control characters (escape
    sequences, newlines, carriage returns, tabs), bidi overrides and line separators
    become visible backslash escapes (``\\x1b``, ``\\n``, ``\\u202e``).

    Backslashes are left alone, so escaping twice changes nothing, and ordinary text
    (any script, any emoji) comes back as it was. :class:`Styled` text passes through.
    """
    if isinstance(value, Styled):
        return value
    text = value if isinstance(value, str) else str(value)
    if _UNPRINTABLE.search(text) is None:
        return text
    return _UNPRINTABLE.sub(_escape, text)


class Paint:
    """Wraps text in ANSI colours, or leaves it alone when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, colour: str | None) -> str:
        safe = printable(text)
        if not self.enabled or colour is None or not text:
            return safe
        return Styled(f"{_COLOURS[colour]}{safe}{_RESET}")

    def status(self, text: str) -> str:
        return self(text, _STATUS_COLOUR.get(text))


def utc(ts: int | None) -> str:
    """Epoch seconds as ``2024-01-02 03:04:05Z``; ``-`` for None."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def human_seconds(seconds: int | float | None) -> str:
    """A duration as ``45s``, ``3m20s``, ``2h05m`` or ``3d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds}s"
    for unit, size, small, small_size in (
        ("m", 60, "s", 1),
        ("h", 3600, "m", 60),
        ("d", 86_400, "h", 3600),
    ):
        if unit == "d" or seconds < size * (60 if unit == "m" else 24):
            whole, rest = divmod(seconds, size)
            rest //= small_size
            return f"{sign}{whole}{unit}{rest:02d}{small}" if rest else f"{sign}{whole}{unit}"
    raise AssertionError("unreachable")


def percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.0f}%"


def _visible_len(text: str) -> int:
    return len(_ANSI.sub("", text))


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    right: Sequence[int] = (),
    indent: str = "  ",
) -> str:
    """Aligned columns; ``right`` lists the columns (numbers) aligned right.

    Every cell goes through :func:`printable`; cells :class:`Paint` coloured keep their
    colour, and widths are measured on the visible text.
    """
    cells = [[printable(h) for h in headers]]
    cells += [["-" if c is None else printable(c) for c in row] for row in rows]
    widths = [max(_visible_len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = []
        for i, cell in enumerate(row):
            gap = " " * (widths[i] - _visible_len(cell))
            padded.append(gap + cell if i in right else cell + gap)
        lines.append((indent + "  ".join(padded)).rstrip())
    return "\n".join(lines)


def _json_default(value: Any) -> Any:
    if isinstance(value, WorkerState):
        return value.value
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def to_json(data: Any) -> str:
    """Indented JSON text."""
    return json.dumps(data, indent=2, sort_keys=False, default=_json_default)
