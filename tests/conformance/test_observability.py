"""Queue stats answer the five operator questions with exact numbers, on both databases.

The fixture is built with the factory-boy factories so every number is known; the
queue's clock is pinned at ``NOW``.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import insert

import sqlq_orm
from sqlq_orm.errors import InvalidInput, JobNotFound
from sqlq_orm.ops import render as report
from sqlq_orm.ops import timeline as observability
from sqlq_orm.ops.stats import WorkerState, percentile_rank
from tests.support.factories import JobAttemptFactory, JobEventFactory, JobFactory, WorkerFactory

NOW = 1_700_000_000
DAY = 86_400


def _attempts(job, *runs) -> None:
    """``runs``: (status, started_at, finished_at or None), numbered from 1."""
    for number, (status, started, finished) in enumerate(runs, start=1):
        JobAttemptFactory(
            job=job,
            attempt=number,
            status=status,
            started_at=started,
            finished_at=finished,
            worker_id="w-alive",
            error_code="TIMEOUT:UPSTREAM_API" if status == "FAILED" else None,
        )


def build_known_queue(session, now: int = NOW) -> dict[str, int]:
    """Write a queue with known contents; return job ids by name.

    queue "default": types resize and report; queue "emails": type send.
    """
    WorkerFactory(id="w-alive", started_at=now - 5000, last_seen_at=now - 5)
    WorkerFactory(id="w-silent", started_at=now - 5000, last_seen_at=now - 600)
    ids: dict[str, int] = {}

    def job(name: str, **fields):
        fields.setdefault("created_at", now - 3000)
        fields.setdefault("run_at", fields["created_at"])
        created = JobFactory(**fields)
        ids[name] = created.id
        JobEventFactory(job=created, ts=fields["created_at"], event="ENQUEUED")
        return created

    resize = {"type": "resize", "queue": "default"}
    report_ = {"type": "report", "queue": "default"}
    send = {"type": "send", "queue": "emails"}

    # QUEUED: two ready, one scheduled later, one waiting for its third try.
    job("queued_1", **resize, created_at=now - 100)
    job("queued_2", **resize, created_at=now - 50)
    job("queued_later", **resize, created_at=now - 10, run_at=now + 300)
    job(
        "queued_retrying", **send, created_at=now - 500, run_at=now - 30, retry_count=2,
        error_code="TIMEOUT:SMTP", error_detail="smtp timed out",
    )  # fmt: skip

    # Held: alive worker, silent worker (lease expired, past deadline), unknown worker.
    alive = job(
        "running_alive", **resize, running=True, claimed_by="w-alive", created_at=now - 400,
        claimed_at=now - 300, started_at=now - 300, heartbeat_at=now - 10,
        lease_expires_at=now + 20,
    )  # fmt: skip
    _attempts(alive, ("RUNNING", now - 300, None))
    silent = job(
        "running_silent", **report_, running=True, claimed_by="w-silent",
        created_at=now - 1000, claimed_at=now - 900, started_at=now - 900,
        heartbeat_at=now - 700, lease_expires_at=now - 670, deadline_at=now - 100,
        max_runtime_seconds=800, attempt_count=2, retry_count=1,
        error_code="TIMEOUT:UPSTREAM_API",
    )  # fmt: skip
    _attempts(silent, ("FAILED", now - 2000, now - 1900), ("RUNNING", now - 900, None))
    job(
        "claimed_gone", **send, claimed=True, claimed_by="w-gone", created_at=now - 200,
        claimed_at=now - 60, heartbeat_at=now - 60, lease_expires_at=now + 10,
    )  # fmt: skip

    # SUCCEEDED: two within the hour (with attempts), two past the 30-day policy.
    ok = job("ok_recent", **resize, succeeded=True, finished_at=now - 60, attempt_count=2)
    _attempts(ok, ("RELEASED", now - 200, now - 101), ("SUCCEEDED", now - 70, now - 60))
    ok = job("ok_hour", **resize, succeeded=True, finished_at=now - 1000, attempt_count=2)
    _attempts(ok, ("FAILED", now - 1100, now - 1070), ("SUCCEEDED", now - 1020, now - 1000))
    ok = job(
        "ok_31d", **resize, succeeded=True, created_at=now - 32 * DAY, finished_at=now - 31 * DAY
    )
    _attempts(ok, ("SUCCEEDED", now - 31 * DAY - 500, now - 31 * DAY))
    JobEventFactory(job=ok, ts=now - 31 * DAY, event="SUCCEEDED", actor="w-alive")
    job("ok_40d", **resize, succeeded=True, created_at=now - 41 * DAY, finished_at=now - 40 * DAY)

    # FAILED: two within the hour (four attempts each), one past 90 days, one not.
    failed = job(
        "failed_recent", **report_, failed=True, finished_at=now - 100, retry_count=3,
        attempt_count=4, error_code="TIMEOUT:UPSTREAM_API",
    )  # fmt: skip
    _attempts(
        failed,
        ("FAILED", now - 400, now - 395),
        ("FAILED", now - 300, now - 293),
        ("FAILED", now - 200, now - 191),
        ("FAILED", now - 200, now - 100),
    )
    failed = job(
        "failed_hour", **report_, failed=True, finished_at=now - 2000, retry_count=3,
        attempt_count=4, error_code="TIMEOUT:UPSTREAM_API",
    )  # fmt: skip
    _attempts(
        failed,
        ("FAILED", now - 2500, now - 2499),
        ("FAILED", now - 2400, now - 2398),
        ("FAILED", now - 2300, now - 2297),
        ("FAILED", now - 2004, now - 2000),
    )
    job(
        "failed_91d", **report_, failed=True, created_at=now - 92 * DAY,
        finished_at=now - 91 * DAY, retry_count=0, error_code="INTERNAL:BUG",
    )  # fmt: skip
    job(
        "failed_89d", **send, failed=True, created_at=now - 90 * DAY,
        finished_at=now - 89 * DAY, retry_count=3, error_code="TIMEOUT:SMTP",
    )  # fmt: skip

    # CANCELLED: one past 30 days, one within five minutes.
    job(
        "cancelled_31d",
        **resize,
        cancelled=True,
        created_at=now - 32 * DAY,
        finished_at=now - 31 * DAY,
    )
    job("cancelled_recent", **send, cancelled=True, finished_at=now - 200)
    session.commit()
    return ids


@pytest.fixture
def known(session, queue, clock):
    clock.set(NOW)
    return build_known_queue(session)


# ------------------------------------------------------------- 1. jobs by state


def test_counts_by_status_queue_and_type_match_the_fixture(queue, known):
    counts = queue.stats().counts

    assert counts.by_status == {
        "WAITING": 0,
        "QUEUED": 4, "CLAIMED": 1, "RUNNING": 2, "SUCCEEDED": 4, "FAILED": 4, "CANCELLED": 2,
    }  # fmt: skip
    assert counts.total == 17
    assert counts.by_queue == {
        "default": {"QUEUED": 3, "RUNNING": 2, "SUCCEEDED": 4, "FAILED": 3, "CANCELLED": 1},
        "emails": {"QUEUED": 1, "CLAIMED": 1, "FAILED": 1, "CANCELLED": 1},
    }
    assert counts.by_type == {
        "report": {"RUNNING": 1, "FAILED": 3},
        "resize": {"QUEUED": 3, "RUNNING": 1, "SUCCEEDED": 4, "CANCELLED": 1},
        "send": {"QUEUED": 1, "CLAIMED": 1, "FAILED": 1, "CANCELLED": 1},
    }


def test_jobs_waiting_for_their_parents_are_counted_apart(queue, clock):
    parent = queue.enqueue("fetch", queue="emails").id
    queue.enqueue("report", queue="emails", depends_on=[parent])

    counts = queue.stats().counts

    assert (counts.by_status["WAITING"], counts.by_status["QUEUED"]) == (1, 1)
    assert counts.by_queue == {"emails": {"QUEUED": 1, "WAITING": 1}}
    assert queue.counts_by_status()["WAITING"] == 1


def test_queue_latency_is_the_age_of_the_oldest_ready_job_per_queue(queue, known):
    stats = queue.stats()

    latency = {q.queue: q for q in stats.latency}
    assert (latency["default"].latency_seconds, latency["default"].ready) == (100, 2)
    assert latency["default"].scheduled == 1
    assert (latency["emails"].latency_seconds, latency["emails"].ready) == (30, 1)
    assert stats.oldest_ready_latency_seconds == 100


def test_stats_on_an_empty_queue_report_zeros(queue):
    stats = queue.stats()

    assert stats.counts.total == 0
    assert set(stats.counts.by_status.values()) == {0}
    assert (stats.latency, stats.oldest_held, stats.errors, stats.durations) == ([], [], [], [])
    assert stats.leases.expired == 0
    assert [t.failure_rate for t in stats.throughput] == [None, None]


# -------------------------------------------------- 2. oldest in-progress jobs


def test_oldest_in_progress_job_comes_first_with_its_worker_and_whether_it_is_alive(queue, known):
    held = queue.stats().oldest_held

    assert [h.id for h in held] == [
        known["running_silent"],
        known["claimed_gone"],
        known["running_alive"],
    ]
    silent, gone, alive = held
    assert (silent.silent_seconds, silent.held_seconds, silent.claimed_by) == (700, 900, "w-silent")
    assert (silent.worker_state, silent.worker_last_seen_at) == (WorkerState.SILENT, NOW - 600)
    assert silent.lease_expired and silent.attempt == 2
    assert (gone.worker_state, gone.status, gone.attempt) == (
        WorkerState.UNREGISTERED,
        "CLAIMED",
        1,
    )
    assert (alive.worker_state, alive.silent_seconds, alive.lease_expired) == (
        WorkerState.ALIVE, 10, False,
    )  # fmt: skip


def test_leases_expired_but_not_yet_swept_are_counted(queue, known):
    leases = queue.stats().leases

    assert (leases.expired, leases.oldest_expired_at, leases.past_deadline) == (1, NOW - 670, 1)


def test_workers_are_listed_with_their_state_and_held_jobs(queue, known):
    workers = queue.stats(worker_stale_seconds=60).workers

    assert [(w.id, w.state, w.seen_seconds_ago, w.held_jobs) for w in workers] == [
        ("w-alive", WorkerState.ALIVE, 5, 1),
        ("w-silent", WorkerState.SILENT, 600, 1),
    ]


# ------------------------------------------------------------------- 3. retries


def test_retry_distribution_splits_unfinished_and_failed_jobs_per_type(queue, known):
    retries = queue.stats().retries

    assert [(b.type, b.retry_count, b.unfinished, b.failed) for b in retries] == [
        ("report", 0, 0, 1),
        ("report", 1, 1, 0),
        ("report", 3, 0, 2),
        ("resize", 0, 4, 0),
        ("send", 0, 1, 0),
        ("send", 2, 1, 0),
        ("send", 3, 0, 1),
    ]


def test_the_type_that_keeps_failing_ranks_first_with_its_recent_failure_rate(queue, known):
    types = queue.stats().types

    assert [t.type for t in types] == ["report", "send", "resize"]
    report_type = types[0]
    assert (report_type.failed_recent, report_type.succeeded_recent) == (2, 0)
    assert report_type.failure_rate_recent == 1.0
    assert (report_type.failed_total, report_type.retrying, report_type.max_retry_count) == (
        3,
        1,
        3,
    )
    assert (types[2].succeeded_recent, types[2].failure_rate_recent) == (2, 0.0)


# ----------------------------------------------------------- 4. failure reasons


def test_failure_reasons_are_ranked_by_error_code(queue, known):
    errors = queue.stats(top_n=2).errors

    assert [(e.error_code, e.failed, e.retrying) for e in errors] == [
        ("TIMEOUT:UPSTREAM_API", 2, 1),
        ("TIMEOUT:SMTP", 1, 1),
    ]


# ------------------------------------------------- throughput and durations


def test_throughput_counts_jobs_finished_within_each_window(queue, known):
    throughput = queue.stats(windows=(300, 3600)).throughput

    assert [(t.window_seconds, t.succeeded, t.failed, t.cancelled) for t in throughput] == [
        (300, 1, 1, 1),
        (3600, 2, 2, 1),
    ]
    assert [t.failure_rate for t in throughput] == [0.5, 0.5]


def test_attempt_durations_per_type_are_nearest_rank_percentiles(queue, known):
    durations = queue.stats().durations

    assert [(d.type, d.attempts, d.p50, d.p95, d.max) for d in durations] == [
        ("report", 8, 4, 100, 100),
        ("resize", 3, 20, 30, 30),
    ]


def test_percentile_rank_is_the_ceiling_of_p_times_n():
    assert [percentile_rank(50, n) for n in (1, 2, 3, 8)] == [1, 1, 2, 4]
    assert [percentile_rank(95, n) for n in (1, 8, 20, 21)] == [1, 8, 19, 20]


# ------------------------------------------------------------------ 5. retention


def test_retention_reports_policy_oldest_job_and_what_is_due(queue, known):
    retention = queue.stats().retention

    assert [
        (r.status, r.keep_days, r.jobs, r.oldest_age_seconds, r.due_for_prune) for r in retention
    ] == [
        ("SUCCEEDED", 30, 4, 40 * DAY, 2),
        ("CANCELLED", 30, 2, 31 * DAY, 1),
        ("FAILED", 90, 4, 91 * DAY, 1),
    ]


# ---------------------------------------------------------------- read-only path


def test_stats_run_while_another_connection_holds_the_write_lock(db_url, engine, clock):
    impatient = sqlq_orm.create_engine(db_url, busy_timeout_ms=100)
    queue = sqlq_orm.Queue(impatient, clock=clock)
    queue.enqueue("resize")

    with engine.begin() as writer:  # its INSERT takes SQLite's write lock until commit
        writer.execute(insert(queue.tables.workers).values(
            id="w-1", hostname="h", pid=1, queues="default", concurrency=1,
            started_at=NOW, last_seen_at=NOW,
        ))  # fmt: skip
        stats = queue.stats()
    impatient.dispose()

    assert stats.counts.by_status["QUEUED"] == 1


def test_stats_reject_bad_arguments_and_name_the_value(queue):
    with pytest.raises(InvalidInput, match="top_n must be >= 1, got 0"):
        queue.stats(top_n=0)
    with pytest.raises(InvalidInput, match="window must be >= 1, got -5"):
        queue.stats(windows=(-5,))


# ---------------------------------------------------------------- job timeline


def test_job_timeline_has_attempts_and_events_in_order_and_no_lease_token(queue, clock):
    job = queue.enqueue("send", {"to": "a@example.com"}, max_retries=1)
    (lease,) = queue.claim("w-1", start=True)
    clock.advance(5)
    queue.fail(lease, "TIMEOUT:SMTP", "timed out")
    clock.advance(60)
    (lease,) = queue.claim("w-2", start=True)
    clock.advance(3)
    queue.succeed(lease)

    timeline = observability.job_timeline(queue, job.id)

    assert (timeline.job.status, timeline.job.payload, timeline.job.retry_count) == (
        "SUCCEEDED", {"to": "a@example.com"}, 1,
    )  # fmt: skip
    assert [(a.attempt, a.worker_id, a.status, a.duration_seconds) for a in timeline.attempts] == [
        (1, "w-1", "FAILED", 5),
        (2, "w-2", "SUCCEEDED", 3),
    ]
    assert [e.event for e in timeline.events] == [
        "ENQUEUED", "CLAIMED", "STARTED", "RETRY_SCHEDULED", "CLAIMED", "STARTED", "SUCCEEDED",
    ]  # fmt: skip
    rendered = report.render_timeline_text(timeline) + report.render_timeline_json(timeline)
    assert lease.token not in rendered
    assert "lease_token" not in rendered


def test_job_timeline_of_a_held_job_names_its_worker_state(queue, known):
    timeline = observability.job_timeline(queue, known["running_silent"])

    assert timeline.worker_state is WorkerState.SILENT
    assert (timeline.worker.id, timeline.worker.seen_seconds_ago, timeline.worker.held_jobs) == (
        "w-silent", 600, 1,
    )  # fmt: skip
    assert [a.duration_seconds for a in timeline.attempts] == [100, 900]  # open one: so far


def test_job_timeline_of_a_missing_job_raises_job_not_found(queue):
    with pytest.raises(JobNotFound, match="no job with id 424242"):
        observability.job_timeline(queue, 424242)


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, True, "7"])
def test_job_timeline_of_a_value_no_job_can_have_names_job_id(queue, bad):
    with pytest.raises(InvalidInput, match=r"^job_id must be an? "):
        observability.job_timeline(queue, bad)


# ------------------------------------------------------------------- rendering


def test_text_report_answers_the_five_questions_without_colour_unless_asked(queue, known):
    stats = queue.stats()

    plain = report.render_stats_text(stats)
    coloured = report.render_stats_text(stats, color=True)

    for heading in (
        "1. Jobs by state",
        "2. Oldest in-progress",
        "3. Retries",
        "4. Top failure",
        "5. Retention",
    ):
        assert heading in plain
    assert "\033[" not in plain and "\033[" in coloured
    assert "EXPIRED 11m10s ago" in plain  # the silent worker's lease
    assert "TIMEOUT:UPSTREAM_API" in plain


def test_json_report_carries_the_numbers_and_derived_rates(queue, known):
    data = json.loads(report.render_stats_json(queue.stats()))

    assert data["counts"]["by_status"]["FAILED"] == 4
    assert data["counts"]["total"] == 17
    assert data["oldest_held"][0]["worker_state"] == "silent"
    assert data["throughput"][0]["failure_rate"] == 0.5
    assert data["errors"][0] == {
        "error_code": "TIMEOUT:UPSTREAM_API", "failed": 2, "retrying": 1, "total": 3,
    }  # fmt: skip


def test_prometheus_exposition_has_one_sample_per_queue_and_status(queue, known):
    text = report.render_stats_prometheus(queue.stats())

    samples = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert samples['sqlq_jobs{queue="default",status="QUEUED"}'] == "3"
    assert samples['sqlq_jobs{queue="emails",status="RUNNING"}'] == "0"
    assert samples['sqlq_queue_latency_seconds{queue="default"}'] == "100"
    assert samples["sqlq_expired_leases"] == "1"
    assert samples['sqlq_failed_jobs_by_error_code{error_code="TIMEOUT:UPSTREAM_API"}'] == "2"
    assert samples['sqlq_attempt_duration_seconds{type="report",quantile="0.95"}'] == "100"
    assert "# TYPE sqlq_jobs gauge" in text
