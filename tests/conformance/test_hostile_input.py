"""Bad input and hostile data: stored verbatim and harmless, refused with a clear error
before anything is written, or caught by the database's own constraints."""

from __future__ import annotations

import json
import multiprocessing
import threading

import pytest
import sqlalchemy
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

import sqlq_orm
from sqlq_orm import InvalidInput, JobError, JobStatus, Worker, migrate
from sqlq_orm.core.error_codes import CORRUPT_PAYLOAD, TRUNCATION_MARK
from sqlq_orm.ops.invariants import check
from sqlq_orm.schema.mixins import ERROR_DETAIL_MAX

HOSTILE = [
    "'; DROP TABLE sqlq_jobs; --",
    "Robert'); DELETE FROM sqlq_job_events WHERE ('1'='1",
    '" OR 1=1 --',
    "%s %(p_id)s :p_id ? $1 {0}",
    "ünïcødé ✓ 日本語 🚀 \u202eevil",
    "back\\slash 'single' \"double\" `tick`",
]


def all_tables_present(engine) -> bool:
    names = set(sqlalchemy.inspect(engine).get_table_names())
    return {"sqlq_jobs", "sqlq_job_attempts", "sqlq_job_events", "sqlq_workers"} <= names


# ------------------------------------------------------------ stored verbatim, harmless


@pytest.mark.parametrize("evil", HOSTILE)
def test_sql_looking_text_is_stored_verbatim_and_harms_nothing(engine, queue, clock, evil):
    job = queue.enqueue(evil, {evil: [evil]}, queue=evil, dedupe_key=evil)
    (first,) = queue.claim(evil, queues=[evil], start=True)
    queue.fail(first, "HOSTILE:INPUT", evil)
    clock.advance(3600)
    (second,) = queue.claim(evil, queues=[evil], start=True)
    queue.succeed(second, result_ref=evil)
    queue.register_worker(evil, hostname=evil, pid=1, queues=[evil], concurrency=1)

    stored = queue.get_job(job.id)
    assert (stored.type, stored.queue, stored.claimed_by) == (evil, evil, evil)
    assert (stored.dedupe_key, stored.result_ref) == (evil, evil)
    assert json.loads(stored.payload) == {evil: [evil]} == second.payload
    assert stored.attempts[0].error_detail == evil
    assert {e.actor for e in stored.events} == {"system", evil}
    assert all_tables_present(engine)
    assert queue.counts_by_status()["SUCCEEDED"] == 1
    assert check(queue) == []


def test_hostile_error_code_is_refused_and_the_job_keeps_its_lease(queue):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)

    with pytest.raises(InvalidInput, match="error_code must be CATEGORY:SUBCATEGORY"):
        queue.fail(lease, "X:Y'; DROP TABLE sqlq_jobs; --")

    assert queue.get_job(lease.job_id).status == JobStatus.RUNNING.value
    queue.succeed(lease)


def test_nul_inside_a_payload_round_trips(queue):
    if queue.dialect.json_refuses_nul:
        pytest.skip("PostgreSQL's JSONB cannot store NUL: refused (next test)")
    queue.enqueue("t", {"bytes": "a\x00b", "\x00": None})

    (lease,) = queue.claim("worker-a")

    assert lease.payload == {"bytes": "a\x00b", "\x00": None}


@pytest.mark.parametrize("payload", [{"bytes": "a\x00b"}, {"\x00": 1}, ["\x00"]])
def test_nul_inside_a_payload_is_refused_where_json_cannot_hold_it(queue, payload):
    if not queue.dialect.json_refuses_nul:
        pytest.skip("this database's JSON column stores NUL (previous test)")

    with pytest.raises(InvalidInput, match=r"payload holds the character NUL .* JSONB"):
        queue.enqueue("t", payload)
    with pytest.raises(InvalidInput, match=r"payload holds the character NUL"):
        queue.enqueue_many([{"type": "t", "payload": {"ok": 1}}, {"type": "t", "payload": payload}])

    assert sum(queue.counts_by_status().values()) == 0


def test_escaped_backslash_before_u0000_is_not_taken_for_nul(queue):
    payload = {"path": "C:\\u0000", "twice": "\\\\u0000"}
    queue.enqueue("t", payload)

    (lease,) = queue.claim("worker-a")

    assert lease.payload == payload


