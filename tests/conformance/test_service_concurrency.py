"""Many claimers and many enqueuers at once, as real processes and real threads.

Nothing here depends on timing: a barrier starts everyone together, and the
assertions are about what the database holds afterwards (every job claimed exactly
once, one job per dedupe key, one event per transition).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlq_orm import PinnedClock, Queue
from tests.conftest import PINNED_START
from tests.support.backends import engine_for
from tests.support.queue_helpers import (
    assert_histories_are_legal,
    count_events,
    row_counts,
)

BACKLOG = 300
CLAIMERS = 4
CLAIM_LIMIT = 7
ENQUEUERS = 4

# fork: the children inherit the test module at once (spawn would re-import it and
# SQLAlchemy in each child); the engine's fork guard drops inherited connections.
_CONTEXT = multiprocessing.get_context("fork")


def _claim_until_empty(
    db_url: str, worker_id: str, queues: list[str], start: bool, barrier: Any
) -> list[int]:
    """Claim batches until a claim comes back empty; return the ids claimed."""
    engine = engine_for(db_url)
    queue = Queue(engine, clock=PinnedClock(PINNED_START))
    claimed: list[int] = []
    barrier.wait()
    while leases := queue.claim(worker_id, queues=queues, limit=CLAIM_LIMIT, start=start):
        claimed.extend(lease.job_id for lease in leases)
    engine.dispose()
    return claimed


def _claim_in_child(db_url: str, worker_id: str, queues: list[str], barrier: Any, out: Any):
    out.put((worker_id, _claim_until_empty(db_url, worker_id, queues, False, barrier)))


def _enqueue_in_child(db_url: str, key: str, barrier: Any, out: Any) -> None:
    engine = engine_for(db_url)
    queue = Queue(engine, clock=PinnedClock(PINNED_START))
    barrier.wait()
    results = [queue.enqueue("sync", dedupe_key=key) for _ in range(5)]
    engine.dispose()
    out.put([(r.id, r.created) for r in results])


def _run_processes(target: Callable[..., None], args_for: list[tuple], barrier: Any, out: Any):
    processes = [_CONTEXT.Process(target=target, args=(*args, barrier, out)) for args in args_for]
    for process in processes:
        process.start()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(60)
        assert process.exitcode == 0, f"child exited with {process.exitcode}"
    return results


def _run_threads(target: Callable[[], Any], count: int) -> list[Any]:
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = target()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return results


def _assert_each_claimed_exactly_once(engine, ids: list[int], claims: dict[str, list[int]]):
    every_claim = [job_id for claimed in claims.values() for job_id in claimed]
    assert Counter(every_claim).most_common(1)[0][1] == 1, "a job was claimed twice"
    assert sorted(every_claim) == sorted(ids), "a job was never claimed"
    assert count_events(engine, "CLAIMED") == len(ids)
    with engine.connect() as connection:
        holders = dict(connection.exec_driver_sql("SELECT id, claimed_by FROM sqlq_jobs").all())
    for worker_id, claimed in claims.items():
        assert all(holders[job_id] == worker_id for job_id in claimed)


def test_claimer_processes_take_every_job_exactly_once(db_url, engine, queue):
    # Two queues with mixed priorities: the claim merges one pick per queue.
    ids = queue.enqueue_many(
        [{"type": "render", "queue": "ab"[n % 2], "priority": n % 3} for n in range(BACKLOG)]
    )
    barrier = _CONTEXT.Barrier(CLAIMERS)
    out = _CONTEXT.Queue()
    args = [(db_url, f"proc-{n}", ["a", "b"]) for n in range(CLAIMERS)]

    claims = dict(_run_processes(_claim_in_child, args, barrier, out))

    _assert_each_claimed_exactly_once(engine, ids, claims)
    assert queue.counts_by_status()["CLAIMED"] == BACKLOG
    assert queue.claim("late-worker", queues=["a", "b"]) == []
    assert assert_histories_are_legal(engine) == BACKLOG


def test_claimer_threads_take_every_job_exactly_once_and_start_each_once(engine, queue, db_url):
    ids = queue.enqueue_many([{"type": "render", "priority": n % 5} for n in range(BACKLOG)])
    barrier = threading.Barrier(CLAIMERS)
    names = iter(f"thread-{n}" for n in range(CLAIMERS))
    lock = threading.Lock()

    def claim_all() -> tuple[str, list[int]]:
        with lock:
            worker_id = next(names)
        return worker_id, _claim_until_empty(db_url, worker_id, ["default"], True, barrier)

    claims = dict(_run_threads(claim_all, CLAIMERS))

    _assert_each_claimed_exactly_once(engine, ids, claims)
    assert queue.counts_by_status()["RUNNING"] == BACKLOG
    assert count_events(engine, "STARTED") == BACKLOG
    assert row_counts(engine)["sqlq_job_attempts"] == BACKLOG
    assert assert_histories_are_legal(engine) == BACKLOG


def test_concurrent_enqueuer_processes_with_one_dedupe_key_make_one_job(db_url, engine, queue):
    barrier = _CONTEXT.Barrier(ENQUEUERS)
    out = _CONTEXT.Queue()

    results = _run_processes(
        _enqueue_in_child, [(db_url, "nightly-report")] * ENQUEUERS, barrier, out
    )

    outcomes = [outcome for child in results for outcome in child]
    assert len({job_id for job_id, _ in outcomes}) == 1
    assert sum(created for _, created in outcomes) == 1
    assert row_counts(engine)["sqlq_jobs"] == 1
    assert count_events(engine, "ENQUEUED") == 1


def test_concurrent_enqueuer_threads_with_one_dedupe_key_make_one_job(engine, queue):
    barrier = threading.Barrier(8)

    def enqueue() -> tuple[int, bool]:
        barrier.wait()
        result = queue.enqueue("sync", dedupe_key="nightly-report")
        return result.id, result.created

    outcomes = _run_threads(enqueue, 8)

    assert len({job_id for job_id, _ in outcomes}) == 1
    assert sum(created for _, created in outcomes) == 1
    assert row_counts(engine)["sqlq_jobs"] == 1
    assert count_events(engine, "ENQUEUED") == 1
    (lease,) = queue.claim("worker-a", start=True)
    queue.succeed(lease)
    again = queue.enqueue("sync", dedupe_key="nightly-report")
    assert again.created and again.id != outcomes[0][0]
