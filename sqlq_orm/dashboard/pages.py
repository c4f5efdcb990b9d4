"""The read-only pages: overview, jobs list, job detail, workers, schedules, dependencies.

Each handler reads through :mod:`sqlq_orm.ops` (schedules: through
:meth:`~sqlq_orm.Queue.list_schedules`) in a worker thread (the database calls block)
and renders one template. Query parameters are checked the way the library
checks its arguments: a bad one answers 400 naming the parameter and the value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from sqlq_orm.core import validation
from sqlq_orm.core.validation import MAX_JOB_ID
from sqlq_orm.dashboard.cache import SharedAnswer
from sqlq_orm.dashboard.charts import Series, stacked_bars
from sqlq_orm.dashboard.rendering import Renderer
from sqlq_orm.dashboard.verbs import ACTIONS
from sqlq_orm.errors import InvalidInput, JobNotFound
from sqlq_orm.ops.dependencies import waiting_jobs
from sqlq_orm.ops.history import History, finished_history
from sqlq_orm.ops.joblist import (
    DEFAULT_PAGE_SIZE,
    EXACT_COUNT_SECONDS,
    MAX_COUNTED,
    SCAN_CHUNK,
    JobFilter,
    JobPage,
    RecentCount,
    count_capped,
    count_recent,
    count_within,
    list_jobs,
)
from sqlq_orm.ops.jobsort import SORT_WINDOW, JobSort, SortCursor, SortedPage, list_sorted_jobs
from sqlq_orm.ops.render.text import STATUS_ORDER
from sqlq_orm.ops.stats import QueueStats, collect_workers
from sqlq_orm.ops.table_sizes import TableSizes
from sqlq_orm.ops.timeline import job_timeline
from sqlq_orm.ops.worker_detail import worker_detail
from sqlq_orm.queue.queue import Queue

PAGE_SIZE = DEFAULT_PAGE_SIZE
"""Jobs per list page."""
PAGE_SCAN_CHUNKS = 1
"""A list page reads one range of SCAN_CHUNK ids at most (a rare match goes on at
"older"): under the page budget on PostgreSQL at any table size."""
OVERDUE_AFTER_SECONDS = 60
"""A schedule slot this long past is shown as overdue (nothing ticked it), not just due."""

FILTER_PARAMS = (
    "status",
    "queue",
    "type",
    "error_code",
    "id",
    "dedupe_key",
    "worker",
    "created_after",
    "created_before",
    "arguments",
)
MOMENT_FORMATS = (
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
)


def parse_moment(name: str, text: str | None) -> int | None:
    """A UTC moment, ``YYYY-MM-DD[ HH:MM[:SS]]`` (a ``T`` works too), as epoch seconds."""
    if text is None or not text.strip():
        return None
    cleaned = text.strip().removesuffix("Z")
    for layout in MOMENT_FORMATS:
        try:
            return int(datetime.strptime(cleaned, layout).replace(tzinfo=UTC).timestamp())
        except ValueError:
            continue
    raise InvalidInput(f"{name} must be a UTC time like 2026-11-24 09:30, got {text!r}")


def format_moment(value: int | None) -> str | None:
    """The inverse of :func:`parse_moment` (None for None)."""
    if value is None:
        return None
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S").removesuffix(":00")


def parse_int(name: str, text: str | None) -> int | None:
    """A positive integer query parameter (blank means absent)."""
    if text is None or not text.strip():
        return None
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number, got {text!r}") from None
    if value < 1:
        raise InvalidInput(f"{name} must be >= 1, got {value}")
    return value


def parse_job_id(name: str, text: str | None) -> int | None:
    """A job id query or form field (blank means absent): 1 to 2**63 - 1."""
    value = parse_int(name, text)
    if value is not None and value > MAX_JOB_ID:
        raise InvalidInput(f"{name} must be a job id from 1 to {MAX_JOB_ID}, got {value}")
    return value


def parse_arguments(
    text: str | None, name: str = "arguments", example: str = '{"tenant": "acme"}'
) -> dict[str, Any] | None:
    """The ``arguments`` field: a JSON object of payload members to match, e.g.
    ``{"tenant": "acme"}`` (blank means absent); the library checks its members. The
    ``columns`` field (the app's own columns to match) reads the same way."""
    if text is None or not text.strip():
        return None
    try:
        members = json.loads(text)
    except ValueError:
        members = None
    except RecursionError:  # "[" nested thousands deep: nothing a filter could match
        raise InvalidInput(
            f"{name} is nested too deeply; it must be a JSON object of plain values "
            f"like {example}, got {validation.short(text)}"
        ) from None
    if not isinstance(members, dict):
        raise InvalidInput(
            f"{name} must be a JSON object like {example}, got {validation.short(text)}"
        )
    return members


def parse_filter(params: Mapping[str, str]) -> JobFilter:
    """The jobs filter from query or form fields; blank fields are ignored."""

    def text(name: str) -> str | None:
        value = params.get(name)
        return value if value and value.strip() else None

    return JobFilter(
        status=text("status"),
        queue=text("queue"),
        type=text("type"),
        error_code=text("error_code"),
        job_id=parse_job_id("id", params.get("id")),
        dedupe_key=text("dedupe_key"),
        worker=text("worker"),
        created_after=parse_moment("created_after", params.get("created_after")),
        created_before=parse_moment("created_before", params.get("created_before")),
        args_contain=parse_arguments(params.get("arguments")),
        concurrency_key=text("concurrency_key"),
        columns=parse_arguments(params.get("columns"), "columns", '{"tenant_id": 7}'),
    )


def filter_params(job_filter: JobFilter) -> dict[str, str]:
    """The filter back as query parameters (only the fields that are set)."""
    values = {
        "status": job_filter.status,
        "queue": job_filter.queue,
        "type": job_filter.type,
        "error_code": job_filter.error_code,
        "id": None if job_filter.job_id is None else str(job_filter.job_id),
        "dedupe_key": job_filter.dedupe_key,
        "worker": job_filter.worker,
        "created_after": format_moment(job_filter.created_after),
        "created_before": format_moment(job_filter.created_before),
        "arguments": None
        if job_filter.args_contain is None
        else json.dumps(dict(job_filter.args_contain), sort_keys=True),
        "concurrency_key": job_filter.concurrency_key,
        "columns": None
        if job_filter.columns is None
        else json.dumps(dict(job_filter.columns), sort_keys=True),
    }
    return {k: v for k, v in values.items() if v is not None}


SORT_HEADERS = {
    # column title: the sort its header link asks for
    "id": "id",
    "priority": "priority",
    "attempts": "attempts",
    "run at": "run_at",
    "finished": "finished_at",
}


def parse_sort(params: Mapping[str, str]) -> JobSort:
    """The list's order from ``sort`` (a key of ``jobsort.SORT_KEYS``) and ``dir`` (``asc`` or
    ``desc``); blank: id, newest first."""
    key = (params.get("sort") or "").strip() or "id"
    direction = (params.get("dir") or "").strip() or "desc"
    if direction not in ("asc", "desc"):
        raise InvalidInput(f"dir must be asc or desc, got {direction!r}")
    return JobSort(key, descending=direction == "desc")


def sort_params(job_sort: JobSort) -> dict[str, str]:
    """The order back as query parameters (none for the default order)."""
    if job_sort.is_default:
        return {}
    return {"sort": job_sort.key, "dir": "desc" if job_sort.descending else "asc"}


def sort_links(job_sort: JobSort, params: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each sortable column's header: its link (the other direction when the list is
    already sorted by it, else descending) and its ``aria-sort``."""
    headers = {}
    for title, key in SORT_HEADERS.items():
        current = job_sort.key == key
        descending = not (current and job_sort.descending)
        link = dict(params, **sort_params(JobSort(key, descending=descending)))
        aria_sort = ("descending" if job_sort.descending else "ascending") if current else None
        headers[title] = {"query": link, "aria_sort": aria_sort}
    return headers


def index_counts(job_filter: JobFilter) -> bool:
    """Whether a status-leading index alone serves the filter's count: a status, with
    at most an error code (``ix_*_finished``, ``ix_*_failed_code``). Capped, that count
    reads at most ``MAX_COUNTED + 1`` index entries, however large the table."""
    rest = {k: v for k, v in job_filter.__dict__.items() if v is not None}
    return "status" in rest and set(rest) <= {"status", "error_code"}


CHART_RANGES = {
    # name: (window seconds, buckets): 2 min, 30 min and 4 h bars.
    "1h": (3600, 30),
    "24h": (86_400, 48),
    "7d": (7 * 86_400, 42),
}
DEFAULT_CHART_RANGE = "1h"


def parse_range(text: str | None) -> str:
    """The overview's chart range (``1h``, ``24h``, ``7d``; blank: 1h)."""
    if text is None or not text.strip():
        return DEFAULT_CHART_RANGE
    if text not in CHART_RANGES:
        raise InvalidInput(f"range must be one of {', '.join(CHART_RANGES)}, got {text!r}")
    return text


def bucket_words(seconds: int) -> str:
    """``2 min``, ``30 min``, ``4 h``: a bucket's length as the chart title says it."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def history_charts(history: History, range_name: str = DEFAULT_CHART_RANGE) -> dict[str, Any]:
    label_format = "%a %H:%M" if range_name == "7d" else "%H:%M"
    labels = [datetime.fromtimestamp(b.start, UTC).strftime(label_format) for b in history.buckets]
    bucket = bucket_words(history.buckets[0].seconds if history.buckets else 60)
    span = {"1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days"}[range_name]
    finished = stacked_bars(
        labels,
        [
            Series("succeeded", "ok", [b.succeeded for b in history.buckets]),
            Series("failed", "bad", [b.failed for b in history.buckets]),
            Series("cancelled", "muted", [b.cancelled for b in history.buckets]),
        ],
        title=f"Jobs finished per {bucket}, {span}",
    )
    failures = stacked_bars(
        labels,
        [Series("failed", "bad", [b.failed for b in history.buckets])],
        title=f"Jobs failed per {bucket}, {span}",
    )
    return {
        "finished_chart": finished,
        "failures_chart": failures,
        "chart_range": range_name,
        "chart_ranges": list(CHART_RANGES),
        "bucket": bucket,
        "span": span,
    }


class Pages:
    """The GET handlers, over one queue."""

    def __init__(
        self,
        queue: Queue,
        renderer: Renderer,
        report: SharedAnswer[QueueStats] | None = None,
        *,
        runnable: set[str] | None = None,
        sizes: SharedAnswer[TableSizes] | None = None,
    ) -> None:
        self.queue = queue
        self.render = renderer
        self.runnable = runnable or set()
        self.sizes = sizes
        self.exact_count_seconds = EXACT_COUNT_SECONDS
        """How long the list's exact count (``count=all``) may take before the page
        shows its bounded count instead, and says so."""
        """The schedules the host declared to the dashboard: the ones it can run now."""
        # The whole stats report, shared by every tab (see sqlq_orm.dashboard.cache).
        self.report = report or SharedAnswer(lambda: queue.stats(), fresh_seconds=0)

    def _bad_request(self, request: Request, error: InvalidInput) -> Response:
        return self.render.page(
            request, "error.html", status_code=400, refresh=False, message=str(error)
        )

    async def overview(self, request: Request) -> Response:
        try:
            range_name = parse_range(request.query_params.get("range"))
        except InvalidInput as error:
            return self._bad_request(request, error)
        window, buckets = CHART_RANGES[range_name]
        stats, history = await run_in_threadpool(
            lambda: (
                self.report.get(),
                finished_history(self.queue, window_seconds=window, buckets=buckets),
            )
        )
        return self.render.page(
            request,
            "overview.html",
            stats=stats,
            statuses=STATUS_ORDER,
            queue_controls=self.queue.tables.queues is not None,
            sizes=None if self.sizes is None else self.sizes.peek(),
            **history_charts(history, range_name),
        )

    async def jobs(self, request: Request) -> Response:
        try:
            job_filter = parse_filter(request.query_params)
            job_sort = parse_sort(request.query_params)
            before = parse_job_id("before", request.query_params.get("before"))
            after_text = request.query_params.get("after")
            after = SortCursor.parse(after_text) if after_text else None
            window = parse_job_id("window", request.query_params.get("window"))
            exact = request.query_params.get("count") == "all"
        except InvalidInput as error:
            return self._bad_request(request, error)
        if not job_sort.is_default:
            return await self._sorted_jobs(request, job_filter, job_sort, after, window, exact)
        gave_up: list[bool] = []
        try:

            def read() -> tuple[JobPage, RecentCount, int]:
                page = list_jobs(
                    self.queue, job_filter, before=before, limit=PAGE_SIZE,
                    scan_chunks=PAGE_SCAN_CHUNKS,
                )  # fmt: skip
                if exact:
                    count = count_within(self.queue, job_filter, self.exact_count_seconds)
                    if count is not None:
                        return page, RecentCount(count=count, scanned_all=True), 0
                    gave_up.append(True)  # too slow: the bounded count below, said so
                if before is None and len(page.jobs) < PAGE_SIZE:
                    # A short first page holds every match its scan met: that is the
                    # total (of the newest ids the scan read, when it stopped early).
                    total = RecentCount(len(page.jobs), scanned_all=not page.stopped_early)
                    return page, total, SCAN_CHUNK * PAGE_SCAN_CHUNKS
                if index_counts(job_filter):
                    count = count_capped(self.queue, job_filter, cap=MAX_COUNTED)
                    return page, RecentCount(count=count, scanned_all=True), 0
                # The newest SCAN_CHUNK ids, capped: bounded like the page itself. The
                # exact count over every job is one click away (``count=all``).
                return page, count_recent(self.queue, job_filter, cap=MAX_COUNTED), SCAN_CHUNK

            page, total, scanned = await run_in_threadpool(read)
        except InvalidInput as error:
            return self._bad_request(request, error)
        older = None if page.next_before is None else {"before": str(page.next_before)}
        return self._jobs_page(
            request, job_filter, job_sort, page.jobs, total, scanned, exact,
            first=before is None, older=older, stopped_early=page.stopped_early,
            searched_to=page.next_before, count_gave_up=bool(gave_up),
        )  # fmt: skip

    async def _sorted_jobs(
        self,
        request: Request,
        job_filter: JobFilter,
        job_sort: JobSort,
        after: SortCursor | None,
        window: int | None,
        exact: bool,
    ) -> Response:
        """The list in another order than newest first (see :mod:`sqlq_orm.ops.jobsort`)."""
        gave_up: list[bool] = []
        try:

            def read() -> tuple[SortedPage, RecentCount, int]:
                page = list_sorted_jobs(
                    self.queue, job_filter, job_sort, after=after, window=window,
                    limit=PAGE_SIZE, scan_chunks=PAGE_SCAN_CHUNKS,
                )  # fmt: skip
                if exact:
                    count = count_within(self.queue, job_filter, self.exact_count_seconds)
                    if count is not None:
                        return page, RecentCount(count=count, scanned_all=True), 0
                    gave_up.append(True)  # too slow: the bounded count below, said so
                if index_counts(job_filter) and not job_sort.bounded:
                    count = count_capped(self.queue, job_filter, cap=MAX_COUNTED)
                    return page, RecentCount(count=count, scanned_all=True), 0
                # A bounded order counts the window it sorts (what its pages hold).
                total = count_recent(self.queue, job_filter, cap=MAX_COUNTED, since=page.window)
                return page, total, SORT_WINDOW if job_sort.bounded else SCAN_CHUNK

            page, total, scanned = await run_in_threadpool(read)
        except InvalidInput as error:
            return self._bad_request(request, error)
        older = None
        if page.next_after is not None:
            older = {"after": str(page.next_after)}
            if page.window is not None:
                older["window"] = str(page.window)
        return self._jobs_page(
            request, job_filter, job_sort, page.jobs, total, scanned, exact,
            first=after is None, older=older, stopped_early=page.stopped_early,
            searched_to=None if page.next_after is None else page.next_after.id,
            window=page.window, window_whole=page.window_holds_all,
            count_gave_up=bool(gave_up),
        )  # fmt: skip

    def _jobs_page(
        self,
        request: Request,
        job_filter: JobFilter,
        job_sort: JobSort,
        jobs: list[Any],
        total: RecentCount,
        scanned: int,
        exact: bool,
        *,
        first: bool,
        older: dict[str, str] | None,
        stopped_early: bool,
        searched_to: int | None,
        window: int | None = None,
        window_whole: bool = False,
        count_gave_up: bool = False,
    ) -> Response:
        params = filter_params(job_filter)
        view = dict(params, **sort_params(job_sort))
        return self.render.page(
            request,
            "jobs.html",
            jobs=jobs,
            job_filter=job_filter,
            job_sort=job_sort,
            params=params,
            view=view,
            headers=sort_links(job_sort, params),
            statuses=STATUS_ORDER,
            first=first,
            older=None if older is None else dict(view, **older),
            stopped_early=stopped_early,
            searched_to=searched_to,
            window=window,
            window_whole=window_whole,
            total=total.count,
            scanned_all=total.scanned_all,
            exact=exact and not count_gave_up,
            count_gave_up=count_gave_up,
            exact_count_ms=round(self.exact_count_seconds * 1000),
            scanned=scanned,
            max_counted=MAX_COUNTED,
            # A bulk action is offered only where the filter leaves it something to do.
            bulk_actions=[a for a in ACTIONS.values() if a.statuses_for(job_filter)],
        )

    async def job(self, request: Request) -> Response:
        job_id = int(request.path_params["job_id"])
        try:
            timeline = await run_in_threadpool(job_timeline, self.queue, job_id)
        except (JobNotFound, InvalidInput):  # no such job, or an id no job can have
            return self.render.page(
                request,
                "error.html",
                status_code=404,
                refresh=False,
                message=f"there is no job with id {job_id}",
            )
        status = timeline.job.status
        return self.render.page(
            request,
            "job.html",
            t=timeline,
            can_retry=status in ACTIONS["retry"].applies_to,
            can_cancel=status in ACTIONS["cancel"].applies_to,
            can_discard=status in ACTIONS["discard"].applies_to,
        )

    async def workers(self, request: Request) -> Response:
        # Only the workers' queries, not the whole stats report.
        report = await run_in_threadpool(collect_workers, self.queue)
        return self.render.page(request, "workers.html", stats=report)

    async def worker(self, request: Request) -> Response:
        """One worker (``?id=``): what it is, what it holds now, what it ran recently."""
        try:
            detail = await run_in_threadpool(
                worker_detail, self.queue, request.query_params.get("id", "")
            )
        except InvalidInput as error:
            return self._bad_request(request, error)
        return self.render.page(request, "worker.html", d=detail)

    async def schedules(self, request: Request) -> Response:
        # A host's models may leave the schedule model out (``Models.schedule`` None):
        # the page says so instead of failing on a table that was never meant to exist.
        if self.queue.tables.schedules is None:
            return self.render.page(request, "schedules.html", schedules=None, now=None)
        schedules, now = await run_in_threadpool(
            lambda: (self.queue.list_schedules(), self.queue.context.read_now())
        )
        return self.render.page(
            request,
            "schedules.html",
            schedules=schedules,
            now=now,
            overdue_after=OVERDUE_AFTER_SECONDS,
            runnable=self.runnable,
        )

    async def dependencies(self, request: Request) -> Response:
        """The WAITING jobs, oldest first, each with the parents it waits on."""
        waiting = await run_in_threadpool(waiting_jobs, self.queue)
        return self.render.page(request, "dependencies.html", waiting=waiting)
