"""The invariant checker: silent on every history the service can produce, and each
invariant catches a row broken on purpose (with raw SQL, constraints switched off)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

import sqlq_orm
from sqlq_orm import JobStatus, RetryPolicy
from sqlq_orm.ops.invariants import INVARIANTS, Violation, check, replay_problem
from tests.support.faultkit import UPDATE_JOBS_SET, Actor, PauseAfter, unchecked

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")


@pytest.fixture
def queue(engine, clock):
    # No jitter: the tests below move the clock by exact amounts.
    return sqlq_orm.Queue(engine, clock=clock, retry_policy=RetryPolicy(base_seconds=5, jitter=0))


def names(violations: list[Violation], job_id: int | None = None) -> set[str]:
    return {v.invariant for v in violations if job_id is None or v.job_id == job_id}


def corrupt(engine, sql: str, **params) -> None:
    with unchecked(engine) as connection:
        connection.execute(text(sql), params)


def running_lease(queue):
    queue.enqueue("t", {"k": 1})
    (lease,) = queue.claim("worker-a", start=True)
    return lease


def running_job(queue) -> int:
    return running_lease(queue).job_id


def succeeded_job(queue) -> int:
    job = queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    queue.succeed(lease)
    return job.id


def succeeded_job_with_written_events(queue) -> int:
    """A job claimed, then started, then succeeded in three calls: every event of it is
    in the events table (no attempt row stands for any: sqlq_orm.ops.stand_ins)."""
    job = queue.enqueue("t")
    (lease,) = queue.claim("worker-a")
    queue.succeed(queue.start(lease))
    return job.id


def retried_then_succeeded_job(queue, clock) -> int:
    job = queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)
    queue.fail(lease, "UPSTREAM:DOWN", "first try failed")
    clock.advance(60)
    (lease,) = queue.claim("worker-b", start=True)
    queue.succeed(lease)
    return job.id


# ----------------------------------------------------------------- clean histories


def test_every_kind_of_history_the_service_writes_passes(queue, clock):
    succeeded_job(queue)
    retried_then_succeeded_job(queue, clock)
    for _ in range(6):
        queue.enqueue("t", max_retries=1)
    queue.enqueue("slow", max_retries=1, max_runtime_seconds=20)
    claimed = queue.claim("worker-c", limit=2)
    running = queue.claim("worker-c", limit=5, start=True)
    queue.start(claimed[0])
    queue.fail(claimed[0], "BAD:INPUT", retryable=False)
    queue.release(running[0])
    queue.cancel(running[1].job_id, reason="operator")
    queue.retry(running[1].job_id)
    clock.advance(25)  # "slow" is past its deadline; claimed[1] and running[2] expire
    queue.heartbeat(running[3], lease_seconds=60)
    queue.sweep()
    queue.retry(claimed[0].job_id)
    queue.claim("worker-d", limit=3, start=True)
    queue.cancel(queue.enqueue("t").id)

    assert check(queue) == []


def test_an_empty_database_passes(queue):
    assert check(queue) == []


def test_check_accepts_an_engine_with_the_default_tables(engine, queue):
    running_job(queue)
    corrupt(engine, "UPDATE sqlq_jobs SET lease_token = NULL")

    assert names(check(engine)) == {"held_job_has_lease"}


def test_check_does_not_wait_for_a_writer_holding_the_lock(engine, queue):
    running_job(queue)
    with PauseAfter(engine, UPDATE_JOBS_SET) as pause:
        writer = Actor(lambda: queue.enqueue("t") and queue.claim("worker-b", start=True))
        pause.wait()  # the writer's transaction is open and holds the write lock

        violations = check(queue)

        pause.release()
        writer.result()
    assert violations == []


def test_check_sees_one_snapshot_while_jobs_move_between_its_queries(engine, queue):
    job_id = running_job(queue)
    moved = threading.Event()

    def finish_the_job_meanwhile() -> None:
        # Runs while the checker is paused after its first replay query.
        other = sqlq_orm.Queue(sqlq_orm.create_engine(engine.url), clock=queue.clock)
        job = other.get_job(job_id)
        assert job.status == JobStatus.RUNNING.value
        other.cancel(job_id)
        other.engine.dispose()
        moved.set()

    with PauseAfter(engine, r"FROM sqlq_jobs ORDER BY sqlq_jobs.id") as pause:
        checker = Actor(lambda: check(queue))
        pause.wait()
        finish_the_job_meanwhile()
        pause.release()
        violations = checker.result()

    assert moved.is_set()
    assert violations == []
    assert check(queue) == []


# --------------------------------------------------- each invariant catches its break


def test_held_job_without_a_token_is_reported(engine, queue):
    job_id = running_job(queue)
    corrupt(engine, "UPDATE sqlq_jobs SET lease_token = NULL WHERE id = :id", id=job_id)

    assert names(check(queue)) == {"held_job_has_lease"}


def test_finished_job_still_holding_a_lease_is_reported(engine, queue):
    job_id = succeeded_job(queue)
    corrupt(
        engine,
        "UPDATE sqlq_jobs SET lease_token = 'leftover', lease_expires_at = 5 WHERE id = :id",
        id=job_id,
    )

    assert names(check(queue)) == {"lease_only_while_held"}


def test_queued_job_holding_a_lease_is_reported(engine, queue):
    job_id = queue.enqueue("t").id
    corrupt(engine, "UPDATE sqlq_jobs SET lease_expires_at = 5 WHERE id = :id", id=job_id)

    assert names(check(queue)) == {"lease_only_while_held"}


def test_terminal_job_without_finished_at_is_reported(engine, queue):
    job_id = succeeded_job(queue)
    corrupt(engine, "UPDATE sqlq_jobs SET finished_at = NULL WHERE id = :id", id=job_id)

    assert names(check(queue)) == {"terminal_job_has_finished_at"}


def test_queued_job_with_finished_at_is_reported(engine, queue):
    job_id = queue.enqueue("t").id
    corrupt(engine, "UPDATE sqlq_jobs SET finished_at = 5 WHERE id = :id", id=job_id)

    assert names(check(queue)) == {"active_job_has_no_finished_at"}


def test_running_job_whose_attempt_was_closed_is_reported(engine, queue):
    job_id = running_job(queue)
    corrupt(
        engine,
        "UPDATE sqlq_job_attempts SET status = 'FAILED', finished_at = 5 WHERE job_id = :id",
        id=job_id,
    )

    assert names(check(queue)) == {"running_job_has_one_open_attempt"}


def test_running_job_whose_open_attempt_belongs_to_another_worker_is_reported(engine, queue):
    job_id = running_job(queue)
    corrupt(
        engine, "UPDATE sqlq_job_attempts SET worker_id = 'intruder' WHERE job_id = :id", id=job_id
    )

    assert names(check(queue)) == {"running_job_has_one_open_attempt"}


def test_running_job_with_two_open_attempts_is_reported(engine, queue):
    job_id = running_job(queue)
    corrupt(
        engine,
        "INSERT INTO sqlq_job_attempts (job_id, attempt, worker_id, started_at, status) "
        "VALUES (:id, 2, 'worker-a', 5, 'RUNNING')",
        id=job_id,
    )

    found = names(check(queue))
    assert "running_job_has_one_open_attempt" in found
    assert "attempts_numbered_1_to_n" in found  # 2 rows for attempt_count 1


def test_queued_job_with_an_open_attempt_is_reported(engine, queue):
    lease = running_lease(queue)
    job_id = lease.job_id
    queue.release(lease)
    corrupt(
        engine,
        "UPDATE sqlq_job_attempts SET status = 'RUNNING', finished_at = NULL WHERE job_id = :id",
        id=job_id,
    )

    assert names(check(queue)) == {"only_running_job_has_open_attempt"}


def test_attempt_numbers_with_a_gap_are_reported(engine, queue, clock):
    job_id = retried_then_succeeded_job(queue, clock)
    corrupt(
        engine,
        "UPDATE sqlq_job_attempts SET attempt = 3 WHERE job_id = :id AND attempt = 2",
        id=job_id,
    )

    found = names(check(queue))
    assert "attempts_numbered_1_to_n" in found


def test_missing_attempt_row_is_reported(engine, queue, clock):
    job_id = retried_then_succeeded_job(queue, clock)
    corrupt(engine, "DELETE FROM sqlq_job_attempts WHERE job_id = :id AND attempt = 1", id=job_id)

    # The row stood for attempt 1's CLAIMED and STARTED, so the timeline lost them too.
    assert names(check(queue)) == {"attempts_numbered_1_to_n", "events_follow_state_machine"}


def test_two_succeeded_attempts_are_reported(engine, queue, clock):
    job_id = retried_then_succeeded_job(queue, clock)
    corrupt(
        engine,
        "UPDATE sqlq_job_attempts SET status = 'SUCCEEDED' WHERE job_id = :id AND attempt = 1",
        id=job_id,
    )

    # The corrupted row also stands for a second SUCCEEDED in the timeline, placed
    # last: attempt 1's success after attempt 2's run.
    assert names(check(queue)) == {
        "at_most_one_succeeded_attempt",
        "succeeded_job_has_its_success",
        "events_follow_state_machine",
        "timeline_follows_event_ids",
    }


def test_succeeded_job_without_a_succeeded_attempt_is_reported(engine, queue):
    job_id = succeeded_job(queue)
    corrupt(engine, "UPDATE sqlq_job_attempts SET status = 'FAILED' WHERE job_id = :id", id=job_id)

    # The row no longer stands for a SUCCEEDED: the timeline ends RUNNING.
    assert names(check(queue)) == {"succeeded_job_has_its_success", "events_follow_state_machine"}


def test_success_written_by_a_worker_not_holding_the_lease_is_reported(engine, queue):
    job_id = succeeded_job(queue)
    corrupt(
        engine, "UPDATE sqlq_job_attempts SET worker_id = 'zombie' WHERE job_id = :id", id=job_id
    )

    assert names(check(queue)) == {"succeeded_job_has_its_success"}


def test_failed_job_with_a_succeeded_attempt_is_reported(engine, queue):
    job_id = running_job(queue)
    corrupt(
        engine,
        "UPDATE sqlq_jobs SET status = 'FAILED', finished_at = 5, lease_token = NULL, "
        "lease_expires_at = NULL WHERE id = :id",
        id=job_id,
    )
    corrupt(
        engine,
        "UPDATE sqlq_job_attempts SET status = 'SUCCEEDED', finished_at = 5 WHERE job_id = :id",
        id=job_id,
    )

    found = names(check(queue))
    assert "succeeded_job_has_its_success" in found
    assert "events_follow_state_machine" in found  # no FAILED event either


def test_missing_finishing_event_is_reported(engine, queue):
    job_id = succeeded_job_with_written_events(queue)
    corrupt(
        engine, "DELETE FROM sqlq_job_events WHERE job_id = :id AND event = 'SUCCEEDED'", id=job_id
    )

    (violation,) = check(queue)
    assert violation.invariant == "events_follow_state_machine"
    assert violation.job_id == job_id
    assert "replay to RUNNING but the job is SUCCEEDED" in violation.detail


def test_event_not_allowed_from_the_replayed_state_is_reported(engine, queue):
    job_id = succeeded_job_with_written_events(queue)
    corrupt(
        engine,
        "INSERT INTO sqlq_job_events (job_id, ts, event, actor) VALUES (:id, 9, 'CLAIMED', 'w')",
        id=job_id,
    )

    (violation,) = check(queue)
    assert violation.invariant == "events_follow_state_machine"
    assert "CLAIMED is not allowed from SUCCEEDED" in violation.detail


def test_unknown_event_name_is_reported(engine, queue):
    job_id = queue.enqueue("t").id
    corrupt(
        engine,
        "INSERT INTO sqlq_job_events (job_id, ts, event, actor) VALUES (:id, 9, 'TELEPORTED', 'w')",
        id=job_id,
    )

    (violation,) = check(queue)
    assert "'TELEPORTED' is not a known event" in violation.detail


def test_job_without_events_is_reported(engine, queue):
    job_id = queue.enqueue("t").id
    corrupt(engine, "DELETE FROM sqlq_job_events WHERE job_id = :id", id=job_id)

    (violation,) = check(queue)
    assert violation.invariant == "events_follow_state_machine"
    assert "no events" in violation.detail


def test_a_run_placed_before_the_previous_runs_events_is_reported(engine, queue, clock):
    # Issue 34 item 17: attempt 2's stand-in row placed after attempt 1's claim point,
    # so attempt 2's CLAIMED comes before attempt 1's RETRY_SCHEDULED by event id.
    job_id = retried_then_succeeded_job(queue, clock)
    corrupt(
        engine,
        "UPDATE sqlq_job_attempts SET after_event_id = (SELECT MIN(id) FROM sqlq_job_events "
        "WHERE job_id = :id) WHERE job_id = :id AND attempt = 2",
        id=job_id,
    )

    found = [v for v in check(queue) if v.invariant == "timeline_follows_event_ids"]
    assert [v.job_id for v in found] == [job_id]
    assert "RETRY_SCHEDULED of attempt 1" in found[0].detail


def test_a_run_placed_after_another_jobs_event_is_reported(engine, queue):
    # Replays fine (the other job's event id is past this job's last), but the order
    # shown would come from another job's history.
    job_id = succeeded_job(queue)
    other = queue.enqueue("t")
    corrupt(
        engine,
        "UPDATE sqlq_job_attempts SET after_event_id = (SELECT MAX(id) FROM sqlq_job_events "
        "WHERE job_id = :other) WHERE job_id = :id",
        id=job_id,
        other=other.id,
    )

    violations = check(queue)
    assert names(violations, job_id) == {"timeline_follows_event_ids"}
    assert f"job {other.id}'s, not this job's" in violations[0].detail


def test_a_written_event_naming_an_earlier_attempt_after_a_later_one_is_reported(engine, queue):
    job_id = succeeded_job_with_written_events(queue)
    corrupt(
        engine,
        "UPDATE sqlq_job_events SET detail = :detail WHERE job_id = :id AND event = 'CLAIMED'",
        id=job_id,
        detail=json.dumps({"attempt": 2, "lease_seconds": 30}),
    )

    assert "timeline_follows_event_ids" in names(check(queue), job_id)


def test_orphan_attempt_is_reported(engine, queue):
    corrupt(
        engine,
        "INSERT INTO sqlq_job_attempts (job_id, attempt, worker_id, started_at, status) "
        "VALUES (424242, 1, 'w', 5, 'RUNNING')",
    )

    found = check(queue)
    assert [v for v in found if v.job_id is not None] == [
        Violation("no_orphan_attempts", 424242, "attempt=1, status='RUNNING'")
    ]


def test_orphan_event_is_reported(engine, queue):
    corrupt(
        engine,
        "INSERT INTO sqlq_job_events (job_id, ts, event, actor) "
        "VALUES (424242, 5, 'ENQUEUED', 's')",
    )

    assert names(check(queue), 424242) == {"no_orphan_events"}


def test_rows_written_with_foreign_keys_off_are_reported_per_table(engine, queue):
    if engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL enforces foreign keys on every connection")
    corrupt(
        engine,
        "INSERT INTO sqlq_job_events (job_id, ts, event, actor) "
        "VALUES (424242, 5, 'ENQUEUED', 's'), (424243, 5, 'ENQUEUED', 's')",
    )

    (broken,) = [v for v in check(queue) if v.invariant == "foreign_keys_hold"]
    assert broken.job_id is None
    assert broken.detail.startswith("2 row(s) of sqlq_job_events reference missing rows")


def scheduled_job(queue, clock) -> int:
    schedule = sqlq_orm.Schedule.declare("* * * * *", "tick")
    scheduler = sqlq_orm.Scheduler(queue, [schedule])
    scheduler.register()
    clock.advance(60)
    (job_id,) = scheduler.tick().job_ids
    return job_id


def test_a_second_job_for_one_schedule_slot_is_reported(engine, queue, clock):
    job_id = scheduled_job(queue, clock)
    assert check(queue) == []
    twin = queue.enqueue("tick").id
    detail = queue.get_job(job_id).events[0].detail
    corrupt(
        engine,
        "UPDATE sqlq_job_events SET detail = :detail WHERE job_id = :id",
        detail=detail,
        id=twin,
    )

    (violation,) = check(queue)
    assert (violation.invariant, violation.job_id) == ("one_job_per_schedule_slot", twin)
    assert f"has 2 jobs: [{job_id}, {twin}]" in violation.detail


def test_a_schedule_whose_last_slot_is_not_before_its_next_is_reported(engine, queue, clock):
    scheduled_job(queue, clock)
    corrupt(engine, "UPDATE sqlq_schedules SET next_slot_at = last_slot_at")

    (violation,) = check(queue)
    assert (violation.invariant, violation.job_id) == ("schedule_slots_move_forward", None)
    assert "schedule 'tick'" in violation.detail


def test_a_concurrency_key_held_beyond_its_limit_is_reported(engine, queue):
    for _ in range(3):
        queue.enqueue("t", concurrency_key="tenant:1", concurrency_limit=2)
    queue.claim("worker-a", limit=3)
    assert check(queue) == []
    corrupt(
        engine,
        "UPDATE sqlq_jobs SET status = 'CLAIMED', claimed_by = 'worker-z', lease_token = 'z',"
        " lease_expires_at = 0 WHERE status = 'QUEUED'",
    )

    found = [v for v in check(queue) if v.invariant == "concurrency_limit_respected"]
    assert len(found) == 1
    assert found[0].detail == "concurrency_key='tenant:1', held=3, limit=2"


def test_a_job_created_inside_its_keys_dedupe_period_is_reported(engine, queue, clock):
    # Issue 34 item 17: the race of item 3 left such rows, and the checker missed them.
    held = queue.enqueue("t", dedupe_key="order-7", dedupe_period=60).id
    (lease,) = queue.claim("worker-a", start=True)
    queue.succeed(lease)
    assert queue.enqueue("t", dedupe_key="order-7").id == held  # the period holds
    clock.advance(60)
    after = queue.enqueue("t", dedupe_key="order-7").id  # the period is over
    cancelled = queue.enqueue("t", dedupe_key="cancel-me", dedupe_period=60).id
    queue.cancel(cancelled)
    queue.enqueue("t", dedupe_key="cancel-me")  # a CANCELLED job released its key
    assert check(queue) == []
    corrupt(
        engine,
        "UPDATE sqlq_jobs SET created_at = created_at - 1 WHERE id = :id",  # 59 s after
        id=after,
    )

    found = [v for v in check(queue) if v.invariant == "dedupe_key_held_for_its_period"]
    assert [(v.job_id, v.detail) for v in found] == [
        (
            after,
            f"created at {clock.now() - 1} with dedupe_key='order-7', 59s after job {held} "
            f"finished at {clock.now() - 60}, which holds the key for 60s",
        )
    ]


# ------------------------------------------------------------------ dependencies


def parent_and_child(queue, **options):
    parent = queue.enqueue("parent").id
    child = queue.enqueue("child", depends_on=[parent], **options).id
    return parent, child


def test_dependency_histories_the_service_writes_pass(queue):
    parent, child = parent_and_child(queue)
    doomed_parent, doomed = parent_and_child(queue)
    queue.enqueue_chain([{"type": "a"}, {"type": "b"}])
    queue.cancel(doomed_parent)
    (lease,) = [
        lease for lease in queue.claim("worker-a", limit=5, start=True) if lease.job_id == parent
    ]
    queue.succeed(lease)

    assert queue.get_job(child).status == "QUEUED"
    assert check(queue) == []


def test_a_child_running_before_its_parent_succeeded_is_reported(engine, queue):
    parent, child = parent_and_child(queue)
    corrupt(
        engine,
        "UPDATE sqlq_jobs SET status = 'QUEUED', pending_parents = 0 WHERE id = :id",
        id=child,
    )
    # Only the child is ready: the parent is held back.
    corrupt(engine, "UPDATE sqlq_jobs SET run_at = run_at + 3600 WHERE id = :id", id=parent)
    (lease,) = queue.claim("worker-a", start=True)
    assert lease.job_id == child

    violations = [v for v in check(queue) if v.invariant == "dependent_ran_after_its_parents"]
    assert [(v.job_id, str(parent) in v.detail) for v in violations] == [(child, True)]


def test_a_child_retried_by_hand_waits_for_its_parent_and_passes(queue):
    parent, child = parent_and_child(queue)
    queue.cancel(child)
    queue.retry(child)

    assert [lease.job_id for lease in queue.claim("worker-a", limit=5, start=True)] == [parent]
    assert queue.get_job(child).status == "WAITING"
    assert check(queue) == []


def test_a_waiting_child_whose_parents_all_succeeded_is_reported_stuck(engine, queue):
    parent, child = parent_and_child(queue)
    (lease,) = queue.claim("worker-a", start=True)
    corrupt(
        engine,
        "UPDATE sqlq_jobs SET status = 'SUCCEEDED', finished_at = 1, lease_token = NULL, "
        "lease_expires_at = NULL WHERE id = :id",
        id=parent,
    )

    assert (child, "waiting_job_has_unmet_parents") in {
        (v.job_id, v.invariant) for v in check(queue)
    }


def test_a_parent_without_its_has_dependents_flag_is_reported(engine, queue):
    parent, child = parent_and_child(queue)
    corrupt(engine, "UPDATE sqlq_jobs SET has_dependents = 0 WHERE id = :id", id=parent)

    (violation,) = check(queue)
    assert (violation.invariant, violation.job_id) == ("parent_is_flagged", parent)
    assert f"child={child}" in violation.detail


def test_a_waiting_child_with_a_failed_parent_is_reported(engine, queue):
    parent, child = parent_and_child(queue)
    corrupt(
        engine, "UPDATE sqlq_jobs SET status = 'FAILED', finished_at = 1 WHERE id = :id", id=parent
    )

    assert (child, "waiting_job_has_no_failed_parent") in {
        (v.job_id, v.invariant) for v in check(queue)
    }


def test_a_waiting_child_with_a_failed_parent_is_fine_under_the_run_policy(engine, queue):
    parent, child = parent_and_child(queue, on_parent_failure="run")
    second = queue.enqueue("second").id
    corrupt(
        engine,
        "INSERT INTO sqlq_job_dependencies (on_parent_failure, job_id, depends_on_id) "
        "VALUES ('run', :c, :p)",
        c=child,
        p=second,
    )
    corrupt(
        engine, "UPDATE sqlq_jobs SET status = 'FAILED', finished_at = 1 WHERE id = :id", id=parent
    )

    assert names(check(queue), child) == set()


def test_every_invariant_has_a_test_that_breaks_it():
    tested = {
        "concurrency_limit_respected",
        "foreign_keys_hold",
        "held_job_has_lease",
        "lease_only_while_held",
        "terminal_job_has_finished_at",
        "active_job_has_no_finished_at",
        "running_job_has_one_open_attempt",
        "only_running_job_has_open_attempt",
        "attempts_numbered_1_to_n",
        "at_most_one_succeeded_attempt",
        "succeeded_job_has_its_success",
        "events_follow_state_machine",
        "no_orphan_attempts",
        "no_orphan_events",
        "one_job_per_schedule_slot",
        "schedule_slots_move_forward",
        "dependent_ran_after_its_parents",
        "waiting_job_has_unmet_parents",
        "waiting_job_has_no_failed_parent",
        "parent_is_flagged",
        # tests/conformance/test_dependency_retries.py
        "dependent_started_after_parents_settled",
        "waiting_count_matches_parents",
        "timeline_follows_event_ids",
        "dedupe_key_held_for_its_period",
    }
    assert tested == set(INVARIANTS)


# ------------------------------------------------------------- replay rules, no DB


@pytest.mark.parametrize(
    ("timeline", "status", "problem"),
    [
        (["ENQUEUED"], "QUEUED", None),
        (["ENQUEUED", "CLAIMED", "STARTED", "HEARTBEAT", "SUCCEEDED"], "SUCCEEDED", None),
        (["ENQUEUED", "CLAIMED", "RECOVERED", "RETRY_SCHEDULED"], "QUEUED", None),
        (["ENQUEUED", "CLAIMED", "STARTED", "TIMED_OUT", "FAILED", "RETRIED"], "QUEUED", None),
        (["CLAIMED"], "CLAIMED", "first event is CLAIMED"),
        (["ENQUEUED", "ENQUEUED"], "QUEUED", "ENQUEUED cannot happen"),
        (["ENQUEUED", "STARTED"], "RUNNING", "STARTED is not allowed from QUEUED"),
        (["ENQUEUED", "HEARTBEAT"], "QUEUED", "only allowed while held"),
        (["ENQUEUED", "CLAIMED", "RECOVERED"], "CLAIMED", "must be followed by"),
        (["ENQUEUED", "CLAIMED", "STARTED", "SUCCEEDED", "RETRIED"], "QUEUED", "RETRIED is not"),
    ],
)
def test_replay_rules(timeline, status, problem):
    found = replay_problem(timeline, status)

    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


# ------------------------------------------------------------------- sqlq check


def sqlq(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "sqlq_orm", "--db", db_url, *args],
        capture_output=True, text=True, env=env, cwd=root, timeout=120,
    )  # fmt: skip


def test_sqlq_check_exits_zero_and_says_ok_on_a_healthy_queue(db_url, queue):
    succeeded_job(queue)

    result = sqlq(db_url, "check")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok: all {len(INVARIANTS)} invariants hold"


def test_sqlq_check_lists_each_violation_and_exits_one(db_url, engine, queue):
    job_id = succeeded_job(queue)
    corrupt(engine, "UPDATE sqlq_jobs SET finished_at = NULL WHERE id = :id", id=job_id)

    text_result = sqlq(db_url, "check")
    json_result = sqlq(db_url, "check", "--json")

    assert text_result.returncode == 1
    assert f"job {job_id}: terminal_job_has_finished_at" in text_result.stdout
    assert json_result.returncode == 1
    assert json.loads(json_result.stdout)["violations"] == [
        {
            "invariant": "terminal_job_has_finished_at",
            "job_id": job_id,
            "detail": "status='SUCCEEDED'",
        }
    ]
