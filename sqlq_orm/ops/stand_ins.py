"""A job's events as written plus those its attempt rows stand for, in order.

A worker's claim starts the job in the same transaction, and nothing the CLAIMED,
STARTED and SUCCEEDED events of that run would say is missing from its attempt row:
the worker (``worker_id``), the time (``started_at``, ``finished_at``), the attempt
number, the outcome (``status``) and the lease length (``lease_seconds``). Since
revision sqlq_0013 those three events are therefore not written (issue 27: they were
a third of a drained job's writes); this module reads them back.

Where they go in the timeline: a job's written events are ordered by id (each is
written under the job's row lock, so ids follow commit order even when a clock
moves backward). The claim records the id of the job's last written event
(``after_event_id``), so its CLAIMED and STARTED come right after that event. A
SUCCEEDED is always the job's last event: nothing moves a succeeded job again.

Rows with ``after_event_id`` NULL (written by :meth:`~sqlq_orm.Queue.start` after a
claim that did not start, or before sqlq_0013) stand for nothing: their events are
all written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

from sqlq_orm.schema.states import AttemptStatus, Event

T = TypeVar("T")

SYSTEM_ACTOR = "system"


@dataclass(frozen=True)
class DerivedEvent:
    """One event an attempt row stands for, with the detail it would have been written with."""

    ts: int
    event: str
    actor: str
    detail: dict[str, Any]


def attempt_events(
    attempt: int,
    worker_id: str | None,
    status: str,
    started_at: int,
    finished_at: int | None,
    lease_seconds: int | None,
) -> tuple[list[DerivedEvent], DerivedEvent | None]:
    """The CLAIMED and STARTED an attempt row stands for, and its SUCCEEDED if any."""
    actor = worker_id if worker_id is not None else SYSTEM_ACTOR
    begun = [
        DerivedEvent(
            int(started_at),
            Event.CLAIMED.value,
            actor,
            {"attempt": attempt, "lease_seconds": lease_seconds},
        ),
        DerivedEvent(int(started_at), Event.STARTED.value, actor, {"attempt": attempt}),
    ]
    ended = None
    if status == AttemptStatus.SUCCEEDED.value and finished_at is not None:
        ended = DerivedEvent(int(finished_at), Event.SUCCEEDED.value, actor, {"attempt": attempt})
    return begun, ended


_LAST = float("inf")


def in_order(
    written: Iterable[tuple[int, T]],
    stand_ins: Iterable[tuple[int, int, Sequence[T], T | None]],
) -> list[T]:
    """Merge one job's written events with those its attempt rows stand for.

    ``written``: ``(event id, item)``. ``stand_ins``: ``(after_event_id, attempt,
    [claimed, started], succeeded or None)`` per attempt row with ``after_event_id``.
    Returns the items in the order they happened (see the module docstring).
    """
    keyed: list[tuple[tuple[float, int, int, int], T]] = [
        ((event_id, 0, 0, 0), item) for event_id, item in written
    ]
    for after, attempt, begun, ended in stand_ins:
        keyed.extend(((after, 1, attempt, k), item) for k, item in enumerate(begun))
        if ended is not None:
            keyed.append(((_LAST, 2, attempt, 0), ended))
    keyed.sort(key=lambda pair: pair[0])
    return [item for _, item in keyed]


def event_names(
    connection: Connection,
    attempts: Table,
    events: Table,
    *,
    lowest: int | None = None,
    highest: int | None = None,
) -> dict[int, list[str]]:
    """Each job's timeline as event names, in the order it happened, for the jobs with
    ids from ``lowest`` to ``highest`` (all jobs when not given) that have any."""
    a, e = attempts.c, events.c
    written_rows = select(e.job_id, e.id, e.event)
    stand_in_rows = select(a.job_id, a.after_event_id, a.attempt, a.status).where(
        a.after_event_id.is_not(None)
    )
    if lowest is not None:
        written_rows = written_rows.where(e.job_id >= lowest)
        stand_in_rows = stand_in_rows.where(a.job_id >= lowest)
    if highest is not None:
        written_rows = written_rows.where(e.job_id <= highest)
        stand_in_rows = stand_in_rows.where(a.job_id <= highest)
    written: dict[int, list[tuple[int, str]]] = {}
    for job_id, event_id, name in connection.execute(written_rows):
        written.setdefault(job_id, []).append((event_id, name))
    stood_for: dict[int, list[tuple[int, int, Sequence[str], str | None]]] = {}
    begun = [Event.CLAIMED.value, Event.STARTED.value]
    for job_id, after, attempt, status in connection.execute(stand_in_rows):
        ended = Event.SUCCEEDED.value if status == AttemptStatus.SUCCEEDED.value else None
        stood_for.setdefault(job_id, []).append((after, attempt, begun, ended))
    return {
        job_id: in_order(written.get(job_id, []), stood_for.get(job_id, []))
        for job_id in written.keys() | stood_for.keys()
    }
