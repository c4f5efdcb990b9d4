"""A task's secret arguments (``redact=``) stay out of what is displayed, on every backend.

A new-account email task took the user's password as an argument; ``sqlq show``, the
dashboard and thirty days of retention displayed it. With
``@registry.task(redact=("password",))`` the job's timeline (what ``sqlq show`` and the
dashboard print) shows ``[redacted]``, the library's own message about a stored value
that no longer fits leaves it out of the error detail, the events and the log, and
the handler still gets the value.
"""

from __future__ import annotations

import json
import logging

import pydantic
import pytest

import sqlq_orm
from sqlq_orm import InvalidInput, JobContext
from sqlq_orm.core.redaction import REDACTED
from sqlq_orm.ops.render.timeline import render_timeline_text
from sqlq_orm.tasks import ARGUMENTS_DO_NOT_BIND

SECRET = "hunter2-s3cret"


class Pin(pydantic.BaseModel):
    digits: int


def drain(registry: sqlq_orm.TaskRegistry) -> None:
    sqlq_orm.Worker(registry.queue, registry, burst=True, sweep_interval=None).run()


def test_a_redacted_argument_is_shown_redacted_and_reaches_the_handler(queue):
    registry = sqlq_orm.TaskRegistry(queue)
    got = []

    @registry.task(name="welcome", redact=("password",))
    def welcome(ctx: JobContext, email: str, password: str) -> None:
        got.append((email, password))

    job = welcome.enqueue("a@example.com", SECRET)

    timeline = sqlq_orm.job_timeline(queue, job.id)
    assert timeline.job.payload["password"] == REDACTED
    assert timeline.job.payload["email"] == "a@example.com"
    assert SECRET not in render_timeline_text(timeline)
    drain(registry)
    assert got == [("a@example.com", SECRET)]
    shown = sqlq_orm.job_timeline(queue, job.id)
    assert SECRET not in render_timeline_text(shown)
    assert SECRET not in json.dumps([e.detail for e in shown.events], default=str)


def test_a_stored_secret_that_no_longer_fits_is_left_out_of_the_error_and_the_log(
    queue, caplog
):
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(name="unlock", redact=("pin",), max_retries=0)
    def unlock(pin: Pin) -> None:
        raise AssertionError("must not be called")

    # Stored by an older deploy whose pin was a string: pydantic's error quotes it.
    stale = queue.enqueue(
        "unlock", {"pin": {"digits": SECRET}, "__sqlq__": {"redact": ["pin"]}}, max_retries=0
    )
    with caplog.at_level(logging.INFO, logger="sqlq_orm"):
        drain(registry)

    job = queue.get_job(stale.id)
    assert (job.status, job.error_code) == ("FAILED", ARGUMENTS_DO_NOT_BIND)
    assert "'pin' does not fit" in job.error_detail and SECRET not in job.error_detail
    timeline = sqlq_orm.job_timeline(queue, stale.id)
    assert SECRET not in render_timeline_text(timeline)
    assert SECRET not in caplog.text


def test_redact_must_name_parameters_of_the_task(queue):
    registry = sqlq_orm.TaskRegistry(queue)

    with pytest.raises(InvalidInput, match="redact= names 'passwd', which is not a parameter"):

        @registry.task(name="signup", redact=("passwd",))
        def signup(email: str, password: str) -> None: ...

    with pytest.raises(InvalidInput, match=r"redact=\('password',\)"):

        @registry.task(name="signup2", redact="password")
        def signup2(email: str, password: str) -> None: ...


def test_a_secret_that_cannot_be_stored_is_not_quoted_in_the_refusal(queue):
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(name="store", redact=("token",))
    def store(token: object) -> None: ...

    with pytest.raises(InvalidInput) as refused:
        store.enqueue({SECRET})  # a set is not JSON

    assert "argument 'token' must be JSON" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_a_secret_that_does_not_match_its_annotation_is_not_quoted_in_the_refusal(queue):
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(name="store", redact=("token",))
    def store(token: str) -> None: ...

    with pytest.raises(InvalidInput) as refused:
        store.enqueue({SECRET})  # a set where a str is annotated

    assert "token must be str, got [redacted]" in str(refused.value)
    assert SECRET not in str(refused.value)
