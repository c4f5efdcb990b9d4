"""What must be true of a sqlq_orm database after every commit, and a read-only checker.

:func:`check` reads the jobs, attempts and events tables in one consistent snapshot and
returns a :class:`Violation` for every row that breaks one of :data:`INVARIANTS`. It
writes nothing and takes no write lock, so it is safe to run against a live queue
(``sqlq check`` does exactly this and exits non-zero when anything is found).

The CHECK constraints already refuse some of these states; the checker looks for them
anyway, because a host app's schema may predate a constraint, SQLite can be told to
ignore them, and a checker that trusts the thing it checks proves nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, and_, case, func, or_, select
from sqlalchemy.engine import Connection, Engine

from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.errors import InvalidInput
from sqlq_orm.ops import dedupe_holds, dependency_order, timeline_order
from sqlq_orm.ops.stand_ins import event_names
from sqlq_orm.schema.states import (
    ACTIVE,
    ANNOTATIONS,
    HELD,
    INITIAL_EVENT,
    INITIAL_STATUSES,
    TERMINAL,
    TRANSITIONS,
    AttemptStatus,
    Event,
    JobStatus,
)

INVARIANTS: dict[str, str] = {
    "held_job_has_lease": (
        "a CLAIMED or RUNNING job has claimed_by, lease_token and lease_expires_at"
    ),
    "lease_only_while_held": "a QUEUED or finished job has no lease_token and no lease_expires_at",
    "terminal_job_has_finished_at": "a SUCCEEDED, FAILED or CANCELLED job has finished_at",
    "active_job_has_no_finished_at": "a QUEUED, CLAIMED or RUNNING job has no finished_at",
    "running_job_has_one_open_attempt": (
        "a RUNNING job has exactly one open (RUNNING) attempt, numbered attempt_count "
        "and run by the worker holding the lease"
    ),
    "only_running_job_has_open_attempt": "a job that is not RUNNING has no open attempt",
    "attempts_numbered_1_to_n": (
        "a job's attempts are numbered 1..attempt_count with no gap and none missing"
    ),
    "at_most_one_succeeded_attempt": "no job has more than one SUCCEEDED attempt",
    "succeeded_job_has_its_success": (
        "a SUCCEEDED job has exactly one SUCCEEDED attempt, its last, run by claimed_by; "
        "a job that is not SUCCEEDED has none"
    ),
    "events_follow_state_machine": (
        "a job's events, replayed from ENQUEUED with the transition table, are each "
        "allowed and end in the job's status"
    ),
    "concurrency_limit_respected": (
        "no more jobs sharing a concurrency_key are CLAIMED or RUNNING than their concurrency_limit"
    ),
    "no_orphan_attempts": "every attempt belongs to an existing job",
    "no_orphan_events": "every event belongs to an existing job",
    "one_job_per_schedule_slot": (
        "no two jobs were enqueued for the same slot of the same recurring schedule "
        "(read from the schedule and slot their ENQUEUED events record)"
    ),
    "schedule_slots_move_forward": ("a schedule's last enqueued slot is before its next slot"),
    "dependent_ran_after_its_parents": (
        "a job that was claimed, ran or finished by running (CLAIMED, RUNNING, SUCCEEDED, "
        "or FAILED with attempts) has every parent it waits for under the cancel policy "
        "SUCCEEDED (a retried job waits for its parents like a new one)"
    ),
    "waiting_job_has_unmet_parents": (
        "a WAITING job has a parent it still waits for (not SUCCEEDED, or under the run "
        "policy not finished); otherwise it is stuck"
    ),
    "waiting_job_has_no_failed_parent": (
        "a WAITING job has no parent FAILED or CANCELLED under the cancel policy (it "
        "should have been cancelled with DEPENDENCY:FAILED)"
    ),
    "parent_is_flagged": (
        "a job that another waits for has has_dependents = 1 (else its end would not "
        "look for its children)"
    ),
    "foreign_keys_hold": (
        "no row of any table references a missing row (SQLite lets one through when a "
        "connection wrote with foreign keys off, e.g. an engine without sqlq's settings)"
    ),
    **dependency_order.INVARIANTS,
    **timeline_order.INVARIANTS,
    **dedupe_holds.INVARIANTS,
}
"""Every invariant the checker knows, by name, with what it requires."""

REPLAY_CHUNK = 1000
"""Jobs whose events are replayed per query (keeps memory flat on big tables)."""

_HELD = sorted(s.value for s in HELD)
_TERMINAL = sorted(s.value for s in TERMINAL)
_ACTIVE = sorted(s.value for s in ACTIVE)
_OPEN = AttemptStatus.RUNNING.value
_SUCCEEDED = AttemptStatus.SUCCEEDED.value
_MOVERS_AFTER = frozenset({Event.RECOVERED, Event.TIMED_OUT})
_FOLLOW_UPS = frozenset({Event.RETRY_SCHEDULED, Event.FAILED})
# A recovered lease of a job that never started goes back with no retry spent.
_FREE_FOLLOW_UPS = {Event.RECOVERED: frozenset({Event.RELEASED})}


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which one, on which job, and what was found."""

    invariant: str
    """A key of :data:`INVARIANTS`."""
    job_id: int | None
    detail: str

    def __str__(self) -> str:
        where = "database" if self.job_id is None else f"job {self.job_id}"
        return f"{where}: {self.invariant}: {self.detail}"


