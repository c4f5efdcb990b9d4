"""Uniqueness over a period: a ``dedupe_key`` that also holds for ``dedupe_period``
seconds after its job SUCCEEDED or FAILED.

Conflicts behave as for an unfinished holder: the same type and queue get the held
job back (``created=False``), another type or queue raises ``DedupeConflict``, and
nothing is written either way.
"""

from __future__ import annotations

import pytest

from sqlq_orm import DedupeConflict, InvalidInput, JobSpec
from tests.support.queue_helpers import row_counts


def finish(queue, *, failed: bool = False) -> None:
    (lease,) = queue.claim("w", start=True)
    if failed:
        queue.fail(lease, "BROKEN:DOWN", retryable=False)
    else:
        queue.succeed(lease)


def test_a_succeeded_job_holds_its_key_for_its_period(queue, engine, clock):
    first = queue.enqueue("digest", dedupe_key="digest:7", dedupe_period=3600)
    finish(queue)
    clock.advance(3599)

    again = queue.enqueue("digest", dedupe_key="digest:7", dedupe_period=3600)

    assert (again.id, again.created) == (first.id, False)
    assert row_counts(engine)["sqlq_jobs"] == 1
    clock.advance(1)  # the period is over
    later = queue.enqueue("digest", dedupe_key="digest:7", dedupe_period=3600)
    assert later.created and later.id != first.id


def test_a_failed_job_holds_its_key_and_a_cancelled_one_releases_it(queue):
    failed = queue.enqueue("digest", dedupe_key="f", dedupe_period=60, max_retries=0)
    finish(queue, failed=True)
    assert queue.get_job(failed.id).status == "FAILED"
    assert queue.enqueue("digest", dedupe_key="f").created is False

    cancelled = queue.enqueue("digest", dedupe_key="c", dedupe_period=60)
    queue.cancel(cancelled.id)
    assert queue.enqueue("digest", dedupe_key="c").created is True


def test_a_held_key_of_another_type_or_queue_is_a_conflict_and_writes_nothing(queue, engine):
    held = queue.enqueue("digest", dedupe_key="k", dedupe_period=60)
    finish(queue)

    with pytest.raises(DedupeConflict) as raised:
        queue.enqueue("report", dedupe_key="k")
    with pytest.raises(DedupeConflict):
        queue.enqueue("digest", dedupe_key="k", queue="other")

    assert str(held.id) in str(raised.value)
    assert row_counts(engine)["sqlq_jobs"] == 1


def test_without_a_period_a_finished_job_frees_its_key_at_once(queue):
    first = queue.enqueue("digest", dedupe_key="k")
    finish(queue)

    assert queue.enqueue("digest", dedupe_key="k").id != first.id


def test_enqueue_many_respects_a_held_key(queue):
    held = queue.enqueue("digest", dedupe_key="k", dedupe_period=60)
    finish(queue)

    jobs = queue.enqueue_many(
        [JobSpec("digest", dedupe_key="k"), JobSpec("digest", dedupe_key="n", dedupe_period=5)]
    )

    assert [(job.id, job.created) for job in jobs][0] == (held.id, False)
    assert jobs[1].created and queue.get_job(jobs[1].id).dedupe_period == 5


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"dedupe_period": 60}, "dedupe_period=60 needs a dedupe_key"),
        ({"dedupe_key": "k", "dedupe_period": 0}, "dedupe_period must be >= 1, got 0"),
        ({"dedupe_key": "k", "dedupe_period": "60"}, "dedupe_period must be an integer"),
    ],
)
def test_bad_periods_are_refused_and_nothing_is_written(queue, engine, arguments, message):
    with pytest.raises(InvalidInput, match=message):
        queue.enqueue("digest", **arguments)

    assert row_counts(engine)["sqlq_jobs"] == 0
