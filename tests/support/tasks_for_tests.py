"""A task registry for tests that load one by name (``sqlq check --handlers``)."""

from __future__ import annotations

from sqlq_orm import TaskRegistry

registry = TaskRegistry()


@registry.task(name="mail.send")
def send_email(to: str, subject: str) -> None:
    """``subject`` is new: jobs stored without it no longer bind."""


@registry.handler("plain")
def plain(ctx: object) -> None:
    pass


@registry.task(name="report.render")
def render_report(month: str, pages: int = 10, *, draft: bool = False) -> dict[str, int]:
    """Returns a result: ``sqlq show`` shows it beside the arguments."""
    return {"pages": pages}


@registry.task(name="account.welcome", redact=("password",))
def welcome(email: str, password: str) -> None:
    """Its password is kept out of ``sqlq show`` and the dashboard; it still arrives."""
    if password != "hunter2-s3cret":
        raise ValueError("the password did not arrive")
