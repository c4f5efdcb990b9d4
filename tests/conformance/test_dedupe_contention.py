"""Dedupe enqueues racing in real threads: no raw deadlock, no lost savepoint.

Several threads enqueue the same fresh dedupe keys at the same moment (a barrier per
round), each in its own order. Every call must return, each key must name one job,
and every thread must get that job's id. Where a caller's ``session=`` transaction is
chosen as a deadlock victim, the caller is told plainly that its transaction was
rolled back (:class:`~sqlq_orm.TransactionRolledBack`), not given the driver's error
or MariaDB's ``SAVEPOINT ... does not exist``. SQLite has one writer: no deadlocks.
"""

from __future__ import annotations

import random
import threading

import pytest
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm import JobSpec, TransactionRolledBack

THREADS = 4
ROUNDS = 25
KEYS = 4


@pytest.fixture
def queue(engine):
    return sqlq_orm.Queue(engine)


def test_concurrent_batches_of_the_same_dedupe_keys_all_get_the_one_job(queue):
    barrier = threading.Barrier(THREADS)
    got: dict[tuple[int, str], set[int]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueue_rounds(seed: int) -> None:
        order = random.Random(seed)
        for round_number in range(ROUNDS):
            keys = [f"r{round_number}-k{k}" for k in range(KEYS)]
            order.shuffle(keys)
            barrier.wait()
            try:
                if seed % 2:
                    jobs = queue.enqueue_many([JobSpec("t", dedupe_key=key) for key in keys])
                else:
                    jobs = [queue.enqueue("t", dedupe_key=key) for key in keys]
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                with lock:
                    errors.append(exc)
                continue
            with lock:
                for key, job in zip(keys, jobs, strict=True):
                    got.setdefault((round_number, key), set()).add(job.id)

    threads = [threading.Thread(target=enqueue_rounds, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert errors == []
    assert len(got) == ROUNDS * KEYS
    assert all(len(ids) == 1 for ids in got.values())  # one job per key, seen by all
    assert queue.counts_by_status()["QUEUED"] == ROUNDS * KEYS


def test_a_session_chosen_as_deadlock_victim_is_told_its_transaction_was_rolled_back(queue):
    if queue.dialect.name == "sqlite":
        pytest.skip("SQLite: one writer at a time, no deadlocks")
    first, second = Session(queue.engine), Session(queue.engine)
    try:
        queue.enqueue("t", dedupe_key="a", session=first)
        queue.enqueue("t", dedupe_key="b", session=second)
        crossing = threading.Thread(
            target=lambda: outcome.append(_attempt(queue, "b", first)), daemon=True
        )
        outcome: list[object] = []
        crossing.start()  # waits for the second session's "b"
        crossing.join(0.5)
        here = _attempt(queue, "a", second)  # waits for the first's "a": a deadlock
        crossing.join(30)
        results = [here, *outcome]
        victims = [r for r in results if isinstance(r, TransactionRolledBack)]
        assert len(victims) == 1, results
        assert "rolled back your whole transaction" in str(victims[0])
        assert "run the transaction again" in str(victims[0])
        assert [r for r in results if not isinstance(r, TransactionRolledBack)][0].created
    finally:
        for session in (first, second):
            session.rollback()
            session.close()


def _attempt(queue, key: str, session: Session) -> object:
    try:
        return queue.enqueue("t", dedupe_key=key, session=session)
    except TransactionRolledBack as exc:
        session.rollback()  # let the other transaction go on
        return exc


PERIOD_ROUNDS = 30
PRODUCERS = 3


def test_a_key_held_for_a_period_admits_no_new_job_while_producers_race_the_finish(queue):
    """Issue 34 item 3: on PostgreSQL and MariaDB an enqueue's insert waited for the
    holder's finish to commit, then went in, although the finished job kept the key for
    its period (69 of 487 jobs on PostgreSQL). Producers hammer one key per round while
    a worker thread claims and finishes its job: each key must name one job only."""
    go = threading.Barrier(PRODUCERS + 1)
    stop = threading.Event()
    errors: list[BaseException] = []
    created: dict[str, list[int]] = {}
    lock = threading.Lock()

    def produce(key: str) -> None:
        while not stop.is_set():
            job = queue.enqueue("t", dedupe_key=key, dedupe_period=3600)
            if job.created:
                with lock:
                    created.setdefault(key, []).append(job.id)

    def producer() -> None:
        for round_number in range(PERIOD_ROUNDS):
            go.wait()
            try:
                produce(f"held-{round_number}")
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)
            go.wait()

    threads = [threading.Thread(target=producer, daemon=True) for _ in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for round_number in range(PERIOD_ROUNDS):
        key = f"held-{round_number}"
        first = queue.enqueue("t", dedupe_key=key, dedupe_period=3600)
        created[key] = [first.id]
        stop.clear()
        go.wait()  # the producers start hammering the key
        (lease,) = queue.claim("finisher", start=True)
        if round_number % 2:
            queue.succeed(lease)
        else:
            queue.fail(lease, "APP:BROKEN", retryable=False)
        for _ in range(3):  # a few enqueues after the finish, then the next round
            queue.enqueue("t", dedupe_key=key, dedupe_period=3600)
        stop.set()
        go.wait()
    for thread in threads:
        thread.join(60)

    assert errors == []
    duplicated = {key: ids for key, ids in created.items() if len(ids) > 1}
    assert duplicated == {}, f"{len(duplicated)} of {PERIOD_ROUNDS} keys got a second job"
    assert queue.counts_by_status().get("QUEUED", 0) == 0