def check(target: QueueContext | HasContext | Engine) -> list[Violation]:
    """Return every invariant violation in the database (an empty list when healthy).

    ``target`` is a :class:`~sqlq_orm.Queue` or its
    :class:`~sqlq_orm.db.context.QueueContext` (its models and tables are used), or an
    :class:`~sqlalchemy.engine.Engine` holding the default ``sqlq_*`` tables.
    Read-only: one snapshot, no write lock, nothing written.
    """
    context = _context(target)
    tables = context.tables
    with context.snapshot() as connection:
        violations: list[Violation] = []
        for name, query in _row_checks(tables.jobs, tables.attempts, tables.events):
            for row in connection.execute(query):
                violations.append(Violation(name, row[0], _describe(row)))
        violations.extend(_replay_events(connection, tables.jobs, tables.attempts, tables.events))
        violations.extend(
            Violation(*problem)
            for problem in timeline_order.order_problems(
                connection, tables.jobs, tables.attempts, tables.events
            )
        )
        violations.extend(_schedule_problems(connection, tables.events, tables.schedules))
        if tables.dependencies is not None:
            for name, query in _dependency_checks(tables.jobs, tables.dependencies):
                for row in connection.execute(query):
                    violations.append(Violation(name, row[0], _describe(row)))
            found = [
                *dependency_order.order_problems(
                    connection, tables.jobs, tables.attempts, tables.events, tables.dependencies
                ),
                *dependency_order.count_problems(connection, tables.jobs, tables.dependencies),
            ]
            violations.extend(Violation(*problem) for problem in found)
        held = dedupe_holds.hold_problems(connection, tables.jobs)
        violations.extend(Violation(*problem) for problem in held)
        violations.extend(_foreign_key_problems(context, connection))
    violations.sort(key=lambda v: (v.job_id is None, v.job_id or 0, v.invariant))
    return violations


def _foreign_key_problems(context: QueueContext, connection: Connection) -> list[Violation]:
    """Rows, in any table, whose foreign keys point at nothing (one violation per table)."""
    per_table: dict[str, int] = {}
    for table in context.dialect.foreign_key_problems(connection):
        per_table[table] = per_table.get(table, 0) + 1
    return [
        Violation(
            "foreign_keys_hold",
            None,
            f"{count} row(s) of {table} reference missing rows; were they written on a "
            "connection with foreign keys off? (sqlq_orm.configure_engine turns them on)",
        )
        for table, count in sorted(per_table.items())
    ]


def _context(target: QueueContext | HasContext | Engine) -> QueueContext:
    if isinstance(target, Engine):
        return QueueContext(target)
    try:
        return context_of(target)
    except InvalidInput:
        raise TypeError(f"check() needs a Queue or an Engine, got {target!r}") from None


def _describe(row: Any) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in row._mapping.items() if key != "job_id")


