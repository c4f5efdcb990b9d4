"""Browse jobs newest first, filtered, one page at a time, without OFFSET.

:func:`list_jobs` pages by id (keyset): a page is "the newest jobs below id X that match
the filter". A filter is not always served by an index (the schema has none on
``(status, id)`` or ``(queue, id)``), and a rare match would make a plain
``ORDER BY id DESC LIMIT n`` walk the whole table looking for it. So each page reads
the primary key in id ranges of at most :data:`SCAN_CHUNK` ids, from the top down, and
stops after :data:`MAX_SCAN_CHUNKS` of them: the work per page is bounded whatever the
filter and the table size. A page that stops early says where it stopped
(:attr:`JobPage.next_before`), and the next page resumes there.

:func:`matching_ids` lists the jobs a bulk action (retry or cancel a filtered
selection) applies to, capped at :data:`MAX_SELECTION`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, func, literal, literal_column, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ColumnElement, Select

from sqlq_orm.core import validation
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.db.tables import Tables
from sqlq_orm.errors import InvalidInput
from sqlq_orm.schema.json_text import JsonHasMember
from sqlq_orm.schema.mixins import (
    CONCURRENCY_KEY_MAX,
    DEDUPE_KEY_MAX,
    ERROR_CODE_MAX,
    JOB_MIXIN_COLUMNS,
    QUEUE_MAX,
    TYPE_MAX,
    WORKER_ID_MAX,
)
from sqlq_orm.schema.states import JobStatus

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
SCAN_CHUNK = 100_000
"""Ids read per range of the primary key while looking for a page's matches."""
MAX_SCAN_CHUNKS = 3
"""Ranges read per page at most: a page never reads more than 300,000 ids' rows."""
MAX_SELECTION = 1000
"""Ids one :func:`matching_ids` call returns at most (a bulk action reads in batches)."""
MAX_COUNTED = 10_000
"""A list's total counts this far (:func:`count_capped`), then says "more than"."""


@dataclass(frozen=True)
class JobFilter:
    """Which jobs to list: every field that is set must match (all None: every job)."""

    status: str | None = None
    queue: str | None = None
    type: str | None = None
    error_code: str | None = None
    job_id: int | None = None
    dedupe_key: str | None = None
    worker: str | None = None
    """The worker that claimed the job (``claimed_by``: its holder, or its last one)."""
    created_after: int | None = None
    """Created at or after this moment (epoch seconds)."""
    created_before: int | None = None
    """Created before this moment (epoch seconds)."""
    args_contain: Mapping[str, Any] | None = None
    """Jobs whose payload is a JSON object with these top-level members, each equal to
    the given scalar (a string, a whole number, True/False or None), e.g.
    ``{"tenant": "acme"}``: the same type and value, numbers compared as numbers; a
    member holding a list or an object never matches. At most
    :data:`MAX_ARGS_MEMBERS` members. On PostgreSQL this is ``payload @> :json``, which
    an optional GIN index serves (docs/howto/postgresql-production.md); elsewhere the
    database's JSON functions read every candidate row's payload."""
    concurrency_key: str | None = None
    """Jobs enqueued with this concurrency key."""
    columns: Mapping[str, Any] | None = None
    """The host app's own columns on the job table (e.g. ``{"tenant_id": 7}``), each
    equal to its value (None: not set). A name that is not one of the app's columns
    is refused when the filter is used, naming the columns there are."""

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in {s.value for s in JobStatus}:
            raise InvalidInput(
                f"status must be one of {', '.join(s.value for s in JobStatus)}, "
                f"got {self.status!r}"
            )
        validation.optional_name("queue", self.queue, QUEUE_MAX)
        validation.optional_name("type", self.type, TYPE_MAX)
        validation.optional_name("error_code", self.error_code, ERROR_CODE_MAX)
        validation.optional_name("dedupe_key", self.dedupe_key, DEDUPE_KEY_MAX)
        if self.job_id is not None:
            validation.job_id(self.job_id)
        validation.optional_name("worker", self.worker, WORKER_ID_MAX)
        for name in ("created_after", "created_before"):
            validation.optional_int(
                name, getattr(self, name), minimum=0, maximum=validation.INT32_MAX
            )
        if self.args_contain is not None:
            _require_members(self.args_contain)
        validation.optional_name("concurrency_key", self.concurrency_key, CONCURRENCY_KEY_MAX)
        if self.columns is not None:
            _require_column_values(self.columns)

    @property
    def is_empty(self) -> bool:
        return all(value is None for value in self.__dict__.values())

    def conditions(self, tables: Tables) -> list[ColumnElement[bool]]:
        """The WHERE terms for this filter (bound parameters, never spliced text)."""
        j = tables.jobs.c
        terms: list[ColumnElement[bool]] = []
        for name, column in (
            ("status", j.status),
            ("queue", j.queue),
            ("type", j.type),
            ("error_code", j.error_code),
            ("job_id", j.id),
            ("dedupe_key", j.dedupe_key),
            ("worker", j.claimed_by),
            ("concurrency_key", j.concurrency_key),
        ):
            value = getattr(self, name)
            if value is not None:
                terms.append(column == value)
        for name, value in (self.columns or {}).items():
            if name in JOB_MIXIN_COLUMNS or name not in j:
                own = sorted(c.name for c in j if c.name not in JOB_MIXIN_COLUMNS)
                raise InvalidInput(
                    f"columns: {name!r} is not one of the app's columns on "
                    f"{tables.jobs.name} (those are: {', '.join(own) or 'none'})"
                )
            terms.append(j[name].is_(None) if value is None else j[name] == value)
        if self.created_after is not None:
            terms.append(j.created_at >= self.created_after)
        if self.created_before is not None:
            terms.append(j.created_at < self.created_before)
        for key, value in (self.args_contain or {}).items():
            terms.append(
                JsonHasMember(
                    j.payload,
                    literal(key, String()),
                    literal(json.dumps({key: value}, ensure_ascii=False), String()),
                    literal(value),
                    literal_column(_member_kind(value)),
                )
            )
        return terms


