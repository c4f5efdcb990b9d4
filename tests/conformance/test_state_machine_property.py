"""Property test: random sequences of queue operations against a model of the state machine.

Hypothesis drives enqueue (with or without parents: ``depends_on`` under either
policy), claim (started or not), start, heartbeat, succeed (one or a batch), fail
(retryable or not), release, sweep, cancel, retry and clock moves against the real
service on a real database, and against :class:`Model`, a few lines of plain Python
that say what each call must do. After every step:

- the service accepted exactly what the model accepted (``LeaseLost`` exactly when
  the model says the lease is stale, ``MaxRuntimeExceeded`` exactly when it is held
  but past its max runtime, ``InvalidTransition`` for finished jobs),
- every job row matches the model (status, retries, attempts, run_at, lease expiry),
- :func:`sqlq_orm.ops.invariants.check` finds nothing.

Profiles (``SQLQ_HYPOTHESIS_PROFILE``): ``ci`` (default, modest), ``long`` (thorough).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import delete, select

import sqlq_orm
from sqlq_orm import (
    InvalidTransition,
    JobStatus,
    LeaseLost,
    MaxRuntimeExceeded,
    ParentNotSucceeded,
    PinnedClock,
    RetryPolicy,
)
from sqlq_orm.core.timing import ROUNDING_SECONDS, not_before
from sqlq_orm.ops.invariants import check
from tests.conftest import PINNED_START

settings.register_profile(
    "ci",
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=500,
    stateful_step_count=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PROFILE = settings.get_profile(os.environ.get("SQLQ_HYPOTHESIS_PROFILE", "ci"))

POLICY = RetryPolicy(base_seconds=5, max_seconds=20, jitter=0)
LEASE_SECONDS = 30
HELD = {JobStatus.CLAIMED, JobStatus.RUNNING}
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}


def later(seconds: int) -> int:
    """What the queue adds to its truncated "now" for an instant ``seconds`` ahead."""
    return seconds + ROUNDING_SECONDS


@dataclass
class ModelJob:
    id: int
    priority: int
    run_at: int
    max_retries: int
    max_runtime: int | None
    status: JobStatus = JobStatus.QUEUED
    retry_count: int = 0
    attempt_count: int = 0
    lease: int | None = None  # number of the lease that currently holds it
    lease_expires_at: int | None = None
    deadline_at: int | None = None
    parents: tuple[int, ...] = ()
    policy: str = "cancel"
    pending_parents: int = 0


@dataclass
class HeldLease:
    """A lease the test holds, with the model's number for it."""

    number: int
    lease: sqlq_orm.Lease = field(repr=False)

    def __repr__(self) -> str:
        return f"lease#{self.number}(job {self.lease.job_id})"


