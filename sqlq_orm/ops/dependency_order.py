"""The dependency invariants that need history: when a child started, what its parents were.

A snapshot cannot show a child that ran before its parent: once the parent has
succeeded too, both rows look right. The events can: for every CLAIMED event of a
child (written, or stood for by its attempt row: :mod:`sqlq_orm.ops.stand_ins`), the
event that last made it ready before that claim (ENQUEUED, DEPENDENCIES_MET or
RETRIED) must come after each of its parents' last state change was into SUCCEEDED
(``cancel`` policy) or into any finished status (``run``). Event ids are compared,
not timestamps: a child is made ready in, or after, the transaction that wrote its
parent's ending event, under the parent's or the child's row lock, and ids follow
that order on every database (a pinned clock may repeat a timestamp). The one
exception is a parent's SUCCEEDED that its attempt row stands for: it has no id, so
its time (``finished_at``) is compared with the release's (``<=``; the release is
written in the same transaction, at the same time, or later).

The second check holds the WAITING count to the edges: ``pending_parents`` equals
the number of parents the job still waits for (a count decremented twice, as by a
parent that ended twice, shows up here before the child is released).

Used by :func:`sqlq_orm.ops.invariants.check`; returns ``(invariant, job_id,
detail)`` triples.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, and_, case, func, null, or_, select, union_all
from sqlalchemy.engine import Connection

from sqlq_orm.schema.states import (
    INITIAL_EVENT,
    INITIAL_STATUSES,
    TERMINAL,
    TRANSITIONS,
    AttemptStatus,
    Event,
    JobStatus,
)

INVARIANTS: dict[str, str] = {
    "dependent_started_after_parents_settled": (
        "each time a job with parents was made ready (enqueued, released or retried) "
        "before a claim, every parent had last moved into SUCCEEDED (cancel policy) or "
        "into a finished status (run policy), by the order of the events"
    ),
    "waiting_count_matches_parents": (
        "a WAITING job's pending_parents is the number of its parents not yet SUCCEEDED "
        "(cancel policy) or not yet finished (run policy)"
    ),
}

_MOVES = sorted({INITIAL_EVENT.value, *(event.value for event in TRANSITIONS)})
_TERMINAL = sorted(status.value for status in TERMINAL)
_RELEASES = sorted(event.value for event in (INITIAL_EVENT, Event.DEPENDENCIES_MET, Event.RETRIED))


def _reached(event: str) -> frozenset[JobStatus]:
    """Where a state-changing event can leave the job."""
    if event == INITIAL_EVENT.value:
        return INITIAL_STATUSES
    return TRANSITIONS[Event(event)].targets


def _settled(policy: str, event: str | None) -> bool:
    if event is None:
        return False
    reached = _reached(event)
    if policy == "run":
        return reached <= TERMINAL
    return reached == {JobStatus.SUCCEEDED}


def order_problems(
    connection: Connection, jobs: Table, attempts: Table, events: Table, dependencies: Table
) -> list[tuple[str, int, str]]:
    """Every dependency-order violation, one per child (its first claim that broke it)."""
    d, e = dependencies.c, events.c
    claim = events.alias("claim")
    claimer = attempts.alias("claimer")
    release = events.alias("release")
    released = events.alias("released")
    before = events.alias("before")
    finisher = attempts.alias("finisher")
    # Every claim of a child: a written CLAIMED event, or an attempt row that stands
    # for one (sqlq_orm.ops.stand_ins), which came right after event after_event_id.
    # "bound" is the child's last event id before the claim.
    all_claims = union_all(
        select(
            d.job_id,
            d.depends_on_id.label("parent"),
            d.on_parent_failure.label("policy"),
            (claim.c.id - 1).label("bound"),
            claim.c.id.label("claim_event"),
        ).select_from(
            dependencies.join(
                claim, and_(claim.c.job_id == d.job_id, claim.c.event == Event.CLAIMED.value)
            )
        ),
        select(
            d.job_id,
            d.depends_on_id.label("parent"),
            d.on_parent_failure.label("policy"),
            claimer.c.after_event_id.label("bound"),
            null().label("claim_event"),
        ).select_from(
            dependencies.join(
                claimer,
                and_(claimer.c.job_id == d.job_id, claimer.c.after_event_id.is_not(None)),
            )
        ),
    ).subquery("all_claims")
    # The event that last made the child ready before this claim (its enqueue, the
    # DEPENDENCIES_MET that released it, or a manual retry): the parents are judged
    # there, so a child released while its parent was finished may still run after
    # that parent was retried by hand (under ``run``, a released child is not held
    # back again).
    released_at = (
        select(func.max(release.c.id))
        .where(
            release.c.job_id == all_claims.c.job_id,
            release.c.id <= all_claims.c.bound,
            release.c.event.in_(_RELEASES),
        )
        .scalar_subquery()
    )
    claims = select(all_claims, released_at.label("release_event")).subquery("claims")
    last_move = (
        select(func.max(before.c.id))
        .where(
            before.c.job_id == claims.c.parent,
            before.c.id < claims.c.release_event,
            before.c.event.in_(_MOVES),
        )
        .scalar_subquery()
    )
    # A parent's SUCCEEDED that its attempt row stands for has no id; it is the
    # parent's last event, so it came before the child's release if its time did.
    succeeded_at = (
        select(func.max(finisher.c.finished_at))
        .where(
            finisher.c.job_id == claims.c.parent,
            finisher.c.after_event_id.is_not(None),
            finisher.c.status == AttemptStatus.SUCCEEDED.value,
        )
        .scalar_subquery()
    )
    judged = select(
        claims, last_move.label("parent_event_id"), succeeded_at.label("parent_succeeded_at")
    ).subquery("judged")
    rows = connection.execute(
        select(judged, e.event.label("parent_event"), released.c.ts.label("release_ts"))
        .select_from(
            judged.outerjoin(events, e.id == judged.c.parent_event_id).outerjoin(
                released, released.c.id == judged.c.release_event
            )
        )
        .order_by(judged.c.job_id, judged.c.bound, judged.c.parent)
    )
    problems: list[tuple[str, int, str]] = []
    reported: set[int] = set()
    for row in rows:
        parent_event = row.parent_event
        if (
            row.parent_succeeded_at is not None
            and row.release_ts is not None
            and row.parent_succeeded_at <= row.release_ts
        ):
            parent_event = Event.SUCCEEDED.value
        if row.job_id in reported or _settled(row.policy, parent_event):
            continue
        reported.add(row.job_id)
        after = parent_event or "nothing"
        claimed = (
            f"event id {row.claim_event}"
            if row.claim_event is not None
            else f"after event id {row.bound}"
        )
        problems.append(
            (
                "dependent_started_after_parents_settled",
                row.job_id,
                f"claimed ({claimed}), made ready by event id "
                f"{row.release_event} while parent {row.parent} had last moved by {after} "
                f"({row.policy} policy)",
            )
        )
    return problems


def count_problems(
    connection: Connection, jobs: Table, dependencies: Table
) -> list[tuple[str, int, str]]:
    """WAITING jobs whose ``pending_parents`` is not what their parents say (a job
    with nothing left to wait for is ``waiting_job_has_unmet_parents``'s to report)."""
    j, d = jobs.c, dependencies.c
    parent = jobs.alias("parent")
    p = parent.c
    unmet = or_(
        and_(d.on_parent_failure == "run", p.status.not_in(_TERMINAL)),
        and_(d.on_parent_failure != "run", p.status != JobStatus.SUCCEEDED.value),
    )
    edges = (
        select(d.job_id, func.sum(case((unmet, 1), else_=0)).label("unmet"))
        .select_from(dependencies.join(parent, p.id == d.depends_on_id))
        .group_by(d.job_id)
        .subquery("edges")
    )
    query: Any = (
        select(j.id, j.pending_parents, edges.c.unmet)
        .select_from(jobs.join(edges, edges.c.job_id == j.id))
        .where(
            j.status == JobStatus.WAITING.value,
            edges.c.unmet > 0,
            j.pending_parents != edges.c.unmet,
        )
        .order_by(j.id)
    )
    return [
        (
            "waiting_count_matches_parents",
            row.id,
            f"pending_parents={row.pending_parents} but it waits for {row.unmet} parent(s)",
        )
        for row in connection.execute(query)
    ]
