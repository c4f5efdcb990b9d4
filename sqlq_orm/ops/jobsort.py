"""The jobs list in another order than newest first: by run time, finish time, attempts
or priority, either way, or by id oldest first.

By id, either way, the primary key serves every page: :func:`list_sorted_jobs` pages
like :func:`~sqlq_orm.ops.joblist.list_jobs` (oldest first reads the key from the
bottom up). The other orders have no index that serves them whatever the filter, and at
a million jobs sorting every match for each page would blow the dashboard's budget. So
they sort a bounded window: the jobs from id :attr:`SortedPage.window` up, which the
first page sets to the newest :data:`SORT_WINDOW` ids and the later pages carry along,
so the order stays one order across pages. Pages go by keyset on ``(sort key, id)``:
the next page starts strictly after the last row's pair, so ties never repeat or skip
a job.

A job that has not finished has no finish time: it sorts after every finished one,
in both directions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, literal, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from sqlq_orm.core import validation
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.db.tables import Tables
from sqlq_orm.errors import InvalidInput
from sqlq_orm.ops.joblist import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MAX_SCAN_CHUNKS,
    SCAN_CHUNK,
    JobFilter,
    JobListQueries,
    JobSummary,
    list_jobs,
)

SORT_KEYS = ("id", "run_at", "finished_at", "attempts", "priority")
"""What the list sorts by: ``attempts`` is ``attempt_count``; ``id`` is enqueue order."""
SORT_WINDOW = 50_000
"""Ids a bounded order sorts (the newest when its first page is read). Sorting the
newest 100,000 (the window a list's total counts) took 100-145 ms a page at a million
jobs (bench/dashboard.py, SQLite and PostgreSQL), over the 100 ms page budget."""
_UNFINISHED_LAST = {True: -1, False: validation.INT64_MAX}
"""The finish time an unfinished job sorts by, descending and ascending: after the rest."""


@dataclass(frozen=True)
class JobSort:
    """One order of the jobs list: a key of :data:`SORT_KEYS`, newest/highest first
    when ``descending`` (the default, ``id`` descending, is the list's own order)."""

    key: str = "id"
    descending: bool = True

    def __post_init__(self) -> None:
        if self.key not in SORT_KEYS:
            raise InvalidInput(f"sort must be one of {', '.join(SORT_KEYS)}, got {self.key!r}")

    @property
    def is_default(self) -> bool:
        return self.key == "id" and self.descending

    @property
    def bounded(self) -> bool:
        """Whether this order sorts a window of the newest ids, not every job."""
        return self.key != "id"

    def expression(self, tables: Tables) -> ColumnElement[Any]:
        """The value rows are ordered by (then by id, the same way)."""
        j = tables.jobs.c
        if self.key == "finished_at":
            return func.coalesce(j.finished_at, literal(_UNFINISHED_LAST[self.descending]))
        columns: dict[str, ColumnElement[Any]] = {
            "run_at": j.run_at,
            "attempts": j.attempt_count,
            "priority": j.priority,
        }
        return columns.get(self.key, j.id)

    def value_of(self, job: JobSummary) -> int:
        """A row's sort value, as :meth:`expression` computes it in the database."""
        if self.key == "finished_at":
            found = job.finished_at
            return _UNFINISHED_LAST[self.descending] if found is None else found
        return int(
            {
                "id": job.id,
                "run_at": job.run_at,
                "attempts": job.attempt_count,
                "priority": job.priority,
            }[self.key]
        )


@dataclass(frozen=True)
class SortCursor:
    """Where a sorted page ends: its last row's sort value and id."""

    value: int
    id: int

    def __str__(self) -> str:
        return f"{self.value}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> SortCursor:
        """``value:id`` as :meth:`__str__` writes it (InvalidInput naming the text)."""
        value, _, job_id = text.partition(":")
        try:
            cursor = cls(int(value), int(job_id))
        except ValueError:
            raise InvalidInput(
                f"after must be a sort value and an id like 17:4242, got {text!r}"
            ) from None
        validation.job_id(cursor.id, "after")
        validation.require_int(
            "after", cursor.value, minimum=validation.INT64_MIN, maximum=validation.INT64_MAX
        )
        return cursor


@dataclass(frozen=True)
class SortedPage:
    """One page of :func:`list_sorted_jobs`."""

    jobs: list[JobSummary]
    next_after: SortCursor | None
    """Pass as ``after`` for the next page; None on the last one."""
    window: int | None = None
    """A bounded order's lowest id: the page sorted the jobs from this id up (pass it
    back with ``after``). None for the id orders, which cover every job."""
    window_holds_all: bool = False
    """The window starts at the oldest job: this order covers every job."""
    stopped_early: bool = False
    """(Id orders) the page is short because its scan budget ran out: ids beyond
    :attr:`next_after` are still to be looked at."""


def list_sorted_jobs(
    queue: QueueContext | HasContext,
    job_filter: JobFilter | None = None,
    job_sort: JobSort | None = None,
    *,
    after: SortCursor | None = None,
    window: int | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
    scan_chunks: int | None = None,
) -> SortedPage:
    """One page of the jobs matching ``job_filter`` in ``job_sort``'s order, starting
    after ``after`` (the first page when None).

    A bounded order (see the module) sorts the jobs from id ``window`` up; None: the
    newest :data:`SORT_WINDOW` ids (the first page). Id descending
    is :func:`~sqlq_orm.ops.joblist.list_jobs`; ``scan_chunks`` bounds the id orders'
    scans as there. Bad arguments raise :class:`~sqlq_orm.errors.InvalidInput`.
    """
    job_filter = job_filter or JobFilter()
    job_sort = job_sort or JobSort()
    limit = validation.require_int("limit", limit, minimum=1, maximum=MAX_PAGE_SIZE)
    window = validation.optional_int("window", window, minimum=1)
    chunks = validation.optional_int("scan_chunks", scan_chunks, minimum=1) or MAX_SCAN_CHUNKS
    if job_sort.is_default:
        page = list_jobs(
            queue, job_filter, before=None if after is None else after.id, limit=limit,
            scan_chunks=chunks,
        )  # fmt: skip
        cursor = (
            None if page.next_before is None else SortCursor(page.next_before, page.next_before)
        )
        return SortedPage(page.jobs, cursor, stopped_early=page.stopped_early)
    context = context_of(queue)
    q = JobListQueries(context.tables)
    where = job_filter.conditions(context.tables)
    with context.read() as connection:
        lowest, highest = connection.execute(q.id_bounds()).one()
        if lowest is None:
            return SortedPage(jobs=[], next_after=None, window=window)
        if job_sort.key == "id":
            start = int(lowest) if after is None else after.id + 1
            return _scan_up(connection, q, where, start, int(highest), limit, chunks)
        if window is None:
            window = max(int(lowest), int(highest) - SORT_WINDOW + 1)
        statement = _window_page(context.tables, where, job_sort, window, after, limit)
        jobs = [JobSummary(**dict(row._mapping)) for row in connection.execute(statement)]
    last = jobs[-1] if len(jobs) == limit else None
    cursor = None if last is None else SortCursor(job_sort.value_of(last), last.id)
    return SortedPage(jobs, cursor, window=window, window_holds_all=window <= int(lowest))


def _window_page(
    tables: Tables,
    where: list[ColumnElement[bool]],
    job_sort: JobSort,
    window: int,
    after: SortCursor | None,
    limit: int,
) -> Any:
    """Matches from id ``window`` up, after ``after`` in ``(key, id)`` order: the
    primary key's range bounds the rows read, the sort is of those rows only."""
    j = tables.jobs.c
    key = job_sort.expression(tables)
    terms = [*where, j.id >= window]
    if after is not None:
        # (key, id) past the cursor, spelled without row values: every database plans
        # it, and the id range above still bounds what it reads.
        if job_sort.descending:
            terms.append(or_(key < after.value, and_(key == after.value, j.id < after.id)))
        else:
            terms.append(or_(key > after.value, and_(key == after.value, j.id > after.id)))
    order = (key.desc(), j.id.desc()) if job_sort.descending else (key.asc(), j.id.asc())
    return (
        select(*(j[name] for name in JobSummary.__dataclass_fields__))
        .where(*terms)
        .order_by(*order)
        .limit(limit)
    )


def _scan_up(
    connection: Connection,
    q: JobListQueries,
    where: list[ColumnElement[bool]],
    low: int,
    highest: int,
    limit: int,
    chunks: int,
) -> SortedPage:
    """Oldest first: :func:`~sqlq_orm.ops.joblist.list_jobs`'s bounded scan, upwards."""
    jobs: list[JobSummary] = []
    for _ in range(chunks):
        if low > highest:
            return SortedPage(jobs=jobs, next_after=None)
        high = min(highest, low + SCAN_CHUNK - 1)
        wanted = limit - len(jobs)
        statement = q.page(where, low, high, wanted).order_by(None).order_by(q.tables.jobs.c.id)
        jobs.extend(JobSummary(**dict(row._mapping)) for row in connection.execute(statement))
        if len(jobs) == limit:
            last = jobs[-1].id
            return SortedPage(jobs, SortCursor(last, last) if last < highest else None)
        low = high + 1
    if low > highest:
        return SortedPage(jobs=jobs, next_after=None)
    return SortedPage(jobs, SortCursor(low - 1, low - 1), stopped_early=True)
