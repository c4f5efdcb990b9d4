"""The writes on jobs: retry, cancel and discard, of one job, ticked ones, or a filter.

Every write is two steps. ``GET confirm`` shows what would change (the job, or how many
jobs match) and a form; ``POST`` does it and redirects (303) to a page showing the
outcome, so reloading that page shows it again instead of sending the form again.
The POST is refused (403, nothing changed) when actions are not enabled or the CSRF
token does not match the browser's cookie. The work itself is
:meth:`Queue.retry_jobs <sqlq_orm.Queue.retry_jobs>`, ``cancel_jobs`` and
``discard_jobs`` (one job is a filter on its id), so the counts shown are the
library's, dependents cancelled by the cascade included, and every event names the
actor ``dashboard``. A bulk action applies to at most :data:`MAX_BULK` jobs, the
oldest that match.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sqlq_orm.dashboard.pages import filter_params, parse_filter, parse_job_id
from sqlq_orm.dashboard.rendering import Renderer
from sqlq_orm.dashboard.security import CSRF_COOKIE, CSRF_FIELD, CsrfTokens
from sqlq_orm.dashboard.verbs import ACTIONS, Action
from sqlq_orm.errors import InvalidInput, JobNotFound
from sqlq_orm.ops.joblist import MAX_PAGE_SIZE, JobFilter, count_matching
from sqlq_orm.queue.bulk import DEFAULT_BULK_BATCH
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import BulkResult

ACTOR = "dashboard"
MAX_FORM_BYTES = 16 * 1024
MAX_BULK = 10_000
"""Jobs one bulk action applies to at most (the oldest that match; confirm again for
the rest)."""
KEPT_OUTCOMES = 256
"""Outcomes held for their result pages (per process; the oldest go first)."""


REASON = "cancelled from the dashboard"


@dataclass
class Outcome:
    """What one confirmed action did, for its result page (the library's counts)."""

    done: int = 0
    skipped: int = 0
    """Matched, but changed by someone else first (or, when ticked, not applicable)."""
    why_skipped: list[tuple[int, str]] = field(default_factory=list)
    dependents: int = 0
    """Jobs cancelled because they waited for one acted on (the cascade)."""
    complete: bool = True
    """False when the action stopped at :data:`MAX_BULK` jobs and more match."""
    job_id: int | None = None
    params: dict[str, str] = field(default_factory=dict)

    def add(self, result: BulkResult) -> None:
        self.done += result.acted
        self.skipped += result.skipped
        self.dependents += result.dependents
        self.complete = self.complete and result.complete


def run_bulk(queue: Queue, action: Action, job_filter: JobFilter) -> BulkResult:
    """The library's bulk action (oldest matches first, in batches), stopped after
    :data:`MAX_BULK` jobs so one request stays short; every event says ``dashboard``."""
    batch_size = min(DEFAULT_BULK_BATCH, MAX_BULK)
    max_batches = -(-MAX_BULK // batch_size)
    if action.name == "retry":
        return queue.retry_jobs(
            job_filter, actor=ACTOR, batch_size=batch_size, max_batches=max_batches
        )
    if action.name == "cancel":
        return queue.cancel_jobs(
            job_filter, actor=ACTOR, reason=REASON, batch_size=batch_size, max_batches=max_batches
        )
    return queue.discard_jobs(
        job_filter, actor=ACTOR, batch_size=batch_size, max_batches=max_batches
    )


def apply(queue: Queue, action: Action, ids: list[int]) -> Outcome:
    """Run the action on each id (oldest first: a parent retried before its child);
    a job that changed meanwhile is skipped, with why."""
    outcome = Outcome()
    for job_id in sorted(ids):
        try:
            result = run_bulk(queue, action, JobFilter(job_id=job_id))
        except InvalidInput as error:  # e.g. the job's status no longer applies
            outcome.skipped += 1
            outcome.why_skipped.append((job_id, str(error)))
            continue
        outcome.add(result)
        if not result.acted:
            if not result.skipped:
                outcome.skipped += 1
            try:
                now = queue.get_job(job_id).status
                why = f"job {job_id} is {now}: it cannot be {action.past}"
            except JobNotFound:
                why = f"there is no job with id {job_id}"
            outcome.why_skipped.append((job_id, why))
    return outcome


def parse_selected(values: list[str]) -> list[int]:
    """The ids ticked on a list (``selected`` fields): distinct, at most one page's worth."""
    ids: list[int] = []
    for value in values:
        job_id = parse_job_id("selected", value)
        if job_id is not None and job_id not in ids:
            ids.append(job_id)
    if len(ids) > MAX_PAGE_SIZE:
        raise InvalidInput(f"at most {MAX_PAGE_SIZE} jobs can be selected, got {len(ids)}")
    return ids


async def read_capped(request: Request, limit: int) -> bytes | None:
    """The request body, or None once it is known to exceed ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before anything is read;
    otherwise the body is read chunk by chunk and reading stops at the first byte
    past the limit (a chunked body declares no length).
    """
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class Actions:
    """The confirm (GET), perform (POST) and outcome (GET) handlers."""

    def __init__(
        self,
        queue: Queue,
        renderer: Renderer,
        csrf: CsrfTokens,
        *,
        enabled: bool,
        after_write: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = queue
        self.render = renderer
        self.csrf = csrf
        self.enabled = enabled
        self.after_write = after_write
        """Called after every write (drops the shared report: the next page shows it)."""
        self.outcomes: OrderedDict[str, Outcome] = OrderedDict()

    def _refuse(self, request: Request, message: str) -> Response:
        return self.render.page(
            request, "error.html", status_code=403, refresh=False, message=message
        )

    def _error(self, request: Request, status_code: int, message: str) -> Response:
        return self.render.page(
            request, "error.html", status_code=status_code, refresh=False, message=message
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
            job_id = parse_job_id("job", request.query_params.get("job"))
            job_filter = parse_filter(request.query_params)
            selected = parse_selected(request.query_params.getlist("selected"))
        except InvalidInput as error:
            return self._error(request, 400, str(error))
        if selected:
            return await self._confirm_selected(request, action, selected)
        if job_id is None and job_filter.is_empty:
            return self._error(
                request,
                400,
                "a bulk action needs at least one filter (refusing to act on every job)",
            )
        if job_id is not None:
            try:
                job = await run_in_threadpool(self.queue.get_job, job_id)
            except JobNotFound:
                return self._error(request, 404, f"there is no job with id {job_id}")
            if job.status not in action.applies_to:
                return self._error(
                    request,
                    409,
                    f"job {job_id} is {job.status}: only {' or '.join(action.applies_to)} "
                    f"jobs can be {action.past}",
                )
            count = 1
        else:
            count = await run_in_threadpool(
                count_matching, self.queue, job_filter, action.statuses_for(job_filter)
            )
        return self.render.page(
            request,
            "confirm.html",
            refresh=False,
            action=action,
            job_id=job_id,
            params=filter_params(job_filter),
            count=count,
            applies=min(count, MAX_BULK),
            max_bulk=MAX_BULK,
        )

    async def _confirm_selected(
        self, request: Request, action: Action, selected: list[int]
    ) -> Response:
        """The jobs ticked on a list: which of them the action applies to."""

        def statuses() -> dict[int, str | None]:
            found: dict[int, str | None] = {}
            for job_id in selected:
                try:
                    found[job_id] = self.queue.get_job(job_id).status
                except JobNotFound:
                    found[job_id] = None
            return found

        found = await run_in_threadpool(statuses)
        applies = [j for j, status in found.items() if status in action.applies_to]
        not_applying = [(j, status) for j, status in found.items() if j not in applies]
        return self.render.page(
            request,
            "confirm.html",
            refresh=False,
            action=action,
            job_id=None,
            selected=applies,
            not_applying=not_applying,
            params={},
            count=len(applies),
            applies=len(applies),
            max_bulk=MAX_BULK,
        )

    async def perform(self, request: Request) -> Response:
        action = self._action(request)
        if action is None:
            return self._refuse(request, "unknown action")
        if not self.enabled:
            return self._refuse(request, DISABLED)
        body = await read_capped(request, MAX_FORM_BYTES)
        if body is None:
            return self._error(
                request,
                413,
                f"form too large (more than {MAX_FORM_BYTES} bytes); nothing was changed",
            )
        # A urlencoded form parsed here: Starlette's form parser would need
        # python-multipart for a form that has no file in it.
        pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        form = dict(pairs)
        if not self.csrf.verify(request.cookies.get(CSRF_COOKIE), form.get(CSRF_FIELD)):
            return self._refuse(
                request,
                "the form's CSRF token is missing or does not match this browser; "
                "nothing was changed (reload the page and confirm again)",
            )
        try:
            job_id = parse_job_id("job", form.get("job"))
            job_filter = parse_filter(form)
            selected = parse_selected([value for name, value in pairs if name == "selected"])
        except InvalidInput as error:
            return self._error(request, 400, str(error))
        if job_id is None and not selected and job_filter.is_empty:
            return self._refuse(request, "a bulk action needs at least one filter")

        def work() -> Outcome:
            if job_id:
                return apply(self.queue, action, [job_id])
            if selected:
                return apply(self.queue, action, selected)
            outcome = Outcome()
            outcome.add(run_bulk(self.queue, action, job_filter))
            return outcome

        try:
            outcome = await run_in_threadpool(work)
        finally:
            self.after_write()
        outcome.job_id = job_id
        outcome.params = filter_params(job_filter)
        key = secrets.token_urlsafe(16)
        self.outcomes[key] = outcome
        while len(self.outcomes) > KEPT_OUTCOMES:
            self.outcomes.popitem(last=False)
        # Redirect-after-POST: a reload of the result shows it again, sends nothing.
        done_url = f"{request.scope.get('root_path', '').rstrip('/')}/actions/{action.name}/done"
        return RedirectResponse(f"{done_url}?outcome={key}", status_code=303)

    async def done(self, request: Request) -> Response:
        action = self._action(request)
        if action is None:
            return self._refuse(request, "unknown action")
        outcome = self.outcomes.get(request.query_params.get("outcome", ""))
        if outcome is None:
            return self._error(
                request,
                404,
                "this outcome is no longer held (the dashboard restarted, or another of "
                "its processes answered); each job's events record what was done, "
                f"with the actor {ACTOR!r}",
            )
        return self.render.page(
            request,
            "done.html",
            refresh=False,
            action=action,
            job_id=outcome.job_id,
            params=outcome.params,
            outcome=outcome,
        )


DISABLED = (
    "actions are disabled: this dashboard is read-only (start it with --enable-actions, "
    "or create_app(..., enable_actions=True))"
)
