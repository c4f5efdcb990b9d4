"""The transition table, checked pair by pair against a hand-written specification."""

from __future__ import annotations

import itertools

import pytest

from sqlq_orm.schema.states import (
    ACTIVE,
    ANNOTATION_SOURCES,
    ANNOTATIONS,
    HELD,
    INITIAL_EVENT,
    INITIAL_STATUSES,
    TERMINAL,
    TRANSITIONS,
    Event,
    JobStatus,
    allowed_targets,
    is_allowed,
)

W, Q, C, R = JobStatus.WAITING, JobStatus.QUEUED, JobStatus.CLAIMED, JobStatus.RUNNING
S, F, X = JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED

# (status the job is in, event) -> status it moves to; None: written, but moves nothing.
SPEC: dict[tuple[JobStatus, Event], JobStatus | None] = {
    (Q, Event.CLAIMED): C,
    (C, Event.STARTED): R,
    (R, Event.SUCCEEDED): S,
    (C, Event.FAILED): F,
    (R, Event.FAILED): F,
    (C, Event.RETRY_SCHEDULED): Q,
    (R, Event.RETRY_SCHEDULED): Q,
    (C, Event.RELEASED): Q,
    (R, Event.RELEASED): Q,
    (C, Event.SNOOZED): Q,
    (R, Event.SNOOZED): Q,
    (W, Event.DEPENDENCIES_MET): Q,
    (W, Event.CANCELLED): X,
    (Q, Event.CANCELLED): X,
    (C, Event.CANCELLED): X,
    (R, Event.CANCELLED): X,
    (F, Event.RETRIED): Q,
    (X, Event.RETRIED): Q,
    (C, Event.HEARTBEAT): None,
    (R, Event.HEARTBEAT): None,
    (C, Event.RECOVERED): None,
    (R, Event.RECOVERED): None,
    (R, Event.TIMED_OUT): None,
}

EVERY_PAIR = list(itertools.product(JobStatus, Event))


@pytest.mark.parametrize(("status", "event"), EVERY_PAIR, ids=lambda v: str(v))
def test_an_event_is_allowed_exactly_where_the_spec_lists_it(status, event):
    assert is_allowed(status, event) == ((status, event) in SPEC)


@pytest.mark.parametrize(("status", "event"), list(SPEC), ids=lambda v: str(v))
def test_each_allowed_event_moves_the_job_where_the_spec_says(status, event):
    target = SPEC[(status, event)]
    if target is None:
        assert event in ANNOTATIONS and event not in TRANSITIONS
    else:
        assert TRANSITIONS[event].target is target


def test_every_event_is_the_initial_one_a_transition_or_an_annotation():
    kinds = [
        (event is INITIAL_EVENT) + (event in TRANSITIONS) + (event in ANNOTATIONS)
        for event in Event
    ]
    assert kinds == [1] * len(Event)
    assert set(ANNOTATION_SOURCES) == set(ANNOTATIONS)


def test_enqueued_is_never_allowed_on_an_existing_job():
    assert not any(is_allowed(status, Event.ENQUEUED) for status in JobStatus)


@pytest.mark.parametrize(
    ("source", "targets"),
    [
        (W, {Q, X}),
        (Q, {C, X}),
        (C, {R, F, Q, X}),
        (R, {S, F, Q, X}),
        (S, set()),
        (F, {Q, W}),
        (X, {Q, W}),
    ],
)
def test_allowed_targets_of_each_status(source, targets):
    assert allowed_targets(source) == targets


def test_status_groups_partition_the_statuses():
    assert {C, R} == HELD and {S, F, X} == TERMINAL and {W, Q, C, R} == ACTIVE
    assert set(JobStatus) == ACTIVE | TERMINAL and not ACTIVE & TERMINAL


def test_enqueued_creates_a_job_queued_or_waiting_for_its_parents():
    assert {Q, W} == INITIAL_STATUSES


def test_a_waiting_job_is_never_claimed_and_only_its_parents_queue_it():
    assert not is_allowed(W, Event.CLAIMED)
    assert [t.event for t in TRANSITIONS.values() if W in t.sources and t.target is Q] == [
        Event.DEPENDENCIES_MET
    ]


def test_a_succeeded_job_can_never_move_again():
    assert not any(is_allowed(S, event) for event in Event)