def _row_checks(jobs: Table, attempts: Table, events: Table) -> list[tuple[str, Any]]:
    """One query per invariant; each returns ``job_id`` first, then what it found."""
    j, a, e = jobs.c, attempts.c, events.c
    open_attempts = (
        select(
            a.job_id,
            func.count().label("open_count"),
            func.min(a.attempt).label("open_attempt"),
            func.min(a.worker_id).label("open_worker"),
        )
        .where(a.status == _OPEN)
        .group_by(a.job_id)
        .subquery("open_attempts")
    )
    all_attempts = (
        select(
            a.job_id,
            func.count().label("n"),
            func.min(a.attempt).label("lowest"),
            func.max(a.attempt).label("highest"),
        )
        .group_by(a.job_id)
        .subquery("all_attempts")
    )
    successes = (
        select(
            a.job_id,
            func.count().label("n"),
            func.max(a.attempt).label("attempt"),
            func.max(a.worker_id).label("worker"),
        )
        .where(a.status == _SUCCEEDED)
        .group_by(a.job_id)
        .subquery("successes")
    )
    attempt_rows = func.coalesce(all_attempts.c.n, 0)
    success_rows = func.coalesce(successes.c.n, 0)
    is_succeeded = j.status == JobStatus.SUCCEEDED.value
    return [
        (
            "held_job_has_lease",
            select(j.id.label("job_id"), j.status, j.claimed_by, j.lease_expires_at)
            .add_columns((j.lease_token.is_not(None)).label("has_token"))
            .where(
                j.status.in_(_HELD),
                or_(j.claimed_by.is_(None), j.lease_token.is_(None), j.lease_expires_at.is_(None)),
            ),
        ),
        (
            "lease_only_while_held",
            select(j.id.label("job_id"), j.status, j.lease_expires_at)
            .add_columns((j.lease_token.is_not(None)).label("has_token"))
            .where(
                j.status.not_in(_HELD),
                or_(j.lease_token.is_not(None), j.lease_expires_at.is_not(None)),
            ),
        ),
        (
            "terminal_job_has_finished_at",
            select(j.id.label("job_id"), j.status).where(
                j.status.in_(_TERMINAL), j.finished_at.is_(None)
            ),
        ),
        (
            "active_job_has_no_finished_at",
            select(j.id.label("job_id"), j.status, j.finished_at).where(
                j.status.in_(_ACTIVE), j.finished_at.is_not(None)
            ),
        ),
        (
            "running_job_has_one_open_attempt",
            select(
                j.id.label("job_id"),
                j.attempt_count,
                j.claimed_by,
                func.coalesce(open_attempts.c.open_count, 0).label("open_attempts"),
                open_attempts.c.open_attempt,
                open_attempts.c.open_worker,
            )
            .select_from(jobs.outerjoin(open_attempts, open_attempts.c.job_id == j.id))
            .where(
                j.status == JobStatus.RUNNING.value,
                or_(
                    open_attempts.c.open_count.is_(None),
                    open_attempts.c.open_count != 1,
                    open_attempts.c.open_attempt != j.attempt_count,
                    open_attempts.c.open_worker.is_distinct_from(j.claimed_by),
                ),
            ),
        ),
        (
            "only_running_job_has_open_attempt",
            select(a.job_id, j.status, a.attempt)
            .select_from(attempts.join(jobs, j.id == a.job_id))
            .where(a.status == _OPEN, j.status != JobStatus.RUNNING.value),
        ),
        (
            "attempts_numbered_1_to_n",
            select(
                j.id.label("job_id"),
                j.attempt_count,
                attempt_rows.label("attempts"),
                all_attempts.c.lowest,
                all_attempts.c.highest,
            )
            .select_from(jobs.outerjoin(all_attempts, all_attempts.c.job_id == j.id))
            .where(
                or_(
                    attempt_rows != j.attempt_count,
                    # With UNIQUE(job_id, attempt), n rows from 1 to n are exactly 1..n.
                    and_(
                        all_attempts.c.n.is_not(None),
                        or_(all_attempts.c.lowest != 1, all_attempts.c.highest != all_attempts.c.n),
                    ),
                )
            ),
        ),
        (
            "at_most_one_succeeded_attempt",
            select(successes.c.job_id, successes.c.n.label("succeeded_attempts")).where(
                successes.c.n > 1
            ),
        ),
        (
            "succeeded_job_has_its_success",
            select(
                j.id.label("job_id"),
                j.status,
                j.attempt_count,
                j.claimed_by,
                success_rows.label("succeeded_attempts"),
                successes.c.attempt.label("succeeded_attempt"),
                successes.c.worker.label("succeeded_by"),
            )
            .select_from(jobs.outerjoin(successes, successes.c.job_id == j.id))
            .where(
                or_(
                    and_(~is_succeeded, success_rows > 0),
                    and_(
                        is_succeeded,
                        or_(
                            success_rows != 1,
                            successes.c.attempt != j.attempt_count,
                            successes.c.worker.is_distinct_from(j.claimed_by),
                        ),
                    ),
                )
            ),
        ),
        (
            # At most concurrency_limit held jobs per key (the smallest limit among
            # them, if they disagree); reported on the key's lowest held job id.
            "concurrency_limit_respected",
            select(
                func.min(j.id).label("job_id"),
                j.concurrency_key,
                func.count().label("held"),
                func.min(j.concurrency_limit).label("limit"),
            )
            .where(j.concurrency_key.is_not(None), j.status.in_(_HELD))
            .group_by(j.concurrency_key)
            .having(func.count() > func.min(j.concurrency_limit)),
        ),
        (
            "no_orphan_attempts",
            select(a.job_id, a.attempt, a.status)
            .select_from(attempts.outerjoin(jobs, j.id == a.job_id))
            .where(j.id.is_(None)),
        ),
        (
            "no_orphan_events",
            select(e.job_id, e.event, e.id.label("event_id"))
            .select_from(events.outerjoin(jobs, j.id == e.job_id))
            .where(j.id.is_(None)),
        ),
    ]


