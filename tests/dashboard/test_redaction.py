"""The dashboard's job page shows a task's ``redact=`` arguments as ``[redacted]``."""

from __future__ import annotations

import html

import sqlq_orm
from tests.dashboard.test_security import Raw

SECRET = "hunter2-s3cret"


def test_the_job_page_shows_a_redacted_argument_as_redacted(serve, queue):
    registry = sqlq_orm.TaskRegistry(queue)

    @registry.task(name="welcome", redact=("password",))
    def welcome(email: str, password: str) -> None: ...

    job = welcome.enqueue("a@example.com", SECRET)

    status, body, _ = Raw(serve().url).request("GET", f"/jobs/{job.id}")

    assert status == 200, body[-600:]
    assert SECRET not in body
    shown = html.unescape(body)
    assert '"password": "[redacted]"' in shown and '"email": "a@example.com"' in shown