MAX_ARGS_MEMBERS = 20
"""Members one ``args_contain`` filter may name."""
_MEMBER_KEY_MAX = 200


def _member_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "string" if isinstance(value, str) else "number"


def _require_members(members: object) -> None:
    """``args_contain``: a non-empty mapping of plain keys to strings, whole numbers,
    booleans or None (InvalidInput naming the offending member otherwise)."""
    if not isinstance(members, Mapping) or not members:
        raise InvalidInput(
            "args_contain must be a non-empty mapping of payload keys to values, e.g. "
            f'{{"tenant": "acme"}}; got {validation.short(members)}'
        )
    if len(members) > MAX_ARGS_MEMBERS:
        raise InvalidInput(
            f"args_contain may name at most {MAX_ARGS_MEMBERS} members, got {len(members)}"
        )
    for key, value in members.items():
        if (
            not isinstance(key, str)
            or not key
            or len(key) > _MEMBER_KEY_MAX
            or any(char in key for char in '"\\')
            or any(ord(char) < 32 for char in key)
        ):
            raise InvalidInput(
                f"args_contain keys must be non-empty strings of at most {_MEMBER_KEY_MAX} "
                "characters without quotes, backslashes or control characters; got "
                f"{validation.short(key)}"
            )
        validation.require_encodable("args_contain key", key)
        if isinstance(value, str):
            validation.require_encodable(f"args_contain[{key!r}]", value)
            if "\x00" in value:
                raise InvalidInput(
                    f"args_contain[{key!r}] must not contain NUL, got {validation.short(value)}"
                )
        elif isinstance(value, int) and not isinstance(value, bool):
            if not validation.INT64_MIN <= value <= validation.INT64_MAX:
                raise InvalidInput(
                    f"args_contain[{key!r}] must fit in 64 bits, got {validation.short(value)}"
                )
        elif value is not None and not isinstance(value, bool):
            raise InvalidInput(
                f"args_contain[{key!r}] must be a string, a whole number, True, False or "
                f"None (a float's equality differs between databases; a list or object "
                f"is not searched), got {validation.short(value)}"
            )


MAX_COLUMN_FILTERS = 20
"""App columns one ``columns`` filter may name."""


def _require_column_values(columns: object) -> None:
    """``columns``: a non-empty mapping of column names to scalars (InvalidInput naming
    the offending entry otherwise)."""
    if not isinstance(columns, Mapping) or not columns:
        raise InvalidInput(
            "columns must be a non-empty mapping of the app's column names to values, "
            f'e.g. {{"tenant_id": 7}}; got {validation.short(columns)}'
        )
    if len(columns) > MAX_COLUMN_FILTERS:
        raise InvalidInput(
            f"columns may name at most {MAX_COLUMN_FILTERS} columns, got {len(columns)}"
        )
    for name, value in columns.items():
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"columns keys must be column names, got {validation.short(name)}")
        if value is not None and not isinstance(value, (str, int, float)):
            raise InvalidInput(
                f"columns[{name!r}] must be a string, a number or None, "
                f"got {validation.short(value)}"
            )


@dataclass(frozen=True)
class JobSummary:
    """One row of the jobs list (no payload, never the lease token)."""

    id: int
    queue: str
    type: str
    status: str
    priority: int
    attempt_count: int
    retry_count: int
    max_retries: int
    error_code: str | None
    dedupe_key: str | None
    created_at: int
    run_at: int
    finished_at: int | None
    claimed_by: str | None


