"""Concurrency keys: the claim's limit check and the recount that closes its race.

A job enqueued with ``concurrency_key`` and ``concurrency_limit`` may be claimed only
while fewer than ``concurrency_limit`` jobs with that key are CLAIMED or RUNNING
("held"). The claim statement checks it for every candidate (:meth:`held_by_key`) and,
within one batch, ranks the candidates of a key in claim order so the batch never
takes more than the key's free places (:func:`within_limits`, and the same rule in SQL
in :mod:`.claim`). A job whose key is full is passed over, so it never holds up the
jobs behind it.

On SQLite that is the whole story: one writer at a time, so the claim always counts
what is there. On PostgreSQL and MySQL two claims run side by side, each counting on
a snapshot that misses the other's uncommitted claim, and both could take the last
place of a key. So a claim that took keyed jobs counts those keys again before it
commits (:attr:`ConcurrencyStatements.recount_held`), after a per-key lock held until
its transaction ends (PostgreSQL advisory locks, MySQL named locks: the backend's
``lock_concurrency_keys``), so the later of two claims of a key counts what the
earlier one committed; if a key is now over its limit the claim rolls back and runs
again. The recount is a plain read: it never waits on a job row another transaction
holds locked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, case, func, select
from sqlalchemy.engine import Row
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.statements.base import HELD_VALUES, StatementGroup, status_in


class ConcurrencyStatements(StatementGroup):
    """The per-key count the claim filters on, and the recount after a claim."""

    def _build_concurrency(self) -> None:
        j = self.tables.jobs.c
        # Held jobs of the given keys with their limits, one row each (counted in
        # Python per key, against the smallest limit).
        recount = select(j.concurrency_key, j.concurrency_limit).where(
            j.concurrency_key.in_(bindparam("p_keys", expanding=True)),
            status_in(j.status, HELD_VALUES),
        )
        self.recount_held = recount
        self.recheck_concurrency = self.dialect.concurrency_recheck
        # Keys of two job tables in one database must not share locks.
        self.concurrency_lock_scope = self.tables.jobs.fullname

    def strictest_limit(self) -> ColumnElement[int]:
        """The limit a candidate row is claimed under: the smallest of its own
        ``concurrency_limit`` and those of its key's held jobs. Jobs of one key may
        carry different limits; the strictest among the held and the candidate wins,
        the rule ``sqlq check`` checks (held jobs never outnumber the smallest limit
        among them)."""
        jobs = self.tables.jobs
        held = jobs.alias("held_limits")
        held_limit = (
            select(func.min(held.c.concurrency_limit))
            .where(
                held.c.concurrency_key == jobs.c.concurrency_key,
                status_in(held.c.status, HELD_VALUES),
            )
            .scalar_subquery()
        )
        own = jobs.c.concurrency_limit
        return case((held_limit < own, held_limit), else_=own)

    def held_by_key(self) -> ColumnElement[int]:
        """Jobs held (CLAIMED or RUNNING) with the candidate row's concurrency key.

        A correlated count over ``ix_*_concurrency`` (concurrency_key, status); only
        evaluated for candidates that have a key."""
        jobs = self.tables.jobs
        held = jobs.alias("held")
        return (
            select(func.count())
            .select_from(held)
            .where(
                held.c.concurrency_key == jobs.c.concurrency_key,
                status_in(held.c.status, HELD_VALUES),
            )
            .scalar_subquery()
        )


def within_limits(rows: Sequence[Row[Any]]) -> list[int]:
    """The ids of claim candidates (in claim order) that fit their keys' limits.

    Each row is ``(id, priority, run_at, concurrency_key, concurrency_limit, held)``,
    the limit already the strictest of the candidate's own and its key's held jobs'
    (:meth:`ConcurrencyStatements.strictest_limit`); a row without a key always fits;
    the n-th candidate of a key fits while ``held + n`` is within the strictest limit
    of the key's candidates so far. The same rule as the SQL of the claim on databases
    with ``UPDATE ... RETURNING``; here for the lock-update-read plan.
    """
    taken: dict[str, int] = {}
    strictest: dict[str, int] = {}
    kept: list[int] = []
    for row in rows:
        job_id, _priority, _run_at, key, limit, held = tuple(row)
        if key is None:
            kept.append(job_id)
            continue
        strictest[key] = min(int(limit), strictest.get(key, int(limit)))
        rank = taken.get(key, 0) + 1
        if held + rank <= strictest[key]:
            taken[key] = rank
            kept.append(job_id)
    return kept


def over_limit(claimed: Sequence[Row[Any]], held: Sequence[Any]) -> dict[str, int]:
    """Keys of the ``claimed`` rows whose held jobs (``held``: ``(key, limit)`` per held
    job, counted after the claim, the claimed ones included) outnumber the smallest
    limit among them: key → held."""
    keys = {row.concurrency_key for row in claimed if row.concurrency_key is not None}
    counts: dict[str, int] = {}
    limits: dict[str, int] = {}
    for key, limit in held:
        counts[key] = counts.get(key, 0) + 1
        limits[key] = min(int(limit), limits.get(key, int(limit)))
    return {key: counts[key] for key in keys if counts.get(key, 0) > limits.get(key, 0)}