@dataclass
class Model:
    """What the queue must do, in plain Python."""

    now: int
    jobs: dict[int, ModelJob] = field(default_factory=dict)
    leases_minted: int = 0

    def holds(self, held: HeldLease) -> bool:
        job = self.jobs[held.lease.job_id]
        return job.lease == held.number and job.status in HELD

    def drop_lease(self, job: ModelJob) -> None:
        job.lease = job.lease_expires_at = job.deadline_at = None

    def claimable(self, limit: int) -> list[ModelJob]:
        ready = [
            j for j in self.jobs.values() if j.status is JobStatus.QUEUED and j.run_at <= self.now
        ]
        ready.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        return ready[:limit]

    def take(self, job: ModelJob, *, start: bool) -> int:
        self.leases_minted += 1
        job.lease = self.leases_minted
        job.lease_expires_at = self.now + later(LEASE_SECONDS)
        job.status = JobStatus.CLAIMED
        if start:
            self.start(job)
        return job.lease

    def start(self, job: ModelJob) -> None:
        job.status = JobStatus.RUNNING
        job.attempt_count += 1
        job.deadline_at = None if job.max_runtime is None else self.now + later(job.max_runtime)

    def recover(self, job: ModelJob) -> JobStatus:
        """An expired lease swept: a claim that never started goes back free."""
        if job.status is JobStatus.CLAIMED:
            self.drop_lease(job)
            job.status = JobStatus.QUEUED
            job.run_at = self.now
            return job.status
        return self.end_with_failure(job)

    def end_with_failure(self, job: ModelJob, retryable: bool = True) -> JobStatus:
        self.drop_lease(job)
        if retryable and job.retry_count < job.max_retries:
            job.retry_count += 1
            job.run_at = self.now + POLICY.delay_seconds(job.retry_count)
            job.status = JobStatus.QUEUED
        else:
            job.status = JobStatus.FAILED
            self.parents_ended([job.id], JobStatus.FAILED)
        return job.status

    # -- dependencies: what a parent's end does to the jobs waiting for it

    def enqueue_child(self, job: ModelJob) -> None:
        statuses = [self.jobs[p].status for p in job.parents]
        failed = {JobStatus.FAILED, JobStatus.CANCELLED}
        if job.policy == "cancel" and any(s in failed for s in statuses):
            job.status = JobStatus.CANCELLED
            return
        unmet = TERMINAL if job.policy == "run" else {JobStatus.SUCCEEDED}
        job.pending_parents = sum(1 for s in statuses if s not in unmet)
        if job.pending_parents:
            job.status = JobStatus.WAITING

    def settle(self, job: ModelJob) -> tuple[int | None, int]:
        """(a parent it needs that ended FAILED/CANCELLED, or None; parents it waits for)."""
        failed, pending = None, 0
        for parent in job.parents:
            status = self.jobs[parent].status
            if job.policy == "run":
                pending += status not in TERMINAL
                continue
            pending += status is not JobStatus.SUCCEEDED
            if failed is None and status in (JobStatus.FAILED, JobStatus.CANCELLED):
                failed = parent
        return failed, pending

    def parents_ended(self, ended: list[int], outcome: JobStatus | None = None) -> None:
        """Every WAITING child of ``ended`` recomputed from its parents as they are now
        (decided for the whole level first, as the queue reads them)."""
        children = [
            child
            for child in self.jobs.values()
            if child.status is JobStatus.WAITING and any(p in ended for p in child.parents)
        ]
        decisions = [(child, self.settle(child)) for child in children]
        cancelled = []
        for child, (failed, pending) in decisions:
            if failed is not None:
                child.status = JobStatus.CANCELLED
                cancelled.append(child.id)
            elif pending == 0:
                child.status = JobStatus.QUEUED
                child.pending_parents = 0
                child.run_at = max(child.run_at, self.now)
            else:
                child.pending_parents = pending
        if cancelled:
            self.parents_ended(cancelled)


