"""The invariant that a job's timeline, in event-id order, tells its runs in order.

A job's written events are ordered by id (each is written under the job's row lock,
so ids follow commit order even when a clock stepped backward), and the attempt rows
that stand for CLAIMED, STARTED and SUCCEEDED say after which event id they go
(``after_event_id``: :mod:`sqlq_orm.ops.stand_ins`). ``sqlq show``, the dashboard and
the replay all show that order, whatever the times say. What the data can show of a
timeline whose order contradicts the event ids:

- an attempt row placed after another job's event (its ``after_event_id`` names an
  event of a different job): its events would be shown at a place that says nothing
  about this job;
- a run's events out of the runs' order: every event that names its attempt (CLAIMED,
  STARTED, SUCCEEDED, FAILED, RETRY_SCHEDULED, SNOOZED, ...) names one at least as high
  as every event before it, as attempts are numbered in the order they ran.

Times are not compared: a clock stepped backward legitimately writes a later event
with an earlier time. Used by :func:`sqlq_orm.ops.invariants.check`; returns
``(invariant, job_id, detail)`` triples.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

from sqlq_orm.ops.stand_ins import in_order
from sqlq_orm.schema.states import AttemptStatus, Event

INVARIANTS: dict[str, str] = {
    "timeline_follows_event_ids": (
        "a job's timeline in event-id order (attempt rows that stand for events placed "
        "after the event of the same job they name) names its attempts in the order "
        "they ran: no event names a lower attempt than one before it"
    ),
}

CHUNK = 1000
"""Jobs whose timelines are read per query (keeps memory flat on big tables)."""

_NAME = "timeline_follows_event_ids"

# (event name, attempt it names or None, where it came from) for a message.
_Entry = tuple[str, int | None, str]


def order_problems(
    connection: Connection, jobs: Table, attempts: Table, events: Table
) -> list[tuple[str, int, str]]:
    """Every job whose timeline contradicts its event ids (one problem per job)."""
    j = jobs.c
    problems: list[tuple[str, int, str]] = []
    after: int | None = None
    while True:
        page = select(j.id).order_by(j.id).limit(CHUNK)
        if after is not None:
            page = page.where(j.id > after)
        ids = connection.execute(page).scalars().all()
        if not ids:
            return problems
        problems.extend(_chunk_problems(connection, attempts, events, ids[0], ids[-1]))
        after = ids[-1]


def _chunk_problems(
    connection: Connection, attempts: Table, events: Table, lowest: int, highest: int
) -> list[tuple[str, int, str]]:
    a, e = attempts.c, events.c
    written: dict[int, list[tuple[int, _Entry]]] = {}
    for job_id, event_id, name, detail in connection.execute(
        select(e.job_id, e.id, e.event, e.detail).where(e.job_id.between(lowest, highest))
    ):
        entry = (name, _attempt_of(detail), f"event {event_id}")
        written.setdefault(job_id, []).append((int(event_id), entry))
    placed = events.alias("placed")
    problems: list[tuple[str, int, str]] = []
    stood_for: dict[int, list[tuple[int, int, Sequence[_Entry], _Entry | None]]] = {}
    for job_id, after_id, attempt, status, owner in connection.execute(
        select(a.job_id, a.after_event_id, a.attempt, a.status, placed.c.job_id)
        .select_from(attempts.outerjoin(placed, placed.c.id == a.after_event_id))
        .where(a.job_id.between(lowest, highest), a.after_event_id.is_not(None))
    ):
        where = f"attempt row {attempt}"
        if owner is not None and owner != job_id:
            problems.append(
                (
                    _NAME,
                    int(job_id),
                    f"{where} stands for events placed after event {after_id}, which is "
                    f"job {owner}'s, not this job's",
                )
            )
        begun = [(Event.CLAIMED.value, attempt, where), (Event.STARTED.value, attempt, where)]
        ended = (
            (Event.SUCCEEDED.value, attempt, where)
            if status == AttemptStatus.SUCCEEDED.value
            else None
        )
        stood_for.setdefault(job_id, []).append((int(after_id), int(attempt), begun, ended))
    flagged = {job_id for _, job_id, _ in problems}
    for job_id in sorted(written.keys() | stood_for.keys()):
        if job_id in flagged:
            continue
        timeline = in_order(written.get(job_id, []), stood_for.get(job_id, []))
        problem = _attempt_goes_down(timeline)
        if problem is not None:
            problems.append((_NAME, int(job_id), problem))
    return problems


def _attempt_goes_down(timeline: Sequence[_Entry]) -> str | None:
    """Where, if anywhere, an event names a lower attempt than one before it."""
    highest = 0
    named_by = ""
    for name, attempt, where in timeline:
        if attempt is None:
            continue
        if attempt < highest:
            return (
                f"{name} of attempt {attempt} ({where}) comes after {named_by} of attempt "
                f"{highest} in event-id order"
            )
        highest, named_by = attempt, f"{name} ({where})"
    return None


def _attempt_of(detail: str | None) -> int | None:
    """The attempt an event's detail names (``{"attempt": N, ...}``), if any."""
    if not detail or '"attempt"' not in detail:
        return None
    try:
        decoded: Any = json.loads(detail)
    except ValueError:
        return None
    if not isinstance(decoded, dict):
        return None
    attempt = decoded.get("attempt")
    if isinstance(attempt, bool) or not isinstance(attempt, int):
        return None
    return attempt
