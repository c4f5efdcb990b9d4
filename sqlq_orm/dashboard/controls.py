"""The writes on queues and schedules: pause and resume a queue, set or clear its rate
limit; run a schedule now, pause and resume it.

Like the job actions (:mod:`sqlq_orm.dashboard.actions`): ``GET`` confirms what would
change, ``POST`` (CSRF-checked, refused while actions are disabled) does it through the
library (:meth:`Queue.pause_queue <sqlq_orm.Queue.pause_queue>`, ``resume_queue``,
``set_rate_limit``, ``clear_rate_limit``, ``run_schedule_now``, ``pause_schedule``,
``resume_schedule``) and redirects (303) to its outcome. Running a schedule now needs
its declaration (type, payload, options live in code): the host passes its registry's
schedules to ``create_app(..., schedules=registry.schedules)``; without it the page
says so.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sqlq_orm.core import validation
from sqlq_orm.core.schedule import Schedule
from sqlq_orm.dashboard.actions import ACTOR, DISABLED, KEPT_OUTCOMES, MAX_FORM_BYTES, read_capped
from sqlq_orm.dashboard.rendering import Renderer
from sqlq_orm.dashboard.security import CSRF_COOKIE, CSRF_FIELD, CsrfTokens
from sqlq_orm.errors import InvalidInput, SqlqError
from sqlq_orm.queue.queue import Queue
from sqlq_orm.schema.mixins import QUEUE_MAX, SCHEDULE_NAME_MAX


@dataclass(frozen=True)
class Control:
    """One write on a named queue or schedule."""

    name: str
    verb: str
    target: str
    """``queue`` or ``schedule``: what the ``name`` field names."""
    explanation: str
    danger: bool = False


CONTROLS = {
    control.name: control
    for control in (
        Control(
            "pause-queue", "Pause queue", "queue",
            "Workers stop starting its jobs until it is resumed; jobs already running "
            "finish, and new jobs can still be enqueued (they wait).",
            danger=True,
        ),
        Control(
            "resume-queue", "Resume queue", "queue",
            "Workers claim its jobs again, and its idle workers are woken.",
        ),
        Control(
            "limit-queue", "Limit queue", "queue",
            "Workers start at most this many of its jobs in any window of this many "
            "seconds, counted per rate key (jobs without one share one count); jobs over "
            "the limit wait in QUEUED. Replaces the queue's limit if it has one.",
        ),
        Control(
            "unlimit-queue", "Remove rate limit of queue", "queue",
            "Workers start its jobs as fast as they claim them again.",
        ),
        Control(
            "run-schedule", "Run schedule now", "schedule",
            "Enqueues one job of the schedule now, outside its slots; its next slot "
            "still fires as planned.",
        ),
        Control(
            "pause-schedule", "Pause schedule", "schedule",
            "No scheduler fires it until it is resumed.", danger=True,
        ),
        Control(
            "resume-schedule", "Resume schedule", "schedule",
            "It fires again from its first slot after now (the paused slots are skipped).",
        ),
    )
}  # fmt: skip


def _whole_number(form: dict[str, str], field: str) -> int:
    """A form field holding a whole number (the library checks its range)."""
    text = form.get(field, "").strip()
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(f"{field} must be a whole number, got {text!r}") from None


def parse_target(control: Control, text: str | None) -> str:
    """The queue or schedule name of a control's ``name`` field, checked like the library."""
    limit = QUEUE_MAX if control.target == "queue" else SCHEDULE_NAME_MAX
    return validation.require_name(control.target, text or "", limit)


