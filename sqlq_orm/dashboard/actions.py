"""The writes: retry and cancel, of one job or of a filtered selection.

Every write is two steps. ``GET confirm`` shows what would change (the job, or how many
jobs match) and a form; ``POST`` does it. The POST is refused (403, nothing changed)
when actions are not enabled or the CSRF token does not match the browser's cookie.
The work itself is :meth:`Queue.retry <sqlq_orm.Queue.retry>` and
:meth:`Queue.cancel <sqlq_orm.Queue.cancel>`, one job per transaction, recorded with
the actor ``dashboard``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from sqlq_orm.dashboard.pages import filter_params, parse_filter, parse_int
from sqlq_orm.dashboard.rendering import Renderer
from sqlq_orm.dashboard.security import CSRF_COOKIE, CSRF_FIELD, CsrfTokens
from sqlq_orm.errors import InvalidInput, InvalidTransition, JobNotFound
from sqlq_orm.ops.joblist import MAX_SELECTION, JobFilter, matching_ids
from sqlq_orm.queue.queue import Queue
from sqlq_orm.schema.states import JobStatus

ACTOR = "dashboard"
MAX_FORM_BYTES = 16 * 1024


@dataclass(frozen=True)
class Action:
    """What an action does and which statuses it applies to."""

    name: str
    verb: str
    applies_to: tuple[str, ...]


ACTIONS = {
    "retry": Action("retry", "Retry", (JobStatus.FAILED.value, JobStatus.CANCELLED.value)),
    "cancel": Action(
        "cancel",
        "Cancel",
        (JobStatus.QUEUED.value, JobStatus.CLAIMED.value, JobStatus.RUNNING.value),
    ),
}


def selection(queue: Queue, action: Action, job_filter: JobFilter) -> list[int]:
    """Ids (newest first, at most :data:`MAX_SELECTION`) the action would apply to."""
    statuses = [s for s in action.applies_to if job_filter.status in (None, s)]
    ids: list[int] = []
    for status in statuses:
        ids.extend(matching_ids(queue, replace(job_filter, status=status)))
    return sorted(ids, reverse=True)[:MAX_SELECTION]


@dataclass
class Outcome:
    done: list[int]
    skipped: list[tuple[int, str]]


def apply(queue: Queue, action: Action, ids: list[int]) -> Outcome:
    """Run the action on each id; a job that changed meanwhile is skipped, with why."""
    outcome = Outcome(done=[], skipped=[])
    if action.name == "retry":
        # Oldest first: a parent is always older than its child, so a child retried
        # with its parent finds the parent back in the queue and waits for it.
        ids = sorted(ids)
    for job_id in ids:
        try:
            if action.name == "retry":
                queue.retry(job_id, actor=ACTOR)
            else:
                queue.cancel(job_id, actor=ACTOR, reason="cancelled from the dashboard")
        except (InvalidTransition, JobNotFound) as error:
            outcome.skipped.append((job_id, str(error)))
        else:
            outcome.done.append(job_id)
    return outcome


class Actions:
    """The confirm (GET) and perform (POST) handlers."""

    def __init__(
        self, queue: Queue, renderer: Renderer, csrf: CsrfTokens, *, enabled: bool
    ) -> None:
        self.queue = queue
        self.render = renderer
        self.csrf = csrf
        self.enabled = enabled

    def _refuse(self, request: Request, message: str) -> Response:
        return self.render.page(
            request, "error.html", status_code=403, refresh=False, message=message
        )

    def _action(self, request: Request) -> Action | None:
        return ACTIONS.get(str(request.path_params["action"]))

    async def confirm(self, request: Request) -> Response:
        action = self._action(request)
        if action is None:
            return self._refuse(request, "unknown action")
        if not self.enabled:
            return self._refuse(request, DISABLED)
        try:
            job_id = parse_int("job", request.query_params.get("job"))
            job_filter = parse_filter(request.query_params)
        except InvalidInput as error:
            return self.render.page(
                request, "error.html", status_code=400, refresh=False, message=str(error)
            )
        if job_id is None and job_filter.is_empty:
            return self.render.page(
                request,
                "error.html",
                status_code=400,
                refresh=False,
                message="a bulk action needs at least one filter (refusing to act on every job)",
            )
        ids = (
            [job_id]
            if job_id
            else await run_in_threadpool(selection, self.queue, action, job_filter)
        )
        return self.render.page(
            request,
            "confirm.html",
            refresh=False,
            action=action,
            job_id=job_id,
            params=filter_params(job_filter),
            count=len(ids),
            capped=len(ids) >= MAX_SELECTION,
            max_selection=MAX_SELECTION,
        )

    async def perform(self, request: Request) -> Response:
        action = self._action(request)
        if action is None:
            return self._refuse(request, "unknown action")
        if not self.enabled:
            return self._refuse(request, DISABLED)
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return self._refuse(request, "form too large")
        # A urlencoded form parsed here: Starlette's form parser would need
        # python-multipart for a form that has no file in it.
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if not self.csrf.verify(request.cookies.get(CSRF_COOKIE), form.get(CSRF_FIELD)):
            return self._refuse(
                request,
                "the form's CSRF token is missing or does not match this browser; "
                "nothing was changed (reload the page and confirm again)",
            )
        try:
            job_id = parse_int("job", form.get("job"))
            job_filter = parse_filter(form)
        except InvalidInput as error:
            return self.render.page(
                request, "error.html", status_code=400, refresh=False, message=str(error)
            )
        if job_id is None and job_filter.is_empty:
            return self._refuse(request, "a bulk action needs at least one filter")

        def work() -> Outcome:
            ids = [job_id] if job_id else selection(self.queue, action, job_filter)
            return apply(self.queue, action, ids)

        outcome = await run_in_threadpool(work)
        return self.render.page(
            request,
            "done.html",
            refresh=False,
            action=action,
            job_id=job_id,
            params=filter_params(job_filter),
            outcome=outcome,
        )


DISABLED = (
    "actions are disabled: this dashboard is read-only (start it with --enable-actions, "
    "or create_app(..., enable_actions=True))"
)
