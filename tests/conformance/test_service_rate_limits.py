"""Rate limits: at most N job starts per period in a queue, per ``rate_key``.

The limit is a row in the queue-control table that every claim reads; the window
slides over whole seconds of the queue's clock (a start at second s counts through
s + period - 1). Jobs over the limit stay QUEUED and start once the window allows.
Each test pins the clock and moves it; the race tests run two claimers on their own
engines, as separate processes would.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

import sqlq_orm
from sqlq_orm import InvalidInput, JobSpec
from sqlq_orm.ops.invariants import check
from tests.support.aio_bridge import BlockingAsyncQueue
from tests.support.backends import engine_for
from tests.support.faultkit import UPDATE_JOBS_SET, Actor, PauseAfter, start_blocked
from tests.support.queue_helpers import job_row

RATE_CLAIM = UPDATE_JOBS_SET + r" status=\S+, claimed_at=.*rate_started_at="


def claimed_ids(queue, **options) -> list[int]:
    return [lease.job_id for lease in queue.claim("w", limit=50, **options)]


def starts_by_key(queue) -> dict[str | None, int]:
    j = queue.tables.jobs.c
    with queue.read() as connection:
        rows = connection.execute(
            select(j.rate_key, func.count())
            .where(j.rate_started_at.is_not(None))
            .group_by(j.rate_key)
        ).all()
    return dict(rows)


def test_a_queue_starts_at_most_its_limit_per_window_and_the_rest_wait(queue, engine, clock):
    ids = [queue.enqueue("t").id for _ in range(5)]
    queue.set_rate_limit("default", 3, 10)

    assert claimed_ids(queue, start=True) == ids[:3]
    clock.advance(9)
    assert claimed_ids(queue) == []
    assert [job_row(engine, n).status for n in ids[3:]] == ["QUEUED", "QUEUED"]
    clock.advance(5)  # the first three starts have left the window
    assert claimed_ids(queue) == ids[3:]


def test_the_window_slides_with_each_start(queue, clock):
    queue.enqueue_many([JobSpec("t") for _ in range(6)])
    queue.set_rate_limit("default", 3, 10)
    assert len(claimed_ids(queue, start=True)) == 3  # at second 0
    clock.advance(10)
    assert len(claimed_ids(queue, start=True)) == 3  # at second 10
    clock.advance(5)

    assert claimed_ids(queue) == []  # the starts of second 10 still count until 20


def test_each_rate_key_has_its_own_window_and_jobs_without_one_share_one(queue):
    queue.set_rate_limit("default", 2, 60)
    for key in ("a", "a", "a", "b", "b", "b", None, None, None):
        queue.enqueue("t", rate_key=key)

    claimed = claimed_ids(queue)

    assert len(claimed) == 6
    assert starts_by_key(queue) == {"a": 2, "b": 2, None: 2}
    assert claimed_ids(queue) == []


def test_a_full_key_does_not_hold_up_the_keys_behind_it(queue):
    queue.set_rate_limit("default", 1, 60)
    queue.enqueue("t", rate_key="busy", priority=9)
    queue.enqueue("t", rate_key="busy", priority=9)
    queue.enqueue("t", rate_key="busy", priority=9)
    quiet = queue.enqueue("t", rate_key="quiet").id

    assert len(claimed_ids(queue)) == 2
    assert queue.get_job(quiet).status == "CLAIMED"


def test_an_idle_worker_is_told_to_wait_until_the_window_frees(queue, clock):
    queue.enqueue_many([JobSpec("t") for _ in range(3)])
    queue.set_rate_limit("default", 2, 30)
    claimed_ids(queue)
    clock.advance(12)

    # A job is ready but held back: not "now" (no busy polling), but when the
    # window's oldest start leaves it.
    assert queue.seconds_until_next_job() == 18
    clock.advance(18)
    assert queue.seconds_until_next_job() <= 0  # ready now
    assert len(claimed_ids(queue)) == 1
    assert queue.seconds_until_next_job() is None


def test_a_job_released_within_the_window_waits_for_its_own_start_to_leave_it(queue, clock):
    job = queue.enqueue("t").id
    queue.set_rate_limit("default", 5, 10)
    (lease,) = queue.claim("w", start=True)
    queue.release(lease)

    # Starting it again would overwrite a start the window still counts.
    assert claimed_ids(queue) == []
    clock.advance(10)
    assert claimed_ids(queue) == [job]


def test_setting_clearing_and_reading_a_limit(queue):
    queue.enqueue_many([JobSpec("t") for _ in range(4)])
    queue.set_rate_limit("default", 1, 60)
    queue.set_rate_limit("default", 2, 60, actor="ops")  # replaces it
    (state,) = queue.queue_states()
    assert (state.rate_limit, state.rate_period, state.changed_by) == (2, 60, "ops")
    assert state.paused is False
    assert len(claimed_ids(queue)) == 2

    assert queue.clear_rate_limit("default") is True
    assert queue.clear_rate_limit("default") is False
    assert len(claimed_ids(queue)) == 2
    assert queue.queue_states()[0].rate_limit is None


def test_a_merged_claim_limits_only_the_rate_limited_queue(queue):
    queue.enqueue_many([JobSpec("t", queue="slow") for _ in range(4)])
    fast = [job.id for job in queue.enqueue_many([JobSpec("t", queue="fast") for _ in range(4)])]
    queue.set_rate_limit("slow", 1, 60)

    claimed = claimed_ids(queue, queues=["fast", "slow"])

    assert len(claimed) == 5
    assert set(fast) <= set(claimed)


def test_a_paused_rate_limited_queue_starts_nothing(queue):
    queue.enqueue("t")
    queue.set_rate_limit("default", 5, 60)
    queue.pause_queue("default")

    assert claimed_ids(queue) == []
    assert queue.seconds_until_next_job() is None
    queue.resume_queue("default")
    assert len(claimed_ids(queue)) == 1


def test_concurrency_keys_still_hold_in_a_rate_limited_queue(queue):
    for _ in range(3):
        queue.enqueue("t", concurrency_key="k", concurrency_limit=1)
    queue.set_rate_limit("default", 10, 60)

    assert len(claimed_ids(queue)) == 1
    assert check(queue) == []


def test_enqueue_many_carries_rate_keys(queue):
    jobs = queue.enqueue_many(
        [JobSpec("t", rate_key="tenant:1"), {"type": "t", "rate_key": "tenant:2"}, JobSpec("t")]
    )

    assert [queue.get_job(job.id).rate_key for job in jobs] == ["tenant:1", "tenant:2", None]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("default", 0, 10), "max_starts must be >= 1, got 0"),
        (("default", 5, 0), "per_seconds must be >= 1, got 0"),
        (("default", "5", 10), "max_starts must be an integer"),
        (("", 5, 10), "name must be a non-empty string"),
    ],
)
def test_bad_limits_are_refused_and_nothing_is_written(queue, arguments, message):
    with pytest.raises(InvalidInput, match=message):
        queue.set_rate_limit(*arguments)

    assert queue.queue_states() == []


def test_a_bad_rate_key_is_refused_and_nothing_is_written(queue):
    with pytest.raises(InvalidInput, match="rate_key is 256 characters"):
        queue.enqueue("t", rate_key="k" * 256)

    assert queue.counts_by_status().get("QUEUED", 0) == 0


# ----------------------------------------------------------- claims side by side


@pytest.fixture
def other(db_url, clock):
    """A second claimer: its own engine and queue on the same database and clock."""
    engine = engine_for(db_url)
    yield sqlq_orm.Queue(engine, clock=clock)
    engine.dispose()


def test_two_claims_racing_for_the_last_start_of_a_window_take_it_once(engine, queue, other, clock):
    # The first claim is paused right after it started a job, uncommitted. The second
    # must wait for the queue's row lock and then count that start (on SQLite it waits
    # for the one write lock): on the snapshot before it, it would count no start and
    # take the other job, due by then and ahead in claim order.
    if isinstance(queue, BlockingAsyncQueue):
        pytest.skip("pauses a statement on the test's engine: the sync flavour's race")
    queue.enqueue("t")
    queue.enqueue("t", delay=3, priority=9)
    queue.set_rate_limit("default", 1, 60)
    with PauseAfter(engine, RATE_CLAIM) as paused:
        first = Actor(lambda: queue.claim("first"), name="first")
        paused.wait()
        clock.advance(5)
        second = start_blocked(lambda: other.claim("second"), other.engine, engine)
        paused.release()

    assert len(first.result()) == 1
    assert second.result() == []
    assert starts_by_key(queue) == {None: 1}


def test_many_claimers_in_threads_never_pass_a_limit(db_url, queue, clock):
    queue.enqueue_many([JobSpec("t", rate_key="ab"[n % 2]) for n in range(40)])
    queue.set_rate_limit("default", 3, 60)
    engines = [engine_for(db_url) for _ in range(6)]
    queues = [sqlq_orm.Queue(e, clock=clock) for e in engines]

    def claim_often(claimer: sqlq_orm.Queue, name: str) -> int:
        return sum(len(claimer.claim(name, limit=2)) for _ in range(10))

    actors = [Actor(lambda q=q, n=f"w{i}": claim_often(q, n)) for i, q in enumerate(queues)]
    total = sum(actor.result() for actor in actors)
    for e in engines:
        e.dispose()

    assert total == 6
    assert starts_by_key(queue) == {"a": 3, "b": 3}
