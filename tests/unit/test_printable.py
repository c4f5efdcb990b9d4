"""``printable``: the one escaping function every text renderer uses (issue 23, item 11)."""

from __future__ import annotations

import pytest

from sqlq_orm.ops.render.text import Paint, printable, table


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text, ünïcødé ✓ 日本語 🚀", "plain text, ünïcødé ✓ 日本語 🚀"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x00\x07\x7f", "\\x00\\x07\\x7f"),
        ("\x9b31m", "\\x9b31m"),  # C1 CSI: an escape sequence on its own on some terminals
        ("\u202eevil\u2066", "\\u202eevil\\u2066"),  # bidi overrides reorder the line
        ("one\u2028two\u2029", "one\\u2028two\\u2029"),
        ("C:\\path\\x1b", "C:\\path\\x1b"),  # backslashes stay: escaping twice is harmless
        (42, "42"),
    ],
)
def test_printable_escapes_what_would_steer_a_terminal_and_nothing_else(raw, shown):
    assert printable(raw) == shown
    assert printable(printable(raw)) == shown


def test_table_escapes_cells_but_keeps_its_own_colours():
    paint = Paint(True)

    rendered = table(["A", "B"], [[paint("RED\x1b[0m", "red"), "x\ny"]])

    assert "\x1b[31mRED\\x1b[0m\x1b[0m" in rendered
    assert "x\\ny" in rendered and rendered.count("\n") == 1
