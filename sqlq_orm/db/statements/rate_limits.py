"""Rate limits: at most N job starts per period in a queue, per ``rate_key``.

A queue's limit lives in its control row (``sqlq_queues.rate_limit`` starts per
``rate_period`` seconds). The plain claim never takes a rate-limited queue's jobs (its
guard, :meth:`.controls.ControlStatements.not_paused`, skips those queues as it skips
paused ones); a claim that still has room claims them with these statements, one
limited queue at a time, in its own transaction:

1. lock the queue's control row (``FOR UPDATE`` on PostgreSQL and MariaDB; SQLite's
   claim already holds the one write lock), so two claims of one limited queue take
   turns and the later one counts what the earlier one committed (both run at READ
   COMMITTED, so each statement after the lock sees it);
2. count the starts in the sliding window per key: jobs of the queue whose
   ``rate_started_at`` is later than ``now - rate_period``;
3. pick ready jobs of keys with room (in claim order) and claim exactly those, setting
   ``rate_started_at = now``.

A job whose own last start is still in the window is not a candidate: claiming it
again would overwrite a start the window still counts (a retry waits until its
previous start has left the window). Jobs over the limit stay QUEUED; an idle
worker sleeps until the window's oldest start leaves it (:attr:`window_frees_in`).
"""

from __future__ import annotations

from sqlalchemy import Integer, bindparam, func, or_, select, update

from sqlq_orm.db.statements.base import StatementGroup
from sqlq_orm.schema.states import JobStatus

NO_KEY = ""
"""How the queue's shared bucket (jobs without a ``rate_key``) is named in the
statements' key lists (a ``rate_key`` is never empty)."""


class RateLimitStatements(StatementGroup):
    """Setting a queue's rate limit and the claim's window count (needs a control table)."""

    def _build_rate_limits(self) -> None:
        queues = self.tables.queues
        if queues is None:
            return
        q = queues.c
        j = self.tables.jobs.c
        now = self.now
        limit = self.dialect.insert(queues).values(
            name=bindparam("p_name"),
            rate_limit=bindparam("p_rate_limit", type_=Integer),
            rate_period=bindparam("p_rate_period", type_=Integer),
            changed_by=bindparam("p_actor"),
            updated_at=now,
        )
        self.set_rate_limit = limit.on_conflict_do_update(
            index_elements=[q.name],
            set_={
                "rate_limit": limit.excluded.rate_limit,
                "rate_period": limit.excluded.rate_period,
                "changed_by": limit.excluded.changed_by,
                "updated_at": limit.excluded.updated_at,
            },
        )
        # Rows changed: 1 when the queue had a limit, 0 otherwise.
        self.clear_rate_limit = (
            update(queues)
            .where(q.name == bindparam("p_name"), q.rate_limit.is_not(None))
            .values(
                rate_limit=None,
                rate_period=None,
                changed_by=bindparam("p_actor"),
                updated_at=now,
            )
        )
        # The limited, running queues among a claim's queues (name order: the order
        # their rows are locked in, so two claims never wait on each other in a cycle).
        self.select_rate_limited = (
            select(q.name, q.rate_limit, q.rate_period)
            .where(
                q.name.in_(bindparam("p_queues", expanding=True)),
                q.rate_limit.is_not(None),
                q.paused_at.is_(None),
            )
            .order_by(q.name)
        )
        # The same row again under its lock: the limit may have changed meanwhile.
        self.lock_rate_limited = self.dialect.lock_rows(
            select(q.rate_limit, q.rate_period).where(
                q.name == bindparam("p_name"),
                q.rate_limit.is_not(None),
                q.paused_at.is_(None),
            ),
            False,
        )
        in_window = (
            j.queue == bindparam("p_queue"),
            j.rate_started_at > now - bindparam("p_period", type_=Integer),
        )
        key = func.coalesce(j.rate_key, NO_KEY)
        self.rate_starts_by_key = (
            select(key.label("rate_key"), func.count().label("starts"))
            .where(*in_window)
            .group_by(key)
        )
        self.rate_candidates = (
            select(j.id, key.label("rate_key"))
            .where(
                j.queue == bindparam("p_queue"),
                j.status == JobStatus.QUEUED.value,
                j.run_at <= now,
                or_(
                    j.rate_started_at.is_(None),
                    j.rate_started_at <= now - bindparam("p_period", type_=Integer),
                ),
                key.not_in(bindparam("p_full", expanding=True)),
            )
            .order_by(j.priority.desc(), j.run_at, j.id)
            .limit(bindparam("p_scan", type_=Integer))
        )
        # Seconds until the oldest start in the window leaves it (None: none in it).
        self.window_frees_in = select(
            func.min(j.rate_started_at) + bindparam("p_period", type_=Integer) - now
        ).where(*in_window)
        self.queue_due_in = select(func.min(j.run_at) - now).where(
            j.queue == bindparam("p_queue"), j.status == JobStatus.QUEUED.value
        )


def pick_within_rate(
    candidates: list[tuple[int, str]], starts: dict[str, int], limit: int, room: int
) -> list[int]:
    """Of ``candidates`` (``(id, key)`` in claim order), the ids to start now: each
    key's starts in the window (``starts``) plus those picked stay within ``limit``,
    and at most ``room`` in all."""
    taken = dict(starts)
    picked: list[int] = []
    for job_id, key in candidates:
        if len(picked) >= room:
            break
        if taken.get(key, 0) < limit:
            taken[key] = taken.get(key, 0) + 1
            picked.append(job_id)
    return picked
