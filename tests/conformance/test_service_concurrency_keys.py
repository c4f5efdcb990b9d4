"""Concurrency keys: at most ``concurrency_limit`` jobs of one key held at once.

The claim enforces the limit itself, in its statement (and, where claims run side by
side, in a recount before it commits); a place comes free whenever a held job leaves
CLAIMED/RUNNING, whichever way it leaves.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import func, select

import sqlq_orm
from sqlq_orm import InvalidInput, JobSpec
from sqlq_orm.ops.invariants import check
from tests.support.aio_bridge import BlockingAsyncQueue
from tests.support.backends import engine_for
from tests.support.faultkit import UPDATE_JOBS_SET, Actor, PauseAfter, start_blocked

CLAIM = UPDATE_JOBS_SET + r" status=\S+, claimed_at="


def held_by_key(queue) -> dict[str, int]:
    j = queue.tables.jobs.c
    with queue.read() as connection:
        rows = connection.execute(
            select(j.concurrency_key, func.count())
            .where(j.concurrency_key.is_not(None), j.status.in_(["CLAIMED", "RUNNING"]))
            .group_by(j.concurrency_key)
        ).all()
    return dict(rows)


def test_one_batch_takes_no_more_of_a_key_than_its_limit(queue):
    keyed = [queue.enqueue("t", concurrency_key="k", concurrency_limit=2).id for _ in range(5)]
    plain = [queue.enqueue("t").id for _ in range(3)]

    claimed = [lease.job_id for lease in queue.claim("w", limit=10)]

    assert claimed == sorted(keyed[:2] + plain)
    assert held_by_key(queue) == {"k": 2}
    assert check(queue) == []


def test_a_key_without_a_limit_runs_one_at_a_time(queue):
    first, second = (queue.enqueue("t", concurrency_key="k").id for _ in range(2))

    assert [lease.job_id for lease in queue.claim("w", limit=10)] == [first]
    assert queue.claim("w", limit=10) == []
    assert queue.get_job(second).concurrency_limit == 1


def test_a_full_key_does_not_hold_up_the_jobs_behind_it(queue):
    # The keyed jobs come first in claim order (higher priority).
    queue.enqueue("t", concurrency_key="k", priority=5)
    blocked = queue.enqueue("t", concurrency_key="k", priority=5).id
    later = queue.enqueue("t").id
    queue.claim("w")

    (lease,) = queue.claim("w")

    assert lease.job_id == later
    assert queue.get_job(blocked).status == "QUEUED"


def test_keys_are_limited_each_on_its_own(queue):
    for key in ("a", "a", "b", "b", "c"):
        queue.enqueue("t", concurrency_key=key, concurrency_limit=1)

    queue.claim("w", limit=10)

    assert held_by_key(queue) == {"a": 1, "b": 1, "c": 1}


def _succeed(queue, lease, clock):
    queue.succeed(queue.start(lease))


def _fail_with_retry(queue, lease, clock):
    queue.fail(lease, "UPSTREAM:DOWN")
    clock.advance(3600)  # its retry is due again, behind the other job


def _fail_for_good(queue, lease, clock):
    queue.fail(lease, "BAD:INPUT", retryable=False)


def _release(queue, lease, clock):
    queue.release(lease)


def _sweep(queue, lease, clock):
    clock.set(lease.lease_expires_at)
    assert queue.sweep().expired == 1


def _cancel(queue, lease, clock):
    queue.cancel(lease.job_id)


@pytest.mark.parametrize(
    "end",
    [_succeed, _fail_with_retry, _fail_for_good, _release, _sweep, _cancel],
    ids=["succeed", "fail-retry", "fail-final", "release", "sweep", "cancel"],
)
def test_a_place_comes_free_however_the_holder_leaves(queue, clock, end: Callable):
    first = queue.enqueue("t", concurrency_key="k").id
    second = queue.enqueue("t", concurrency_key="k").id
    (lease,) = queue.claim("w", limit=10)
    assert lease.job_id == first and queue.claim("w") == []

    end(queue, lease, clock)

    # A released or requeued job may be the one taken again: it is first in line.
    (taken,) = queue.claim("w")
    assert taken.job_id in {first, second}
    assert held_by_key(queue) == {"k": 1}
    assert check(queue) == []


def test_jobs_of_one_key_are_claimed_in_claim_order(queue):
    low = queue.enqueue("t", concurrency_key="k", priority=0).id
    high = queue.enqueue("t", concurrency_key="k", priority=9).id
    queue.enqueue("t", concurrency_key="k", priority=0)

    (lease,) = queue.claim("w", limit=10)

    assert lease.job_id == high
    assert queue.get_job(low).status == "QUEUED"


def test_merged_queues_respect_the_limit_across_queues(queue):
    for name in ("x", "y", "x", "y"):
        queue.enqueue("t", queue=name, concurrency_key="k", concurrency_limit=3)

    claimed = queue.claim("w", queues=["x", "y"], limit=10)

    assert len(claimed) == 3
    assert held_by_key(queue) == {"k": 3}


def test_enqueue_many_carries_keys(queue):
    ids = queue.enqueue_many(
        [JobSpec("t", concurrency_key="k", concurrency_limit=2) for _ in range(3)]
        + [{"type": "t", "concurrency_key": "other"} for _ in range(2)]
    )

    queue.claim("w", limit=10)

    assert held_by_key(queue) == {"k": 2, "other": 1}
    job = queue.get_job(ids[0])
    assert (job.concurrency_key, job.concurrency_limit) == ("k", 2)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"concurrency_limit": 2}, "concurrency_limit=2 needs a concurrency_key"),
        ({"concurrency_key": "k", "concurrency_limit": 0}, "concurrency_limit must be >= 1"),
        ({"concurrency_key": "k", "concurrency_limit": "2"}, "concurrency_limit must be an int"),
        ({"concurrency_key": ""}, "concurrency_key must be a non-empty string"),
        ({"concurrency_key": "k" * 256}, "concurrency_key is 256 characters"),
        ({"concurrency_key": 42}, "concurrency_key must be a non-empty string, got 42"),
    ],
)
def test_bad_keys_and_limits_are_refused_and_nothing_is_written(queue, arguments, message):
    with pytest.raises(InvalidInput, match=message):
        queue.enqueue("t", **arguments)
    with pytest.raises(InvalidInput, match=f"job #1 of enqueue_many: {message}"):
        queue.enqueue_many([{"type": "t"}, {"type": "t", **arguments}])

    assert queue.counts_by_status().get("QUEUED", 0) == 0


# ----------------------------------------------------------- claims side by side


@pytest.fixture
def other(db_url, clock):
    """A second claimer: its own engine and queue on the same database and clock."""
    engine = engine_for(db_url)
    yield sqlq_orm.Queue(engine, clock=clock)
    engine.dispose()


def test_two_claims_racing_for_the_last_place_of_a_key_take_it_once(engine, queue, other):
    # The first claim is paused after its statement, uncommitted; the second one's
    # snapshot cannot see that claim, so its statement takes the other job of the key.
    # The recount before commit must catch it (on SQLite the second claim simply waits
    # for the first: one writer at a time).
    if isinstance(queue, BlockingAsyncQueue):
        pytest.skip("pauses a statement on the test's engine: the sync flavour's race")
    for _ in range(2):
        queue.enqueue("t", concurrency_key="k", concurrency_limit=1)
    with PauseAfter(engine, CLAIM) as paused:
        first = Actor(lambda: queue.claim("first"), name="first")
        paused.wait()
        second = start_blocked(lambda: other.claim("second"), other.engine, engine)
        paused.release()

    claimed = first.result() + second.result()

    assert len(claimed) == 1
    assert held_by_key(queue) == {"k": 1}
    assert check(queue) == []


def test_many_claimers_in_threads_never_pass_a_limit(db_url, queue, clock):
    keys = ["a", "b", "c"]
    queue.enqueue_many(
        [JobSpec("t", concurrency_key=keys[n % 3], concurrency_limit=2) for n in range(60)]
        + [JobSpec("t") for _ in range(20)]
    )
    engines = [engine_for(db_url) for _ in range(6)]
    queues = [sqlq_orm.Queue(e, clock=clock) for e in engines]

    def claim_until_dry(claimer: sqlq_orm.Queue, name: str) -> int:
        total = 0
        for _ in range(40):
            total += len(claimer.claim(name, limit=3))
        return total

    actors = [Actor(lambda q=q, n=f"w{i}": claim_until_dry(q, n)) for i, q in enumerate(queues)]
    total = sum(actor.result() for actor in actors)
    for e in engines:
        e.dispose()

    assert total == 20 + 3 * 2
    assert held_by_key(queue) == {"a": 2, "b": 2, "c": 2}
    assert check(queue) == []


# ------------------------------------------------- mixed limits on one key (issue 23.7)


def test_a_held_job_with_a_stricter_limit_holds_its_key_to_that_limit(queue):
    strict = queue.enqueue("t", concurrency_key="k", concurrency_limit=1).id
    (held,) = queue.claim("w", start=True)
    loose = [queue.enqueue("t", concurrency_key="k", concurrency_limit=3).id for _ in range(2)]

    assert queue.claim("w", limit=5) == []  # the held job's limit of 1 wins
    assert check(queue) == []
    queue.succeed(held)
    assert sorted(lease.job_id for lease in queue.claim("w", limit=5)) == loose
    assert strict not in loose and check(queue) == []


def test_a_candidate_with_a_stricter_limit_waits_for_the_held_jobs(queue):
    queue.enqueue_many([JobSpec("t", concurrency_key="k", concurrency_limit=3)] * 2)
    assert len(queue.claim("w", limit=5)) == 2
    queue.enqueue("t", concurrency_key="k", concurrency_limit=1)

    assert queue.claim("w", limit=5) == []  # its own limit of 1: the key is full for it
    assert held_by_key(queue) == {"k": 2}
    assert check(queue) == []


def test_in_one_batch_the_strictest_limit_so_far_bounds_the_key(queue):
    first, _strict, _after = (
        queue.enqueue("t", concurrency_key="k", concurrency_limit=limit).id for limit in (3, 1, 3)
    )

    assert [lease.job_id for lease in queue.claim("w", limit=5)] == [first]
    assert check(queue) == []


# --------------------------- a limit counts leases, not live code (issue 23.8, README)


def test_a_swept_lease_frees_its_place_while_the_old_handler_may_still_run(queue, clock):
    first = queue.enqueue("t", concurrency_key="k").id
    (old,) = queue.claim("w1", start=True, lease_seconds=10)  # its handler is running...
    second = queue.enqueue("t", concurrency_key="k").id
    assert queue.claim("w2") == []  # the key's one place is held

    clock.advance(10 + 1)  # ...but its worker stopped heartbeating (frozen, cut off)
    assert queue.sweep().expired == 1

    # The place is free again though the old handler may still be running: a new
    # job of the key is claimed beside it. Only the queue's rows are fenced.
    (new,) = queue.claim("w2", start=True)
    assert new.job_id in (first, second)
    with pytest.raises(sqlq_orm.LeaseLost):
        queue.succeed(old)  # the old handler's outcome is refused, nothing written
    assert held_by_key(queue) == {"k": 1}
    assert check(queue) == []
