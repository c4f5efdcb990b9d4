"""Helpers shared by the service tests, and tests of the helpers themselves.

- :func:`snapshot` reads everything the database holds about one job, so a test can
  prove that a rejected call changed nothing;
- :func:`replay` walks a job's event timeline through :mod:`sqlq_orm.schema.states` and
  fails on any event the transition table does not allow;
- :func:`assert_histories_are_legal` replays every job in the database and checks
  that the replayed status is the stored one;
- :func:`pause_after` holds a service call right after one of its statements, inside
  its transaction, so a race can be forced in a chosen order instead of hoped for.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine

from sqlq_orm.ops import stand_ins
from sqlq_orm.schema.models import Job, JobAttempt, JobEvent
from sqlq_orm.schema.states import (
    ANNOTATIONS,
    INITIAL_EVENT,
    TRANSITIONS,
    Event,
    JobStatus,
    is_allowed,
)

WAIT_LIMIT_SECONDS = 60.0
"""How long a helper waits for another thread to reach a point before failing."""

_MOVES_AFTER_ANNOTATION = frozenset({Event.RETRY_SCHEDULED, Event.FAILED})


# ------------------------------------------------------------------ reading state


def snapshot(engine: Engine, job_id: int) -> dict[str, Any]:
    """Every column of the job, its attempts and its events, as plain values."""
    jobs, attempts, events = Job.__table__, JobAttempt.__table__, JobEvent.__table__
    with engine.connect() as connection:
        job = connection.execute(select(jobs).where(jobs.c.id == job_id)).mappings().one()
        attempt_rows = connection.execute(
            select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.attempt)
        ).mappings()
        attempt_dicts = [dict(row) for row in attempt_rows]
        event_rows = connection.execute(
            select(events).where(events.c.job_id == job_id).order_by(events.c.id)
        ).mappings()
        return {
            "job": dict(job),
            "attempts": attempt_dicts,
            "events": _timeline_rows([dict(row) for row in event_rows], attempt_dicts),
        }


def _timeline_rows(written: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> list[Any]:
    """The written event rows with those the attempt rows stand for (as rows with no
    id and their detail as the JSON text it would have been written with)."""

    def row(job_id: int, e: stand_ins.DerivedEvent) -> dict[str, Any]:
        detail = json.dumps(e.detail, separators=(",", ":"))
        return {"id": None, "job_id": job_id, "ts": e.ts, "event": e.event, "actor": e.actor,
                "detail": detail}  # fmt: skip

    stood_for = []
    for a in attempts:
        if a["after_event_id"] is None:
            continue
        begun, ended = stand_ins.attempt_events(
            a["attempt"], a["worker_id"], a["status"], a["started_at"], a["finished_at"],
            a["lease_seconds"],
        )  # fmt: skip
        job_id = a["job_id"]
        stood_for.append(
            (a["after_event_id"], a["attempt"], [row(job_id, e) for e in begun],
             None if ended is None else row(job_id, ended))
        )  # fmt: skip
    return stand_ins.in_order([(r["id"], r) for r in written], stood_for)


def event_names(engine: Engine, job_id: int) -> list[str]:
    """The job's timeline as event names, oldest first (written events and those its
    attempt rows stand for: sqlq_orm.ops.stand_ins)."""
    with engine.connect() as connection:
        return stand_ins.event_names(
            connection, JobAttempt.__table__, JobEvent.__table__, lowest=job_id, highest=job_id
        ).get(job_id, [])


def written_event_names(engine: Engine, job_id: int) -> list[str]:
    """Only the events written to the events table for the job, by id."""
    events = JobEvent.__table__
    with engine.connect() as connection:
        return list(
            connection.execute(
                select(events.c.event).where(events.c.job_id == job_id).order_by(events.c.id)
            ).scalars()
        )


def attempt_rows(engine: Engine, job_id: int) -> list[tuple[int, str, str | None]]:
    """``(attempt, status, error_code)`` of each attempt, in order."""
    attempts = JobAttempt.__table__
    with engine.connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                select(attempts.c.attempt, attempts.c.status, attempts.c.error_code)
                .where(attempts.c.job_id == job_id)
                .order_by(attempts.c.attempt)
            )
        ]


def count_events(engine: Engine, name: str) -> int:
    """How many events called ``name`` the timelines hold, over all jobs."""
    with engine.connect() as connection:
        timelines = stand_ins.event_names(connection, JobAttempt.__table__, JobEvent.__table__)
    return sum(names.count(name) for names in timelines.values())


def job_row(engine: Engine, job_id: int) -> Any:
    """The job's row (attribute access by column name)."""
    jobs = Job.__table__
    with engine.connect() as connection:
        return connection.execute(select(jobs).where(jobs.c.id == job_id)).one()