def test_nul_inside_a_result_is_refused_where_json_cannot_hold_it(queue):
    if not queue.dialect.json_refuses_nul:
        pytest.skip("this database's JSON column stores NUL")
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)

    with pytest.raises(InvalidInput, match=r"result holds the character NUL"):
        queue.succeed(lease, result="a\x00b")

    assert queue.get_job(lease.job_id).status == JobStatus.RUNNING.value
    queue.succeed(lease, result="ab")


@pytest.mark.parametrize("argument", ["type", "queue", "dedupe_key"])
def test_nul_in_a_name_is_refused_before_anything_is_written(queue, argument):
    arguments = {"type": "t", argument: "evil\x00name"}

    with pytest.raises(InvalidInput, match=f"{argument} must not contain NUL"):
        queue.enqueue(arguments.pop("type"), **arguments)

    assert sum(queue.counts_by_status().values()) == 0


def test_nul_in_a_worker_id_is_refused_and_nothing_is_claimed(queue):
    job = queue.enqueue("t")

    with pytest.raises(InvalidInput, match="worker_id must not contain NUL"):
        queue.claim("worker\x00a")

    assert queue.get_job(job.id).status == JobStatus.QUEUED.value


def test_nul_in_an_error_detail_is_recorded_visibly(queue):
    queue.enqueue("t", max_retries=0)
    (lease,) = queue.claim("worker-a", start=True)

    outcome = queue.fail(lease, "PARSE:BINARY", "bad byte \x00 here")

    assert outcome is JobStatus.FAILED
    assert queue.get_job(lease.job_id).error_detail == "bad byte \\x00 here"


def test_huge_error_detail_is_truncated_in_the_job_and_its_attempt(queue):
    queue.enqueue("t", max_retries=0)
    (lease,) = queue.claim("worker-a", start=True)

    queue.fail(lease, "INTERNAL:BUG", "x" * 1_000_000)

    job = queue.get_job(lease.job_id)
    for detail in (job.error_detail, job.attempts[0].error_detail):
        assert len(detail) == ERROR_DETAIL_MAX
        assert detail.endswith(TRUNCATION_MARK)


def test_huge_payload_is_refused_before_anything_is_written(queue):
    with pytest.raises(InvalidInput, match="payload is .* bytes of JSON; the limit is"):
        queue.enqueue("t", {"blob": "x" * 100_000})

    assert sum(queue.counts_by_status().values()) == 0


# ------------------------------------------------------------------ corrupt payloads


CORRUPT_JSON = '{"oops": [1, 2'


def corrupt_payload(engine, job_id: int) -> None:
    if engine.dialect.name != "sqlite":
        pytest.skip("the JSON column refuses text that is not JSON (see the test below)")
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE sqlq_jobs SET payload = :bad WHERE id = :id"),
            {"bad": CORRUPT_JSON, "id": job_id},
        )


def test_payload_corrupted_in_the_database_reads_as_a_non_retryable_job_error(engine, queue):
    job = queue.enqueue("t", {"ok": True})
    corrupt_payload(engine, job.id)
    (lease,) = queue.claim("worker-a", start=True)

    with pytest.raises(JobError) as raised:
        _ = lease.payload

    assert (raised.value.code, raised.value.retryable) == (CORRUPT_PAYLOAD, False)
    assert str(job.id) in raised.value.detail


def test_worker_fails_a_job_with_a_corrupt_payload_and_keeps_going(engine):
    queue = sqlq_orm.Queue(engine)
    ids = [queue.enqueue("echo", {"n": n}).id for n in range(3)]
    corrupt_payload(engine, ids[1])
    seen = []
    worker = Worker(
        queue, {"echo": lambda ctx: seen.append(ctx.payload["n"])}, poll_interval=0.05,
        sweep_interval=None, burst=True, install_signal_handlers=False,
    )  # fmt: skip

    run = threading.Thread(target=worker.run, daemon=True)
    run.start()
    run.join(60)

    assert not run.is_alive()
    jobs = [queue.get_job(job_id) for job_id in ids]
    assert [j.status for j in jobs] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]
    assert jobs[1].error_code == CORRUPT_PAYLOAD
    assert sorted(seen) == [0, 2]
    assert check(queue) == []


@pytest.mark.parametrize("column", ["payload", "result"])
def test_json_column_refuses_text_that_is_not_json(engine, queue, column):
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite keeps TEXT: a corrupt value is reported per job (tests above)")
    job = queue.enqueue("t", {"ok": True})

    with pytest.raises(sqlalchemy.exc.DBAPIError), engine.begin() as connection:
        connection.execute(
            text(f"UPDATE sqlq_jobs SET {column} = :bad WHERE id = :id"),
            {"bad": CORRUPT_JSON, "id": job.id},
        )

    (lease,) = queue.claim("worker-a", start=True)
    assert lease.payload == {"ok": True}


