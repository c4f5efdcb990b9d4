"""Bar charts as inline SVG, drawn on the server: no chart library, no JavaScript.

:func:`stacked_bars` turns a few series of counts (one value per bucket) into an
``<svg>`` element that scales to its container; each bar carries a ``<title>`` so a
pointer (or a long press) shows its numbers. Pure: text in, text out.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH = 600
HEIGHT = 170
MARGIN_LEFT = 40
MARGIN_BOTTOM = 20
MARGIN_TOP = 8


@dataclass(frozen=True)
class Series:
    """One stacked layer: a name for the legend and tooltips, a CSS class for colour."""

    name: str
    css_class: str
    values: list[int]


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``value`` (min 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def stacked_bars(labels: list[str], series: list[Series], *, title: str) -> Markup:
    """An SVG bar chart: one bar per label, the series stacked bottom-up in order.

    ``labels`` name the buckets (shown under the first, middle and last bar and in the
    tooltips); every series has one value per label.
    """
    count = len(labels)
    if any(len(s.values) != count for s in series):
        raise ValueError(f"every series needs {count} values, one per label")
    totals = [sum(s.values[i] for s in series) for i in range(count)]
    top = nice_ceiling(max(totals, default=0))
    plot_w = WIDTH - MARGIN_LEFT
    plot_h = HEIGHT - MARGIN_BOTTOM - MARGIN_TOP
    slot = plot_w / max(count, 1)
    bar_w = max(slot * 0.8, 1.0)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        # The axis: the scale's top and zero, and a baseline.
        f'<text class="axis" x="{MARGIN_LEFT - 4}" y="{MARGIN_TOP + 10}" '
        f'text-anchor="end">{top}</text>',
        f'<text class="axis" x="{MARGIN_LEFT - 4}" y="{MARGIN_TOP + plot_h}" '
        f'text-anchor="end">0</text>',
        f'<line class="baseline" x1="{MARGIN_LEFT}" y1="{MARGIN_TOP + plot_h}" '
        f'x2="{WIDTH}" y2="{MARGIN_TOP + plot_h}"/>',
    ]
    for i, label in enumerate(labels):
        x = MARGIN_LEFT + i * slot + (slot - bar_w) / 2
        base = float(MARGIN_TOP + plot_h)
        numbers = ", ".join(f"{s.values[i]} {s.name}" for s in series)
        parts.append(f"<g><title>{escape(label)}: {escape(numbers)}</title>")
        # An invisible full-height rectangle so the tooltip works on empty buckets too.
        parts.append(
            f'<rect class="hit" x="{x:.1f}" y="{MARGIN_TOP}" width="{bar_w:.1f}" '
            f'height="{plot_h}"/>'
        )
        for s in series:
            h = plot_h * s.values[i] / top
            if h <= 0:
                continue
            base -= h
            parts.append(
                f'<rect class="{escape(s.css_class)}" x="{x:.1f}" y="{base:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}"/>'
            )
        parts.append("</g>")
    # Bucket labels under the first, middle and last bar, kept inside the frame.
    for i in sorted({0, count // 2, count - 1} if count else set()):
        x = MARGIN_LEFT + i * slot + slot / 2
        anchor = "start" if i == 0 else "end" if i == count - 1 else "middle"
        x = MARGIN_LEFT if anchor == "start" else WIDTH if anchor == "end" else x
        parts.append(
            f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 4}" '
            f'text-anchor="{anchor}">{escape(labels[i])}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