def row_counts(engine: Engine) -> dict[str, int]:
    """How many rows each queue table holds."""
    with engine.connect() as connection:
        return {
            model.__tablename__: connection.execute(
                select(func.count()).select_from(model.__table__)
            ).scalar_one()
            for model in (Job, JobAttempt, JobEvent)
        }


# ------------------------------------------------------------ replaying history


def replay(events: Sequence[str | Event]) -> JobStatus:
    """Walk a timeline through the transition table; return the status it ends in.

    Fails the test on the first event that is not allowed where it appears, and on
    an annotation (RECOVERED, TIMED_OUT) that is not followed by the event that
    moves the job.
    """
    names = [Event(e) for e in events]
    assert names, "a job's timeline is never empty"
    assert names[0] is INITIAL_EVENT, f"timeline starts with {names[0]}, not {INITIAL_EVENT}"
    status = JobStatus.QUEUED
    for index, name in enumerate(names[1:], start=1):
        assert is_allowed(status, name), f"event #{index} {name} is not allowed in {status}"
        if name in ANNOTATIONS:
            following = names[index + 1] if index + 1 < len(names) else None
            if name is not Event.HEARTBEAT:
                # A recovered claim that never started is released, no retry spent.
                free = {Event.RELEASED} if name is Event.RECOVERED else set()
                assert following in _MOVES_AFTER_ANNOTATION | free, (
                    f"{name} at #{index} must be followed by RETRY_SCHEDULED or FAILED, "
                    f"got {following}"
                )
            continue
        status = TRANSITIONS[name].target
    return status


def assert_histories_are_legal(engine: Engine) -> int:
    """Replay every job's timeline; each must be legal and end in the job's status.

    Returns how many jobs were checked, so callers can assert it was not zero.
    """
    jobs = Job.__table__
    with engine.connect() as connection:
        statuses = dict(connection.execute(select(jobs.c.id, jobs.c.status)).all())
        found = stand_ins.event_names(connection, JobAttempt.__table__, JobEvent.__table__)
        timelines = {job_id: found.get(job_id, []) for job_id in statuses}
    for job_id, timeline in timelines.items():
        assert replay(timeline).value == statuses[job_id], (
            f"job {job_id}: timeline {timeline} ends elsewhere than its status {statuses[job_id]}"
        )
    return len(timelines)


# ------------------------------------------------------------- forcing an order


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until true; fail (not hang) if it never becomes true."""
    deadline = time.monotonic() + WAIT_LIMIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.01)


class Pause:
    """Where a paused call stands: ``reached`` once it is held, ``resume()`` to go on."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._go = threading.Event()

    def resume(self) -> None:
        self._go.set()

    def wait_reached(self, what: str) -> None:
        if not self.reached.wait(WAIT_LIMIT_SECONDS):
            pytest.fail(f"the paused call never reached {what}")


@contextmanager
def pause_after(engine: Engine, matches: Callable[[str], bool]) -> Iterator[Pause]:
    """Hold the first statement on ``engine`` that ``matches`` right after it runs.

    The call that ran it stays inside its open transaction (holding its locks) until
    ``resume()``; leaving the block resumes it in any case.
    """
    pause = Pause()
    fired = threading.Lock()

    def after_cursor_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if matches(statement) and fired.acquire(blocking=False):
            pause.reached.set()
            if not pause._go.wait(WAIT_LIMIT_SECONDS):
                raise RuntimeError("paused statement was never resumed")

    event.listen(engine, "after_cursor_execute", after_cursor_execute)
    try:
        yield pause
    finally:
        pause.resume()
        event.remove(engine, "after_cursor_execute", after_cursor_execute)


@contextmanager
def statements_seen(engine: Engine) -> Iterator[list[str]]:
    """Collect the SQL of every statement run on ``engine`` inside the block."""
    seen: list[str] = []

    def before_cursor_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", before_cursor_execute)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before_cursor_execute)


def backends_waiting_for_a_lock(engine: Engine) -> int:
    """Server databases: how many sessions on this database wait for a lock right now."""
    from tests.support.faultkit import lock_waiters_sql

    with engine.connect() as connection:
        return int(connection.exec_driver_sql(lock_waiters_sql(engine)).scalar_one())


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def second_engine(db_url: str) -> Engine:
    """Another engine on the same database (its own pool and event hooks; through
    PgBouncer, made as the ``engine`` fixture's)."""
    from tests.support.backends import engine_for

    return engine_for(db_url)