class Controls:
    """The confirm (GET), perform (POST) and outcome (GET) handlers of the controls."""

    def __init__(
        self,
        queue: Queue,
        renderer: Renderer,
        csrf: CsrfTokens,
        *,
        enabled: bool,
        schedules: Sequence[Schedule] = (),
        after_write: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = queue
        self.render = renderer
        self.csrf = csrf
        self.enabled = enabled
        self.schedules = {schedule.name: schedule for schedule in schedules}
        self.after_write = after_write
        self.outcomes: OrderedDict[str, tuple[str, str, str]] = OrderedDict()

    def _error(self, request: Request, status_code: int, message: str) -> Response:
        return self.render.page(
            request, "error.html", status_code=status_code, refresh=False, message=message
        )

    def _checked(self, request: Request, name: str | None) -> tuple[Control, str] | Response:
        control = CONTROLS.get(str(request.path_params["control"]))
        if control is None:
            return self._error(request, 403, "unknown control")
        if not self.enabled:
            return self._error(request, 403, DISABLED)
        try:
            target = parse_target(control, name)
        except InvalidInput as error:
            return self._error(request, 400, str(error))
        if control.target == "queue" and self.queue.tables.queues is None:
            return self._error(
                request, 409, "this queue's models have no queue-control model: no queue can "
                "be paused (bind sqlq_orm.QueueControlMixin, Models(queue_control=...))",
            )  # fmt: skip
        if control.target == "schedule" and self.queue.tables.schedules is None:
            return self._error(request, 409, "this queue's models have no schedule table")
        if control.name == "run-schedule" and target not in self.schedules:
            return self._error(
                request, 409, f"schedule {target!r} cannot be run from here: its payload and "
                "options are declared in code, and this dashboard was not given them "
                "(create_app(..., schedules=registry.schedules))",
            )  # fmt: skip
        return control, target

    async def confirm(self, request: Request) -> Response:
        checked = self._checked(request, request.query_params.get("name"))
        if isinstance(checked, Response):
            return checked
        control, target = checked
        # The limit form starts from the queue's current limit (the overview's link).
        prefill = {key: request.query_params.get(key, "") for key in ("max_starts", "per_seconds")}
        return self.render.page(
            request, "control.html", refresh=False, control=control, target=target,
            prefill=prefill,
        )  # fmt: skip

    async def perform(self, request: Request) -> Response:
        body = await read_capped(request, MAX_FORM_BYTES)
        if body is None:
            return self._error(
                request, 413, f"form too large (more than {MAX_FORM_BYTES} bytes); nothing "
                "was changed",
            )  # fmt: skip
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        checked = self._checked(request, form.get("name"))
        if isinstance(checked, Response):
            return checked
        control, target = checked
        if not self.csrf.verify(request.cookies.get(CSRF_COOKIE), form.get(CSRF_FIELD)):
            return self._error(
                request, 403, "the form's CSRF token is missing or does not match this "
                "browser; nothing was changed (reload the page and confirm again)",
            )  # fmt: skip
        try:
            message = await run_in_threadpool(self._do, control, target, form)
        except InvalidInput as error:  # e.g. a rate limit of 0
            return self._error(request, 400, f"{error}; nothing was changed")
        except SqlqError as error:  # e.g. no schedule of that name
            return self._error(request, 409, f"{error}; nothing was changed")
        finally:
            self.after_write()
        key = secrets.token_urlsafe(16)
        self.outcomes[key] = (control.name, target, message)
        while len(self.outcomes) > KEPT_OUTCOMES:
            self.outcomes.popitem(last=False)
        root = request.scope.get("root_path", "").rstrip("/")
        return RedirectResponse(
            f"{root}/controls/{control.name}/done?outcome={key}", status_code=303
        )

    def _do(self, control: Control, target: str, form: dict[str, str]) -> str:
        queue = self.queue
        if control.name == "limit-queue":
            max_starts = _whole_number(form, "max_starts")
            per_seconds = _whole_number(form, "per_seconds")
            queue.set_rate_limit(target, max_starts, per_seconds, actor=ACTOR)
            return f"Queue {target}: at most {max_starts} starts per {per_seconds} s."
        if control.name == "unlimit-queue":
            changed = queue.clear_rate_limit(target, actor=ACTOR)
            return (
                f"Queue {target}: rate limit removed."
                if changed
                else f"Queue {target} had no rate limit."
            )
        if control.name == "pause-queue":
            changed = queue.pause_queue(target, actor=ACTOR)
            return f"Queue {target} paused." if changed else f"Queue {target} was paused already."
        if control.name == "resume-queue":
            changed = queue.resume_queue(target, actor=ACTOR)
            return f"Queue {target} resumed." if changed else f"Queue {target} was not paused."
        if control.name == "run-schedule":
            job = queue.run_schedule_now(self.schedules[target], actor=ACTOR)
            return f"Schedule {target} enqueued job {job.id}."
        if control.name == "pause-schedule":
            changed = queue.pause_schedule(target)
            return (
                f"Schedule {target} paused."
                if changed
                else f"Schedule {target} was paused already."
            )
        changed = queue.resume_schedule(target)
        return f"Schedule {target} resumed." if changed else f"Schedule {target} was not paused."

    async def done(self, request: Request) -> Response:
        found = self.outcomes.get(request.query_params.get("outcome", ""))
        if found is None or found[0] != request.path_params["control"]:
            return self._error(
                request, 404, "this outcome is no longer held (the dashboard restarted, or "
                "another of its processes answered)",
            )  # fmt: skip
        name, target, message = found
        return self.render.page(
            request, "control_done.html", refresh=False, control=CONTROLS[name], target=target,
            message=message,
        )  # fmt: skip