# ---------------------------------------------------- the database refuses bad rows


REFUSED = {
    "unknown_status": "UPDATE sqlq_jobs SET status = 'BOGUS' WHERE id = :id",
    "running_without_a_lease": "UPDATE sqlq_jobs SET status = 'RUNNING', started_at = 1 "
    "WHERE id = :id",
    "finished_without_finished_at": "UPDATE sqlq_jobs SET status = 'SUCCEEDED' WHERE id = :id",
    "queued_holding_a_lease": "UPDATE sqlq_jobs SET lease_token = 'x', lease_expires_at = 1 "
    "WHERE id = :id",
    "negative_retry_count": "UPDATE sqlq_jobs SET retry_count = -1 WHERE id = :id",
    "negative_max_retries": "UPDATE sqlq_jobs SET max_retries = -1 WHERE id = :id",
    "attempt_number_zero": "INSERT INTO sqlq_job_attempts (job_id, attempt, started_at, status) "
    "VALUES (:id, 0, 1, 'RUNNING')",
    "unknown_attempt_status": "INSERT INTO sqlq_job_attempts "
    "(job_id, attempt, started_at, status) VALUES (:id, 1, 1, 'BOGUS')",
    "closed_attempt_without_finished_at": "INSERT INTO sqlq_job_attempts "
    "(job_id, attempt, started_at, status) VALUES (:id, 1, 1, 'FAILED')",
    "unknown_event": "INSERT INTO sqlq_job_events (job_id, ts, event, actor) "
    "VALUES (:id, 1, 'TELEPORTED', 'x')",
    "attempt_of_a_missing_job": "INSERT INTO sqlq_job_attempts "
    "(job_id, attempt, started_at, status) VALUES (:id + 1000, 1, 1, 'RUNNING')",
    "event_of_a_missing_job": "INSERT INTO sqlq_job_events (job_id, ts, event, actor) "
    "VALUES (:id + 1000, 1, 'ENQUEUED', 'x')",
}


@pytest.mark.parametrize("statement", REFUSED.values(), ids=REFUSED.keys())
def test_database_refuses_an_inconsistent_row(engine, queue, statement):
    job = queue.enqueue("t")
    before = queue.get_job(job.id)

    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(text(statement), {"id": job.id})

    after = queue.get_job(job.id)
    assert (after.status, after.retry_count, after.lease_token) == (
        before.status,
        before.retry_count,
        before.lease_token,
    )
    assert len(after.attempts) == 0 and len(after.events) == 1
    assert check(queue) == []


def test_a_second_attempt_with_the_same_number_is_refused(engine, queue):
    queue.enqueue("t")
    (lease,) = queue.claim("worker-a", start=True)

    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO sqlq_job_attempts (job_id, attempt, started_at, status) "
                "VALUES (:id, 1, 1, 'RUNNING')"
            ),
            {"id": lease.job_id},
        )

    assert check(queue) == []


# ------------------------------------------------------------------------ migrations


def test_migrating_twice_is_harmless(db_url):
    migrate.upgrade(db_url)
    engine = sqlq_orm.create_engine(db_url)
    queue = sqlq_orm.Queue(engine)
    job = queue.enqueue("t", {"keep": "me"})
    revisions = migrate.current(db_url)

    migrate.upgrade(db_url)

    assert migrate.current(db_url) == revisions
    assert json.loads(queue.get_job(job.id).payload) == {"keep": "me"}
    assert migrate.check(db_url) == []
    assert check(queue) == []
    engine.dispose()


def _upgrade_after(barrier, db_url: str, results) -> None:
    barrier.wait()
    try:
        migrate.upgrade(db_url)
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        results.put(repr(exc))


def test_three_processes_migrating_at_once_is_harmless(db_url):
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(3), context.Queue()
    processes = [
        context.Process(target=_upgrade_after, args=(barrier, db_url, results)) for _ in range(3)
    ]

    for process in processes:
        process.start()
    for process in processes:
        process.join(120)

    assert [results.get(timeout=10) for _ in processes] == ["ok"] * 3
    assert migrate.check(db_url) == []
    assert len(migrate.current(db_url)) == 1