_SUMMARY_COLUMNS = list(JobSummary.__dataclass_fields__)


@dataclass(frozen=True)
class JobPage:
    """One page of :func:`list_jobs`."""

    jobs: list[JobSummary]
    next_before: int | None
    """Pass as ``before`` for the next (older) page; None when no older id is left."""
    stopped_early: bool = False
    """The page is short because its scan budget ran out, not because no job is left:
    ids from :attr:`next_before` down are still to be looked at."""


class JobListQueries:
    """The statements behind :func:`list_jobs` and :func:`matching_ids`."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def id_bounds(self) -> Select[Any]:
        """``min(id)``, ``max(id)``: both ends of the primary key, one lookup each.

        Two subqueries, not ``SELECT min(id), max(id)``: SQLite reads an index end
        only for a lone min() or max(), and scans the whole table for both at once
        (200 ms at a million rows instead of well under one).
        """
        j = self.tables.jobs.c
        return select(
            select(func.min(j.id)).scalar_subquery(), select(func.max(j.id)).scalar_subquery()
        )

    def page(
        self, where: list[ColumnElement[bool]], low: int, high: int, limit: int
    ) -> Select[Any]:
        """Matches in ``low <= id <= high``, newest first: a bounded primary-key range."""
        j = self.tables.jobs.c
        return (
            select(*(j[name] for name in _SUMMARY_COLUMNS))
            .where(*where, j.id >= low, j.id <= high)
            .order_by(j.id.desc())
            .limit(limit)
        )

    def selection(self, where: list[ColumnElement[bool]], limit: int) -> Select[Any]:
        """Ids of the newest matches; with a status term, ``ix_*_failed_code`` and
        ``ix_*_finished`` (status-leading, id in every SQLite index) serve it."""
        j = self.tables.jobs.c
        return select(j.id).where(*where).order_by(j.id.desc()).limit(limit)

    def count(self, where: list[ColumnElement[bool]]) -> Select[Any]:
        """How many jobs match (a bulk action's confirmation shows the real number)."""
        return select(func.count()).select_from(self.tables.jobs).where(*where)


def _summary(row: Any) -> JobSummary:
    return JobSummary(**dict(row._mapping))


def list_jobs(
    queue: QueueContext | HasContext,
    job_filter: JobFilter | None = None,
    *,
    before: int | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
    scan_chunks: int | None = None,
) -> JobPage:
    """The newest jobs with an id below ``before`` (all ids when None) that match.

    ``queue`` is a :class:`~sqlq_orm.Queue` or its context. At most ``limit`` jobs
    (1 to :data:`MAX_PAGE_SIZE`); see the module for how the scan is bounded
    (``scan_chunks`` ranges of :data:`SCAN_CHUNK` ids at most; default
    :data:`MAX_SCAN_CHUNKS`). Bad arguments raise :class:`~sqlq_orm.errors.InvalidInput`.
    """
    job_filter = job_filter or JobFilter()
    limit = validation.require_int("limit", limit, minimum=1, maximum=MAX_PAGE_SIZE)
    before = validation.optional_int("before", before, minimum=1)
    chunks = validation.optional_int("scan_chunks", scan_chunks, minimum=1)
    context = context_of(queue)
    q = JobListQueries(context.tables)
    where = job_filter.conditions(context.tables)
    with context.read() as connection:
        lowest, highest = connection.execute(q.id_bounds()).one()
        if lowest is None:
            return JobPage(jobs=[], next_before=None)
        high = int(highest) if before is None else min(int(highest), before - 1)
        return _scan(connection, q, where, int(lowest), high, limit, chunks or MAX_SCAN_CHUNKS)


def _scan(
    connection: Connection,
    q: JobListQueries,
    where: list[ColumnElement[bool]],
    lowest: int,
    high: int,
    limit: int,
    chunks: int,
) -> JobPage:
    jobs: list[JobSummary] = []
    low = high + 1
    for _ in range(chunks):
        if high < lowest:
            break
        low = max(lowest, high - SCAN_CHUNK + 1)
        wanted = limit - len(jobs)
        jobs.extend(_summary(row) for row in connection.execute(q.page(where, low, high, wanted)))
        if len(jobs) == limit:
            last = jobs[-1].id
            return JobPage(jobs=jobs, next_before=last if last > lowest else None)
        high = low - 1
    if high < lowest:
        return JobPage(jobs=jobs, next_before=None)
    return JobPage(jobs=jobs, next_before=low, stopped_early=True)


def matching_ids(
    queue: QueueContext | HasContext,
    job_filter: JobFilter,
    *,
    limit: int = MAX_SELECTION,
    before: int | None = None,
) -> list[int]:
    """Ids of the newest jobs (at most ``limit``) that match ``job_filter``, newest first;
    only ids below ``before`` when it is given (the next batch of a long selection).

    For bulk actions: the caller narrows the filter to the statuses the action applies
    to (e.g. FAILED for a retry), which a status-leading index serves.
    """
    limit = validation.require_int("limit", limit, minimum=1, maximum=MAX_SELECTION)
    before = validation.optional_int("before", before, minimum=1)
    context = context_of(queue)
    q = JobListQueries(context.tables)
    where = job_filter.conditions(context.tables)
    if before is not None:
        where.append(context.tables.jobs.c.id < before)
    with context.read() as connection:
        rows = connection.execute(q.selection(where, limit))
        return [int(row.id) for row in rows]


def count_capped(
    queue: QueueContext | HasContext, job_filter: JobFilter, *, cap: int = MAX_COUNTED
) -> int:
    """How many jobs match ``job_filter``, counting no further than ``cap + 1``: a
    list's total at a bounded cost (``cap + 1`` reads "more than ``cap``")."""
    cap = validation.require_int("cap", cap, minimum=1, maximum=validation.INT32_MAX)
    context = context_of(queue)
    j = context.tables.jobs.c
    found = select(j.id).where(*job_filter.conditions(context.tables)).limit(cap + 1).subquery()
    with context.read() as connection:
        return int(connection.execute(select(func.count()).select_from(found)).scalar_one())


EXACT_COUNT_SECONDS = 0.08
"""How long an exact count of every match (the list's ``count=all``) may take: within
the page's 100 ms budget. A count that takes longer is cancelled by the database."""


def count_within(
    queue: QueueContext | HasContext, job_filter: JobFilter, seconds: float
) -> int | None:
    """Every job matching ``job_filter``, counted exactly, or None when the count took
    longer than ``seconds`` (the database cancelled it: ``Backend.time_limited``).

    On a large table a filter no index serves counts every row (about 100-170 ms at a
    million jobs on PostgreSQL); the caller shows a bounded count instead, and says so.
    """
    context = context_of(queue)
    counted = (
        select(func.count())
        .select_from(context.tables.jobs)
        .where(*job_filter.conditions(context.tables))
    )
    try:
        with context.read() as connection, context.dialect.time_limited(connection, seconds):
            return int(connection.execute(counted).scalar_one())
    except DBAPIError as exc:
        if context.dialect.is_out_of_time(exc):
            return None
        raise


def count_matching(
    queue: QueueContext | HasContext, job_filter: JobFilter, statuses: Sequence[str]
) -> int:
    """How many jobs match ``job_filter`` and are in one of ``statuses`` (none: 0)."""
    if not statuses:
        return 0
    context = context_of(queue)
    q = JobListQueries(context.tables)
    where = job_filter.conditions(context.tables)
    where.append(context.tables.jobs.c.status.in_(list(statuses)))
    with context.read() as connection:
        return int(connection.execute(q.count(where)).scalar_one())


@dataclass(frozen=True)
class RecentCount:
    """How many jobs match among the newest ones (:func:`count_recent`)."""

    count: int
    """Matches found, at most ``cap + 1`` (``cap + 1`` reads "more than ``cap``")."""
    scanned_all: bool
    """Every job was looked at (else only the newest ``scan`` ids were)."""


def count_recent(
    queue: QueueContext | HasContext,
    job_filter: JobFilter,
    *,
    cap: int = MAX_COUNTED,
    scan: int = SCAN_CHUNK,
    since: int | None = None,
) -> RecentCount:
    """How many of the newest ``scan`` ids match ``job_filter``, counting no further
    than ``cap + 1``: a list's total at a cost bounded like its page's, whatever the
    filter (a rare match no index serves would otherwise count the whole table).
    ``since`` counts the ids from there up instead (a sorted list's window)."""
    cap = validation.require_int("cap", cap, minimum=1, maximum=validation.INT32_MAX)
    scan = validation.require_int("scan", scan, minimum=1, maximum=validation.INT32_MAX)
    since = validation.optional_int("since", since, minimum=1)
    context = context_of(queue)
    q = JobListQueries(context.tables)
    j = context.tables.jobs.c
    where = job_filter.conditions(context.tables)
    with context.read() as connection:
        lowest, highest = connection.execute(q.id_bounds()).one()
        if lowest is None:
            return RecentCount(count=0, scanned_all=True)
        low = max(int(lowest), int(highest) - scan + 1 if since is None else since)
        found = (
            select(j.id).where(*where, j.id >= low, j.id <= int(highest)).limit(cap + 1).subquery()
        )
        count = int(connection.execute(select(func.count()).select_from(found)).scalar_one())
    return RecentCount(count=count, scanned_all=low == int(lowest) or count > cap)
