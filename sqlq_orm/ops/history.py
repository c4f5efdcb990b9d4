"""Jobs finished over time, in equal buckets: what the dashboard's charts draw.

:func:`finished_history` counts the jobs that reached SUCCEEDED, FAILED or CANCELLED
in each bucket of a recent window, in one query on ``ix_*_finished``
(status, finished_at), with "now" read from the queue's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.sql import Select

from sqlq_orm.core import validation
from sqlq_orm.db.context import HasContext, QueueContext, context_of
from sqlq_orm.db.tables import Tables
from sqlq_orm.errors import InvalidInput
from sqlq_orm.schema.states import TERMINAL, JobStatus

TERMINAL_VALUES = sorted(s.value for s in TERMINAL)
DEFAULT_HISTORY_WINDOW = 3600
DEFAULT_HISTORY_BUCKETS = 30


@dataclass(frozen=True)
class HistoryBucket:
    """Jobs that finished in ``[start, start + seconds)``, by outcome."""

    start: int
    seconds: int
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.cancelled


@dataclass(frozen=True)
class History:
    """Equal buckets covering the ``window_seconds`` before ``now``, oldest first."""

    now: int
    window_seconds: int
    buckets: list[HistoryBucket]


def history_query(tables: Tables, start: int, bucket_seconds: int) -> Select[Any]:
    """(status, bucket number, count) of jobs finished since ``start``; on ``ix_*_finished``."""
    j = tables.jobs.c
    # Floor division renders per dialect (``/`` on integers, ``DIV`` on MySQL).
    bucket = ((j.finished_at - literal(start)) // literal(bucket_seconds)).label("bucket")
    return (
        select(j.status, bucket, func.count())
        .where(j.status.in_(TERMINAL_VALUES), j.finished_at >= start)
        .group_by(j.status, bucket)
    )


def finished_history(
    queue: QueueContext | HasContext,
    *,
    window_seconds: int = DEFAULT_HISTORY_WINDOW,
    buckets: int = DEFAULT_HISTORY_BUCKETS,
) -> History:
    """Jobs finished in each of ``buckets`` equal slices of the last ``window_seconds``.

    ``window_seconds`` must be a multiple of ``buckets`` (so every bucket is as long);
    bad arguments raise :class:`~sqlq_orm.errors.InvalidInput`.
    """
    buckets = validation.require_int("buckets", buckets, minimum=1, maximum=1000)
    window_seconds = validation.require_int(
        "window_seconds", window_seconds, minimum=buckets, maximum=validation.INT32_MAX
    )
    if window_seconds % buckets:
        raise InvalidInput(
            f"window_seconds must be a multiple of buckets ({buckets}), got {window_seconds}"
        )
    size = window_seconds // buckets
    context = context_of(queue)
    with context.read() as connection:
        now = context.now(connection)
        # The last bucket ends just after now, so a job finished this second counts.
        start = now + 1 - window_seconds
        counts: dict[tuple[int, str], int] = {}
        for status, number, count in connection.execute(history_query(context.tables, start, size)):
            if 0 <= int(number) < buckets:
                counts[(int(number), status)] = int(count)
    return History(
        now=now,
        window_seconds=window_seconds,
        buckets=[
            HistoryBucket(
                start=start + n * size,
                seconds=size,
                succeeded=counts.get((n, JobStatus.SUCCEEDED.value), 0),
                failed=counts.get((n, JobStatus.FAILED.value), 0),
                cancelled=counts.get((n, JobStatus.CANCELLED.value), 0),
            )
            for n in range(buckets)
        ],
    )