def _dependency_checks(jobs: Table, dependencies: Table) -> list[tuple[str, Any]]:
    """The dependency graph's snapshot invariants, one query each (``job_id`` first);
    those that need the events' order are in :mod:`sqlq_orm.ops.dependency_order`."""
    j, d = jobs.c, dependencies.c
    parent = jobs.alias("parent")
    p = parent.c
    cancel_edge = d.on_parent_failure == "cancel"
    not_succeeded = p.status != JobStatus.SUCCEEDED.value
    unmet = or_(and_(cancel_edge, not_succeeded), and_(~cancel_edge, p.status.not_in(_TERMINAL)))
    failed = and_(cancel_edge, p.status.in_([JobStatus.FAILED.value, JobStatus.CANCELLED.value]))
    edges = (
        select(
            d.job_id,
            func.sum(case((unmet, 1), else_=0)).label("unmet"),
            func.sum(case((failed, 1), else_=0)).label("failed"),
            func.sum(case((and_(cancel_edge, not_succeeded), 1), else_=0)).label("early"),
            func.min(case((and_(cancel_edge, not_succeeded), p.id))).label("parent"),
        )
        .select_from(dependencies.join(parent, p.id == d.depends_on_id))
        .group_by(d.job_id)
        .subquery("edges")
    )
    graph = jobs.outerjoin(edges, edges.c.job_id == j.id)
    waiting = j.status == JobStatus.WAITING.value
    ran = or_(
        j.status.in_([*_HELD, JobStatus.SUCCEEDED.value]),
        and_(j.status == JobStatus.FAILED.value, j.attempt_count > 0),
    )
    return [
        (
            "dependent_ran_after_its_parents",
            select(j.id.label("job_id"), j.status, edges.c.parent.label("unfinished_parent"))
            .select_from(graph)
            .where(ran, edges.c.early > 0),
        ),
        (
            "waiting_job_has_unmet_parents",
            select(j.id.label("job_id"), j.pending_parents)
            .select_from(graph)
            .where(waiting, func.coalesce(edges.c.unmet, 0) == 0),
        ),
        (
            "parent_is_flagged",
            select(p.id.label("job_id"), func.min(d.job_id).label("child"))
            .select_from(dependencies.join(parent, p.id == d.depends_on_id))
            .where(p.has_dependents != 1)
            .group_by(p.id),
        ),
        (
            "waiting_job_has_no_failed_parent",
            select(j.id.label("job_id"), edges.c.failed.label("failed_parents"))
            .select_from(graph)
            .where(waiting, edges.c.failed > 0),
        ),
    ]


