"""What ``sqlq schedules`` prints: each schedule with its last and next run.

Rows come from the schedules table; with ``--handlers`` the schedules the code
declares are merged in, so one a worker has not registered yet shows too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from sqlq_orm.core.cron import time_zone
from sqlq_orm.core.schedule import Schedule
from sqlq_orm.errors import InvalidInput
from sqlq_orm.ops.render.text import printable
from sqlq_orm.queue.types import ScheduleState


@dataclass(frozen=True)
class ScheduleLine:
    """One line of the listing."""

    name: str
    cron: str
    timezone: str
    type: str
    queue: str
    last_run: int | None
    next_run: int | None
    note: str


def schedule_lines(
    rows: Sequence[ScheduleState], declared: Sequence[Schedule] | None, now: int
) -> list[ScheduleLine]:
    """The table's rows, merged with the code's declarations when given, by name."""
    by_name = {row.name: row for row in rows}
    lines: dict[str, ScheduleLine] = {}
    for row in rows:
        note = "" if declared is None else "orphaned: no longer declared in code (--remove it)"
        if row.paused_at is not None:
            note = "paused" + (f"; {note}" if note else "")
        lines[row.name] = ScheduleLine(
            row.name, row.cron, row.timezone, row.type, row.queue,
            row.last_slot_at, row.next_slot_at, note,
        )  # fmt: skip
    for schedule in declared or ():
        stored = by_name.get(schedule.name)
        changed = stored is not None and (
            stored.cron != schedule.cron.expression or stored.timezone != schedule.timezone
        )
        if stored is None or changed:
            lines[schedule.name] = ScheduleLine(
                schedule.name, schedule.cron.expression, schedule.timezone, schedule.type,
                schedule.queue, None if stored is None else stored.last_slot_at,
                schedule.cron.next_after(now),
                "not registered yet" if stored is None else "changed in code; a worker applies it",
            )  # fmt: skip
        else:
            paused = stored is not None and stored.paused_at is not None
            lines[schedule.name] = ScheduleLine(
                **{**lines[schedule.name].__dict__, "note": "paused" if paused else ""}
            )
    return [lines[name] for name in sorted(lines)]


def _local(epoch: int | None, zone_name: str) -> str:
    if epoch is None:
        return "never"
    try:
        zone: ZoneInfo | None = time_zone(zone_name)
    except InvalidInput:
        zone = None
    moment = datetime.fromtimestamp(epoch, UTC)
    if zone is not None:
        moment = moment.astimezone(zone)
    return moment.strftime("%Y-%m-%d %H:%M %Z")


def render_text(lines: Sequence[ScheduleLine], now: int) -> str:
    """A fixed-width table; times in each schedule's own time zone. Every cell is
    escaped for the terminal (:func:`~sqlq_orm.ops.render.text.printable`)."""
    if not lines:
        return "no schedules (declare them with registry.periodic(...) and run a worker)"
    header = ("NAME", "CRON", "TIMEZONE", "TYPE", "QUEUE", "LAST RUN", "NEXT RUN", "")
    table = [header] + [
        (
            line.name, line.cron, line.timezone, line.type, line.queue,
            _local(line.last_run, line.timezone),
            _local(line.next_run, line.timezone)
            + (" (due)" if line.next_run is not None and line.next_run <= now else ""),
            line.note,
        )
        for line in lines
    ]  # fmt: skip
    cells = [[printable(cell) for cell in row] for row in table]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def render_json(lines: Sequence[ScheduleLine]) -> str:
    """The listing as JSON (epoch seconds, UTC)."""
    return json.dumps({"schedules": [line.__dict__ for line in lines]}, indent=2)