def make_machine(engine, clock: PinnedClock):
    queue = sqlq_orm.Queue(
        engine, clock=clock, retry_policy=POLICY, default_lease_seconds=LEASE_SECONDS
    )
    tables = queue.tables

    class QueueMachine(RuleBasedStateMachine):
        jobs = Bundle("jobs")
        leases = Bundle("leases")

        def __init__(self) -> None:
            super().__init__()
            with engine.begin() as connection:
                for table in (tables.dependencies, tables.events, tables.attempts, tables.jobs):
                    connection.execute(delete(table))
            clock.set(PINNED_START)
            self.model = Model(now=PINNED_START)

        # ------------------------------------------------------------- producing

        @rule(
            target=jobs,
            priority=st.integers(0, 1),
            delay=st.sampled_from([0, 0, 5]),
            max_retries=st.integers(0, 2),
            max_runtime=st.sampled_from([None, None, 20]),
        )
        def enqueue(self, priority, delay, max_retries, max_runtime):
            job_id = queue.enqueue(
                "t",
                {"n": len(self.model.jobs)},
                priority=priority,
                delay=delay,
                max_retries=max_retries,
                max_runtime_seconds=max_runtime,
            ).id
            self.model.jobs[job_id] = ModelJob(
                job_id, priority, self.model.now + not_before(delay), max_retries, max_runtime
            )
            return job_id

        @rule(
            target=jobs,
            parents=st.lists(jobs, min_size=1, max_size=3, unique=True),
            policy=st.sampled_from(["cancel", "cancel", "run"]),
        )
        def enqueue_child(self, parents, policy):
            job_id = queue.enqueue(
                "t", {"n": len(self.model.jobs)}, depends_on=parents, on_parent_failure=policy
            ).id
            job = ModelJob(
                job_id, 0, self.model.now, 1, None, parents=tuple(parents), policy=policy
            )
            self.model.jobs[job_id] = job
            self.model.enqueue_child(job)
            return job_id

        @rule(target=leases, limit=st.integers(1, 3), start=st.booleans())
        def claim(self, limit, start):
            expected = self.model.claimable(limit)
            got = queue.claim("worker", limit=limit, start=start)
            assert [lease.job_id for lease in got] == sorted(j.id for j in expected)
            held = []
            for lease in got:
                number = self.model.take(self.model.jobs[lease.job_id], start=start)
                assert lease.attempt == self.model.jobs[lease.job_id].attempt_count + (not start)
                held.append(HeldLease(number, lease))
            return multiple(*held)

        # ------------------------------------------------------ calls on a lease

        @rule(held=leases)
        def start(self, held):
            job = self.model.jobs[held.lease.job_id]
            if self.model.holds(held) and job.status is JobStatus.CLAIMED:
                queue.start(held.lease)
                self.model.start(job)
                assert held.lease.attempt == job.attempt_count
            else:
                with pytest.raises(LeaseLost):
                    queue.start(held.lease)

        @rule(held=leases)
        def heartbeat(self, held):
            job = self.model.jobs[held.lease.job_id]
            if not self.model.holds(held):
                with pytest.raises(LeaseLost) as raised:
                    queue.heartbeat(held.lease)
                assert type(raised.value) is LeaseLost
            elif job.deadline_at is not None and job.deadline_at <= self.model.now:
                with pytest.raises(MaxRuntimeExceeded):
                    queue.heartbeat(held.lease)
            else:
                expires = queue.heartbeat(held.lease)
                job.lease_expires_at = self.model.now + later(LEASE_SECONDS)
                assert expires == job.lease_expires_at

        @rule(held=leases)
        def succeed(self, held):
            job = self.model.jobs[held.lease.job_id]
            if not held.lease.started:
                with pytest.raises(InvalidTransition):
                    queue.succeed(held.lease)
            elif self.model.holds(held) and job.status is JobStatus.RUNNING:
                queue.succeed(held.lease)
                self.model.drop_lease(job)
                job.status = JobStatus.SUCCEEDED
                self.model.parents_ended([job.id], JobStatus.SUCCEEDED)
            else:
                with pytest.raises(LeaseLost):
                    queue.succeed(held.lease)

        @rule(batch=st.lists(leases, min_size=1, max_size=3, unique_by=lambda h: h.lease.job_id))
        def succeed_many(self, batch):
            if not all(held.lease.started for held in batch):
                with pytest.raises(InvalidTransition):
                    queue.succeed_many([held.lease for held in batch])
                return
            lost = queue.succeed_many([held.lease for held in batch])
            expected_lost = set()
            succeeded = []
            for held in batch:
                job = self.model.jobs[held.lease.job_id]
                if self.model.holds(held) and job.status is JobStatus.RUNNING:
                    self.model.drop_lease(job)
                    job.status = JobStatus.SUCCEEDED
                    succeeded.append(job.id)
                else:
                    expected_lost.add(held.lease.job_id)
            self.model.parents_ended(succeeded, JobStatus.SUCCEEDED)
            assert {lease.job_id for lease in lost} == expected_lost

        @rule(held=leases, retryable=st.booleans())
        def fail(self, held, retryable):
            job = self.model.jobs[held.lease.job_id]
            if self.model.holds(held):
                outcome = queue.fail(held.lease, "TEST:BOOM", "boom", retryable=retryable)
                assert outcome == self.model.end_with_failure(job, retryable)
            else:
                with pytest.raises(LeaseLost):
                    queue.fail(held.lease, "TEST:BOOM", "boom", retryable=retryable)

        @rule(held=leases)
        def release(self, held):
            job = self.model.jobs[held.lease.job_id]
            if self.model.holds(held):
                queue.release(held.lease)
                self.model.drop_lease(job)
                job.status = JobStatus.QUEUED
                job.run_at = self.model.now
            else:
                with pytest.raises(LeaseLost):
                    queue.release(held.lease)

        # ----------------------------------------------------- calls on a job id

        @rule(job_id=jobs)
        def cancel(self, job_id):
            job = self.model.jobs[job_id]
            if job.status in TERMINAL:
                with pytest.raises(InvalidTransition):
                    queue.cancel(job_id)
            else:
                queue.cancel(job_id)
                self.model.drop_lease(job)
                job.status = JobStatus.CANCELLED
                self.model.parents_ended([job_id], JobStatus.CANCELLED)

        @rule(job_id=jobs)
        def retry(self, job_id):
            job = self.model.jobs[job_id]
            if job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
                failed, pending = self.model.settle(job)
                if failed is not None:
                    with pytest.raises(ParentNotSucceeded):
                        queue.retry(job_id)
                    return
                queue.retry(job_id)
                job.status = JobStatus.WAITING if pending else JobStatus.QUEUED
                if pending:  # else left as it was
                    job.pending_parents = pending
                job.retry_count = 0
                job.run_at = self.model.now
                self.model.parents_ended([job_id])
            else:
                with pytest.raises(InvalidTransition):
                    queue.retry(job_id)

        # ---------------------------------------------------- time and the sweeper

        @rule(seconds=st.sampled_from([1, 5, 10, 29, 30, 31, 60, -3]))
        def advance_clock(self, seconds):
            self.model.now = clock.advance(seconds)

        @rule(batch_size=st.integers(1, 3))
        def sweep(self, batch_size):
            now = self.model.now
            held = [j for j in self.model.jobs.values() if j.status in HELD]
            expired = [j for j in held if j.lease_expires_at <= now]
            timed_out = [
                j
                for j in held
                if j not in expired
                and j.status is JobStatus.RUNNING
                and j.deadline_at is not None
                and j.deadline_at <= now
            ]
            outcomes = [self.model.recover(j) for j in expired] + [
                self.model.end_with_failure(j) for j in timed_out
            ]

            result = queue.sweep(batch_size=batch_size)

            assert (result.expired, result.timed_out) == (len(expired), len(timed_out))
            assert result.requeued == outcomes.count(JobStatus.QUEUED)
            assert result.failed == outcomes.count(JobStatus.FAILED)

        # ------------------------------------------------------------ invariants

        @invariant()
        def rows_match_the_model(self):
            j = tables.jobs.c
            with queue.read() as connection:
                rows = connection.execute(
                    select(
                        j.id,
                        j.status,
                        j.retry_count,
                        j.attempt_count,
                        j.run_at,
                        j.lease_expires_at,
                        j.deadline_at,
                        j.pending_parents,
                    )  # fmt: skip
                ).all()
            actual = {row.id: tuple(row)[1:] for row in rows}
            expected = {
                job.id: (
                    job.status.value,
                    job.retry_count,
                    job.attempt_count,
                    job.run_at,
                    job.lease_expires_at,
                    job.deadline_at,
                    job.pending_parents,
                )
                for job in self.model.jobs.values()
            }
            assert actual == expected

        @invariant()
        def invariants_hold(self):
            assert check(queue) == []

    return QueueMachine


def test_service_does_exactly_what_the_state_machine_model_allows(engine):
    clock = PinnedClock(PINNED_START)

    run_state_machine_as_test(make_machine(engine, clock), settings=PROFILE)
