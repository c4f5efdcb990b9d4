"""One job's bad outcome never costs the other jobs of its batch theirs (issue 34,
items 2 and 4).

Ten handlers finish together behind a barrier, so the completer records their
outcomes in one group; one of them carries a bad value: a ``retry_in`` that is not a
number of seconds, a task backoff giving NaN, a result nested too deep. That one job
fails with its own clear code; every other job keeps its outcome and runs once.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

import pytest

import sqlq_orm
from sqlq_orm import HandlerRegistry, JobError, JobResult, Worker
from sqlq_orm.worker import outcomes
from tests.support.worker_helpers import job_row

FAST = {"poll_interval": 0.05, "sweep_interval": None, "install_signal_handlers": False}
PEERS = 9


def run_together(queue: sqlq_orm.Queue, registry: HandlerRegistry) -> sqlq_orm.WorkerStats:
    """Run every queued job once, ten at a time, in a burst worker."""
    return Worker(queue, registry, concurrency=PEERS + 1, burst=True, **FAST).run()


def batch_with_one_bad(bad: Any) -> tuple[HandlerRegistry, Counter[str]]:
    """``final`` jobs fail for good, ``done`` jobs succeed, ``bad`` runs ``bad()``;
    all wait for each other, so their outcomes reach the completer together."""
    barrier = threading.Barrier(PEERS + 1, timeout=30)
    runs: Counter[str] = Counter()

    def handler(kind: str) -> Any:
        def run(ctx: sqlq_orm.JobContext) -> Any:
            runs[f"{kind}:{ctx.job_id}"] += 1
            barrier.wait()
            if kind == "final":
                raise JobError("APP:DECLINED", "card declined", retryable=False)
            if kind == "bad":
                return bad()
            return None

        return run

    registry = HandlerRegistry({kind: handler(kind) for kind in ("final", "done", "bad")})
    return registry, runs


def enqueue_batch(queue: sqlq_orm.Queue) -> tuple[list[int], list[int], int]:
    final = [queue.enqueue("final", max_retries=3).id for _ in range(PEERS // 2)]
    done = [queue.enqueue("done", max_retries=0).id for _ in range(PEERS - len(final))]
    bad = queue.enqueue("bad", max_retries=3).id
    return final, done, bad


def assert_peers_kept_their_outcomes(
    queue: sqlq_orm.Queue, final: list[int], done: list[int], runs: Counter[str]
) -> None:
    for job_id in final:
        row = job_row(queue, job_id)
        assert (row.status, row.error_code) == ("FAILED", "APP:DECLINED"), job_id
        assert runs[f"final:{job_id}"] == 1  # retryable=False: never twice
    for job_id in done:
        assert job_row(queue, job_id).status == "SUCCEEDED", job_id


def raising(retry_in: object) -> Any:
    def bad() -> None:
        raise JobError("APP:LATER", "try later", retry_in=retry_in)  # type: ignore[arg-type]

    return bad


@pytest.mark.parametrize(
    "retry_in", [-1, math.nan, math.inf, "soon", 1e12], ids=["neg", "nan", "inf", "str", "1e12"]
)
def test_a_bad_retry_in_fails_its_own_job_and_no_other_loses_its_outcome(queue, retry_in):
    registry, runs = batch_with_one_bad(raising(retry_in))
    final, done, bad = enqueue_batch(queue)

    run_together(queue, registry)

    row = job_row(queue, bad)
    assert (row.status, row.error_code) == ("FAILED", outcomes.INVALID_RETRY_IN)
    assert "retry_in must be" in row.error_detail and "APP:LATER" in row.error_detail
    assert runs[f"bad:{bad}"] == 1
    assert_peers_kept_their_outcomes(queue, final, done, runs)


def test_a_group_write_the_database_refuses_is_recorded_job_by_job(queue, monkeypatch):
    # With the check where retry_in is produced taken away, the bad value reaches the
    # completer's group write, which the queue refuses whole: the completer must then
    # record each outcome on its own and fail the bad job alone.
    monkeypatch.setattr(outcomes, "checked_retry_in", lambda value: value)
    registry, runs = batch_with_one_bad(raising(math.nan))
    final, done, bad = enqueue_batch(queue)

    run_together(queue, registry)

    row = job_row(queue, bad)
    assert (row.status, row.error_code) == ("FAILED", outcomes.OUTCOME_REFUSED)
    assert "its failure APP:LATER" in row.error_detail and "retry_in" in row.error_detail
    assert_peers_kept_their_outcomes(queue, final, done, runs)


class NotANumberBackoff:
    """A custom backoff (anything with ``delay_seconds``) with a bug."""

    def delay_seconds(self, retry_number: int, rng: Any = None) -> float:
        return math.nan


def test_a_task_backoff_giving_nan_fails_its_own_job_and_no_other(queue):
    barrier = threading.Barrier(PEERS + 1, timeout=30)
    registry = sqlq_orm.TaskRegistry(queue)
    runs: Counter[str] = Counter()

    @registry.task(name="flaky", max_retries=3, backoff=NotANumberBackoff())
    def flaky() -> None:
        barrier.wait()
        raise ConnectionError("upstream down")

    @registry.task(name="final", max_retries=3, no_retry_on=(ValueError,))
    def final_task(n: int) -> None:
        runs[f"final:{n}"] += 1
        barrier.wait()
        raise ValueError("declined")

    bad = flaky.enqueue().id
    final = [final_task.enqueue(n).id for n in range(PEERS)]

    run_together(queue, registry)

    row = job_row(queue, bad)
    assert (row.status, row.error_code) == ("FAILED", outcomes.INVALID_BACKOFF)
    assert "nan" in row.error_detail and "NETWORK:UNHANDLED" in row.error_detail
    for n, job_id in enumerate(final):
        row = job_row(queue, job_id)
        assert (row.status, row.error_code) == ("FAILED", "EXCEPTION:VALUE_ERROR")
        assert runs[f"final:{n}"] == 1


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_result_nested_too_deep_fails_its_own_job_and_no_other(queue):
    registry, runs = batch_with_one_bad(lambda: JobResult(nested(40)))
    final, done, bad = enqueue_batch(queue)

    run_together(queue, registry)

    row = job_row(queue, bad)
    assert (row.status, row.error_code) == ("FAILED", outcomes.INVALID_RESULT)
    assert "nested 40 levels deep" in row.error_detail and "at most 31" in row.error_detail
    assert_peers_kept_their_outcomes(queue, final, done, runs)


def test_a_result_the_database_itself_refuses_fails_its_job_and_is_not_retried_forever(
    queue, monkeypatch
):
    # The library's depth check taken away: MariaDB's own JSON CHECK (4025) refuses the
    # result, an error that would come back every time. The completer used to retry it
    # forever (later outcomes never recorded, SIGTERM ignored); now that job fails
    # alone with INTERNAL:OUTCOME_REFUSED. The other databases store the result.
    monkeypatch.setattr("sqlq_orm.core.validation.require_json_depth", lambda *_: None)
    registry, runs = batch_with_one_bad(lambda: JobResult(nested(40)))
    final, done, bad = enqueue_batch(queue)

    run_together(queue, registry)

    row = job_row(queue, bad)
    if queue.dialect.name == "mysql":
        assert (row.status, row.error_code) == ("FAILED", outcomes.OUTCOME_REFUSED)
        assert "recording its success failed: IntegrityError" in row.error_detail
    else:
        assert row.status == "SUCCEEDED"
    assert_peers_kept_their_outcomes(queue, final, done, runs)
