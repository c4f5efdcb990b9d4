"""Job statuses, attempt statuses, event names and the one table of allowed transitions.

Every state change the service makes is one of the events in :data:`TRANSITIONS`;
nothing else moves a job. Tests walk this table to prove that nothing else happens.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobStatus(enum.StrEnum):
    """Where a job is in its life. Stored as the member's value."""

    WAITING = "WAITING"  #: waiting for its parent jobs (``depends_on``) to succeed
    QUEUED = "QUEUED"  #: waiting for a worker (possibly not before ``run_at``)
    CLAIMED = "CLAIMED"  #: leased to a worker that has not started it yet
    RUNNING = "RUNNING"  #: leased to a worker whose handler is running
    SUCCEEDED = "SUCCEEDED"  #: finished well (terminal)
    FAILED = "FAILED"  #: finished badly with no retries left (terminal)
    CANCELLED = "CANCELLED"  #: stopped by a person or the app (terminal)


class AttemptStatus(enum.StrEnum):
    """The outcome of one run of a job (one row in the attempts table)."""

    RUNNING = "RUNNING"  #: the attempt is open
    SUCCEEDED = "SUCCEEDED"  #: the handler returned
    FAILED = "FAILED"  #: the handler raised, timed out, or its lease expired
    RELEASED = "RELEASED"  #: given back unfinished (graceful shutdown); no retry spent
    CANCELLED = "CANCELLED"  #: the job was cancelled while this attempt ran
    SNOOZED = "SNOOZED"  #: the handler asked to run again later (``Snooze``); no retry spent


class Event(enum.StrEnum):
    """Names written to the event timeline."""

    ENQUEUED = "ENQUEUED"
    CLAIMED = "CLAIMED"
    STARTED = "STARTED"
    HEARTBEAT = "HEARTBEAT"  #: written rarely, never once per heartbeat
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    RELEASED = "RELEASED"
    CANCELLED = "CANCELLED"
    RECOVERED = "RECOVERED"  #: the sweeper took back an expired lease
    TIMED_OUT = "TIMED_OUT"  #: the sweeper ended a run past its max runtime
    RETRIED = "RETRIED"  #: a person requeued a finished job (WAITING if it has unmet parents)
    DEPENDENCIES_MET = "DEPENDENCIES_MET"  #: the last parent finished; the job is queued
    SNOOZED = "SNOOZED"  #: the handler asked to run again later; back to QUEUED


HELD = frozenset({JobStatus.CLAIMED, JobStatus.RUNNING})
"""Statuses in which a worker holds a lease on the job."""

TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
"""Statuses a job ends in; only a manual retry moves it again."""

ACTIVE = frozenset({JobStatus.WAITING, JobStatus.QUEUED, *HELD})
"""Statuses of a job that is not finished (a WAITING job can be cancelled, never claimed)."""


@dataclass(frozen=True)
class Transition:
    """An event that moves a job from one of ``sources`` to ``target``."""

    event: Event
    sources: frozenset[JobStatus]
    target: JobStatus
    also: frozenset[JobStatus] = frozenset()
    """Where else the event may move the job, as the data decides (RETRIED: WAITING
    when the job has parents it still waits for)."""

    @property
    def targets(self) -> frozenset[JobStatus]:
        """Every status the event may move the job to."""
        return frozenset({self.target, *self.also})


_TRANSITION_LIST = [
    Transition(Event.CLAIMED, frozenset({JobStatus.QUEUED}), JobStatus.CLAIMED),
    Transition(Event.STARTED, frozenset({JobStatus.CLAIMED}), JobStatus.RUNNING),
    Transition(Event.SUCCEEDED, frozenset({JobStatus.RUNNING}), JobStatus.SUCCEEDED),
    Transition(Event.FAILED, HELD, JobStatus.FAILED),
    Transition(Event.RETRY_SCHEDULED, HELD, JobStatus.QUEUED),
    Transition(Event.RELEASED, HELD, JobStatus.QUEUED),
    Transition(Event.SNOOZED, HELD, JobStatus.QUEUED),
    Transition(Event.CANCELLED, ACTIVE, JobStatus.CANCELLED),
    Transition(
        Event.RETRIED,
        frozenset({JobStatus.FAILED, JobStatus.CANCELLED}),
        JobStatus.QUEUED,
        also=frozenset({JobStatus.WAITING}),
    ),
    Transition(Event.DEPENDENCIES_MET, frozenset({JobStatus.WAITING}), JobStatus.QUEUED),
]

TRANSITIONS: dict[Event, Transition] = {t.event: t for t in _TRANSITION_LIST}
"""Every allowed state change, keyed by the event that records it."""

INITIAL_EVENT = Event.ENQUEUED
"""The first event of every job; it creates the job in one of :data:`INITIAL_STATUSES`."""

INITIAL_STATUSES = frozenset({JobStatus.QUEUED, JobStatus.WAITING})
"""Where ``ENQUEUED`` puts a job: ``WAITING`` while some of its parents (``depends_on``)
have not succeeded, else ``QUEUED``. (A job whose parent already failed is created and
cancelled in the same transaction: ``ENQUEUED`` then ``CANCELLED``.)"""

ANNOTATIONS = frozenset({Event.HEARTBEAT, Event.RECOVERED, Event.TIMED_OUT})
"""Events that explain what happened without moving the job themselves.

``RECOVERED`` and ``TIMED_OUT`` are always followed, in the same transaction, by the
``RETRY_SCHEDULED`` or ``FAILED`` that does move it (or, for a recovered lease of a
job that was claimed but never started, the ``RELEASED`` that gives it back free).
"""


ANNOTATION_SOURCES: dict[Event, frozenset[JobStatus]] = {
    Event.HEARTBEAT: HELD,
    Event.RECOVERED: HELD,
    # Max runtime counts from the start: a claim that never started cannot time out.
    Event.TIMED_OUT: frozenset({JobStatus.RUNNING}),
}
"""The statuses in which each annotation may be written."""


def allowed_targets(source: JobStatus) -> frozenset[JobStatus]:
    """Return every status a job in ``source`` may move to."""
    return frozenset(
        target for t in _TRANSITION_LIST if source in t.sources for target in t.targets
    )


def is_allowed(source: JobStatus, event: Event) -> bool:
    """Tell whether ``event`` may be applied to a job in ``source``."""
    transition = TRANSITIONS.get(event)
    if transition is None:
        return source in ANNOTATION_SOURCES.get(event, frozenset())
    return source in transition.sources
