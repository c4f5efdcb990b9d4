"""Bad input: each is refused with InvalidInput naming the argument and the value,
before anything is written (row counts and the job's whole state are unchanged)."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from sqlq_orm import InvalidInput, JobSpec, Queue
from tests.support.queue_helpers import row_counts, snapshot

BAD_ENQUEUES = [
    (("",), {}, "type must be a non-empty string, got ''"),
    (("   ",), {}, "type must be a non-empty string, got '   '"),
    ((None,), {}, "type must be a non-empty string, got None"),
    ((42,), {}, "type must be a non-empty string, got 42"),
    (("t" * 201,), {}, "type is 201 characters; the limit is 200"),
    (("t", {"when": datetime(2024, 1, 1)}), {}, "payload must be JSON-serialisable"),
    (("t", {"x": float("nan")}), {}, "payload must be JSON-serialisable"),
    (("t", {1, 2}), {}, "payload must be JSON-serialisable .* got a set"),
    (("t", "x" * 70_000), {}, "payload is 70002 bytes of JSON; the limit is 65536"),
    (("t", {1: "a"}), {}, r"payload keys must be strings: payload has the key 1 \(int\)"),
    (("t", {1: "a", "1": "b"}), {}, "payload keys must be strings: payload has the key 1"),
    (("t", {"a": [{"b": {2.5: 1}}]}), {}, r"payload\['a'\]\[0\]\['b'\] has the key 2.5"),
    (("t", [{"ok": {None: 1}}]), {}, r"payload\[0\]\['ok'\] has the key None"),
    (("t", {"flag": {True: 1}}), {}, "has the key True .* the string 'true'"),
    (("t",), {"queue": ""}, "queue must be a non-empty string, got ''"),
    (("t",), {"priority": "high"}, "priority must be an integer, got 'high'"),
    (("t",), {"priority": 2**31}, "priority must be <= 2147483647, got 2147483648"),
    (("t",), {"priority": True}, "priority must be an integer, got True"),
    (("t",), {"run_at": datetime(2030, 1, 1)}, "run_at must be timezone-aware, got naive"),
    (("t",), {"run_at": "soon"}, "run_at must be epoch seconds .* got 'soon'"),
    (("t",), {"run_at": -1}, "run_at must be >= 0, got -1"),
    (("t",), {"run_at": 1_800_000_000, "delay": 5}, "give run_at or delay, not both"),
    (("t",), {"delay": -1}, "delay must be between 0 and .* seconds, got -1"),
    (("t",), {"delay": float("inf")}, "delay must be between 0 and .* seconds, got inf"),
    (("t",), {"delay": float("nan")}, "delay must be between 0 and .* seconds, got nan"),
    (("t",), {"delay": "5"}, "delay must be a number of seconds, got '5'"),
    (("t",), {"max_retries": -1}, "max_retries must be >= 0, got -1"),
    (("t",), {"max_retries": 2.0}, "max_retries must be an integer, got 2.0"),
    (("t",), {"max_runtime_seconds": 0}, "max_runtime_seconds must be >= 1, got 0"),
    (("t",), {"dedupe_key": ""}, "dedupe_key must be a non-empty string, got ''"),
    (("t",), {"payload_ref": 7}, "payload_ref must be a non-empty string, got 7"),
    (("t",), {"tenant": "acme"}, r"unknown job column\(s\) \['tenant'\]"),
]


@pytest.mark.parametrize(("args", "kwargs", "message"), BAD_ENQUEUES)
def test_bad_enqueue_is_refused_and_writes_nothing(queue, engine, args, kwargs, message):
    queue.enqueue("existing")
    before = row_counts(engine)

    with pytest.raises(InvalidInput, match=message):
        queue.enqueue(*args, **kwargs)
    assert row_counts(engine) == before


def test_a_bad_job_in_a_bulk_enqueue_is_named_by_position(queue, engine):
    before = row_counts(engine)
    with pytest.raises(InvalidInput, match=r"job #1 of enqueue_many: priority must be an integer"):
        queue.enqueue_many([{"type": "a"}, {"type": "b", "priority": "x"}])
    with pytest.raises(InvalidInput, match=r"job #0 of enqueue_many: unknown job column"):
        queue.enqueue_many([{"type": "a", "tenant": "acme"}])
    with pytest.raises(InvalidInput, match=r"job #1 of enqueue_many: payload keys must be str"):
        queue.enqueue_many([{"type": "a"}, {"type": "b", "payload": {"n": {7: "seven"}}}])
    assert row_counts(engine) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"worker_id": ""}, "worker_id must be a non-empty string, got ''"),
        ({"limit": 0}, "limit must be >= 1, got 0"),
        ({"limit": 1001}, "limit must be <= 1000, got 1001"),
        ({"limit": True}, "limit must be an integer, got True"),
        ({"lease_seconds": 0}, "lease_seconds must be >= 2, got 0"),
        ({"lease_seconds": -30}, "lease_seconds must be >= 2, got -30"),
        ({"lease_seconds": 2**40}, "lease_seconds must be <= 2147483647"),
        ({"queues": [""]}, "queue must be a non-empty string, got ''"),
    ],
)
def test_bad_claim_is_refused_and_claims_nothing(queue, engine, kwargs, message):
    job = queue.enqueue("waiting")
    before = snapshot(engine, job.id)
    arguments = {"worker_id": "worker-a", **kwargs}

    with pytest.raises(InvalidInput, match=re.escape(message) if "(" in message else message):
        queue.claim(arguments.pop("worker_id"), **arguments)
    assert snapshot(engine, job.id) == before


@pytest.mark.parametrize(
    "code",
    ["", "TIMEOUT", "A:B:C", "1X:Y", "TIMEOUT:", ":UPSTREAM", "TIME OUT!:X", 42, None],
)
def test_malformed_error_code_is_refused_and_the_job_is_untouched(queue, engine, code):
    job = queue.enqueue("render")
    (lease,) = queue.claim("worker-a", start=True)
    before = snapshot(engine, job.id)

    with pytest.raises(InvalidInput, match=re.escape(repr(code))):
        queue.fail(lease, code, "detail")
    assert snapshot(engine, job.id) == before


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q, lease: q.heartbeat(lease, lease_seconds=0), "lease_seconds must be >= 2, got 0"),
        (lambda q, lease: q.succeed(lease, result_ref=""), "result_ref must be a non-empty"),
        (lambda q, lease: q.heartbeat("a lease"), "expected a Lease returned by claim()"),
        (lambda q, lease: q.sweep(batch_size=0), "batch_size must be >= 1, got 0"),
        (lambda q, lease: q.cancel("7"), "job_id must be an integer, got '7'"),
        (lambda q, lease: q.retry(None), "job_id must be an integer, got None"),
    ],
)
def test_other_bad_arguments_are_refused_and_change_nothing(queue, engine, call, message):
    job = queue.enqueue("render")
    (lease,) = queue.claim("worker-a", start=True)
    before = snapshot(engine, job.id)

    with pytest.raises(InvalidInput, match=re.escape(message)):
        call(queue, lease)
    assert snapshot(engine, job.id) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"default_lease_seconds": 0}, "lease_seconds must be >= 2, got 0"),
        ({"payload_max_bytes": 0}, "payload_max_bytes must be >= 1, got 0"),
    ],
)
def test_bad_queue_settings_are_refused(engine, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        Queue(engine, **kwargs)


def test_queue_needs_an_engine_or_a_bound_sessionmaker():
    from sqlalchemy.orm import sessionmaker

    with pytest.raises(InvalidInput, match="needs an Engine or a sessionmaker, got 'sqlite://'"):
        Queue("sqlite://")
    with pytest.raises(InvalidInput, match="must be bound to an Engine"):
        Queue(sessionmaker())


# ------------------------------------------------------------- job ids (issue 23, item 9)

NOT_JOB_IDS = [
    pytest.param(2**63, "must be a job id from 1 to", id="2**63"),
    pytest.param(2**64, "must be a job id from 1 to", id="2**64"),
    pytest.param(-(2**63) - 1, "must be a job id from 1 to", id="-2**63-1"),
    pytest.param(0, "must be a job id from 1 to", id="zero"),
    pytest.param(True, "must be an integer", id="bool"),
    pytest.param(1.0, "must be an integer", id="float"),
    pytest.param("1", "must be an integer", id="str"),
]

JOB_ID_CALLS = {
    "cancel": (lambda q, bad: q.cancel(bad), "job_id"),
    "retry": (lambda q, bad: q.retry(bad), "job_id"),
    "get_job": (lambda q, bad: q.get_job(bad), "job_id"),
    "dependencies_of": (lambda q, bad: q.dependencies_of(bad), "job_id"),
    "enqueue(depends_on=)": (lambda q, bad: q.enqueue("c", depends_on=[bad]), "depends_on[0]"),
    "enqueue_many(depends_on=)": (
        lambda q, bad: q.enqueue_many([JobSpec("c", depends_on=[1, bad])]),
        "job #0 of enqueue_many: depends_on[1]",
    ),
}


@pytest.mark.parametrize(("bad", "message"), NOT_JOB_IDS)
@pytest.mark.parametrize("call", JOB_ID_CALLS.values(), ids=JOB_ID_CALLS.keys())
def test_a_value_no_job_can_have_is_refused_naming_the_argument(queue, engine, call, bad, message):
    queue.enqueue("existing")
    before = row_counts(engine)
    function, argument = call

    with pytest.raises(InvalidInput) as raised:
        function(queue, bad)

    assert str(raised.value).startswith(f"{argument} {message}"), raised.value
    assert repr(bad) in str(raised.value)
    assert row_counts(engine) == before