def _replay_events(
    connection: Connection, jobs: Table, attempts: Table, events: Table
) -> list[Violation]:
    """Replay each job's timeline (in the order it happened) through the transition table."""
    j = jobs.c
    violations: list[Violation] = []
    after = None
    while True:
        page = select(j.id, j.status).order_by(j.id).limit(REPLAY_CHUNK)
        if after is not None:
            page = page.where(j.id > after)
        job_rows = connection.execute(page).all()
        if not job_rows:
            return violations
        lowest, highest = job_rows[0].id, job_rows[-1].id
        # By id, not ts: a job's events are written under its row lock, so ids follow
        # commit order even when a pinned clock moved backward (and the attempt rows
        # that stand for events say after which event id: sqlq_orm.ops.stand_ins).
        timelines = event_names(connection, attempts, events, lowest=lowest, highest=highest)
        for row in job_rows:
            timeline = timelines.get(row.id, [])
            problem = replay_problem(timeline, row.status)
            if problem is not None:
                violations.append(Violation("events_follow_state_machine", row.id, problem))
        after = highest


def _schedule_problems(
    connection: Connection, events: Table, schedules: Table | None
) -> list[Violation]:
    """Slots that got more than one job, and schedules whose progress runs backward."""
    e = events.c
    # The LIKE only narrows the scan; each detail is parsed before it counts.
    rows = connection.execute(
        select(e.job_id, e.detail)
        .where(e.event == Event.ENQUEUED.value, e.detail.like('%"schedule":%'))
        .order_by(e.job_id)
    )
    jobs_per_slot: dict[tuple[str, int], list[int]] = {}
    for job_id, detail in rows:
        slot = scheduled_slot(detail)
        if slot is not None:
            jobs_per_slot.setdefault(slot, []).append(job_id)
    violations = [
        Violation(
            "one_job_per_schedule_slot",
            job_id,
            f"schedule {name!r} slot {slot} has {len(job_ids)} jobs: {job_ids}",
        )
        for (name, slot), job_ids in sorted(jobs_per_slot.items())
        if len(job_ids) > 1
        for job_id in job_ids[1:]
    ]
    if schedules is not None:
        s = schedules.c
        backward = select(s.name, s.last_slot_at, s.next_slot_at).where(
            s.last_slot_at >= s.next_slot_at
        )
        violations.extend(
            Violation(
                "schedule_slots_move_forward",
                None,
                f"schedule {row.name!r}: last_slot_at={row.last_slot_at} is not before "
                f"next_slot_at={row.next_slot_at}",
            )
            for row in connection.execute(backward)
        )
    return violations


def scheduled_slot(detail: str | None) -> tuple[str, int] | None:
    """``(schedule name, slot)`` from an ENQUEUED event's detail, or None if unscheduled."""
    try:
        parsed = json.loads(detail or "")
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    name, slot = parsed.get("schedule"), parsed.get("slot")
    if isinstance(name, str) and isinstance(slot, int) and not isinstance(slot, bool):
        return name, slot
    return None


def replay_problem(timeline: Sequence[str], status: str) -> str | None:
    """Say what is wrong with one job's event names given its status, or None.

    A pure function, so the rules can be read (and tested) without a database.
    """
    if not timeline:
        return "the job has no events (its ENQUEUED is missing)"
    if timeline[0] != INITIAL_EVENT.value:
        return f"first event is {timeline[0]}, not {INITIAL_EVENT.value}"
    # ENQUEUED creates the job QUEUED or WAITING (it had unmet parents); the events
    # that follow tell which, so replay both and keep the states still possible.
    states = set(INITIAL_STATUSES)
    for index, name in enumerate(timeline[1:], start=2):
        try:
            event = Event(name)
        except ValueError:
            return f"event #{index} {name!r} is not a known event"
        transition = TRANSITIONS.get(event)
        if transition is not None:
            if not states & transition.sources:
                return f"event #{index} {name} is not allowed from {_names(states)}"
            states = set(transition.targets)
            continue
        if event not in ANNOTATIONS:
            return f"event #{index} {name} cannot happen after the job exists"
        if not states & HELD:
            return f"event #{index} {name} is only allowed while held, the job was {_names(states)}"
        states &= HELD
        if event in _MOVERS_AFTER:
            following = timeline[index] if index < len(timeline) else None
            allowed = _FOLLOW_UPS | _FREE_FOLLOW_UPS.get(event, frozenset())
            if following not in {f.value for f in allowed}:
                return (
                    f"event #{index} {name} must be followed by "
                    f"{' or '.join(sorted(f.value for f in allowed))}, "
                    f"got {following}"
                )
    if status not in {state.value for state in states}:
        return f"events replay to {_names(states)} but the job is {status}"
    return None


def _names(states: set[JobStatus]) -> str:
    return " or ".join(sorted(state.value for state in states))
