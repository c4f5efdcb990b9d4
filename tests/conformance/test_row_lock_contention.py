"""A job row held locked by another transaction costs at most that job's own renewal.

The pattern the README shows, an app transaction that enqueues a child with
``session=`` and ``depends_on=[P]``, keeps a lock on P's row until it commits. Here a
real second connection (the app's session) holds that lock while the queue renews
leases, enqueues other children of P and claims jobs of P's concurrency key: none of
them may wait for the app's transaction. On SQLite the app's transaction holds the
database's only write lock, so every writer waits for it (nothing to test: the README
says to keep such transactions short).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.orm import Session

import sqlq_orm
from sqlq_orm import JobStatus
from sqlq_orm.ops.invariants import check

PROMPTLY = 5.0
"""Seconds a call gets before it counts as waiting for the app's transaction."""


@pytest.fixture
def queue(engine, clock):
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite: the app's transaction holds the only write lock; all writers wait")
    return sqlq_orm.Queue(engine, clock=clock)


@contextmanager
def app_transaction_enqueueing_a_child_of(queue, parent: int) -> Iterator[int]:
    """An app transaction, left open, that enqueued a child of ``parent``."""
    with Session(queue.engine) as session:
        child = queue.enqueue("child", session=session, depends_on=[parent]).id
        yield child
        session.commit()


def promptly(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread; fail if it has not returned within :data:`PROMPTLY`."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PROMPTLY)
    assert not thread.is_alive(), "waited for the row the app transaction holds"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_locked_parent_is_passed_over_by_the_renewal_and_the_rest_renewed(queue, clock):
    parent, other = queue.enqueue("parent").id, queue.enqueue("other").id
    leases = {lease.job_id: lease for lease in queue.claim("w", limit=2, start=True)}
    clock.advance(5)

    with app_transaction_enqueueing_a_child_of(queue, parent):
        renewed = promptly(lambda: queue.heartbeat_many(list(leases.values())))

    assert list(renewed) == [other]  # the parent: passed over, not renewed this time
    assert renewed[other] > leases[parent].lease_expires_at
    assert list(queue.heartbeat_many([leases[parent]])) == [parent]  # renewed once free


def test_the_single_heartbeat_of_a_locked_job_waits_for_it(queue, clock):
    parent = queue.enqueue("parent").id
    (lease,) = queue.claim("w", start=True)

    with app_transaction_enqueueing_a_child_of(queue, parent):
        waiting = threading.Thread(target=queue.heartbeat, args=(lease,), daemon=True)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive()  # only this job's renewal waits
    waiting.join(PROMPTLY)
    assert not waiting.is_alive()


def test_a_second_child_of_a_parent_is_enqueued_while_the_first_is_uncommitted(queue):
    parent = queue.enqueue("parent").id
    queue.claim("w", start=True)
    queue.enqueue("first child", depends_on=[parent])  # the parent is flagged

    with app_transaction_enqueueing_a_child_of(queue, parent) as child:
        other = promptly(lambda: queue.enqueue("second child", depends_on=[parent]).id)

    assert queue.get_job(other).status == queue.get_job(child).status == JobStatus.WAITING.value
    assert check(queue) == []


def test_a_locked_running_job_of_a_key_does_not_stall_claims_of_that_key(queue):
    parent = queue.enqueue("parent", concurrency_key="k", concurrency_limit=2).id
    queue.claim("w", start=True)
    plain = queue.enqueue("plain").id
    keyed = queue.enqueue("keyed", concurrency_key="k", concurrency_limit=2).id

    with app_transaction_enqueueing_a_child_of(queue, parent):
        claimed = promptly(lambda: queue.claim("w", limit=5))

    assert sorted(lease.job_id for lease in claimed) == [plain, keyed]
    assert check(queue) == []


def test_the_parent_still_cannot_end_unseen_while_its_child_is_uncommitted(queue):
    parent = queue.enqueue("parent").id
    (lease,) = queue.claim("w", start=True)

    with app_transaction_enqueueing_a_child_of(queue, parent) as child:
        ending = threading.Thread(target=queue.succeed, args=(lease,), daemon=True)
        ending.start()
        ending.join(1.0)
        assert ending.is_alive()  # the share lock holds the parent's end off
    ending.join(PROMPTLY)

    job = queue.get_job(child)
    assert (job.status, job.pending_parents) == (JobStatus.QUEUED.value, 0)
    assert check(queue) == []
