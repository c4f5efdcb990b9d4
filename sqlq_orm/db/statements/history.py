"""A batch's attempt rows and events, written in SQL from the job rows themselves.

A claim or a batch of successes changes many jobs with one statement; their attempt
rows and events are then one ``INSERT ... SELECT`` each over the jobs just changed
(``id IN :p_ids``), instead of a parameter set per row built in Python. The event
details are the same compact JSON the queue writes elsewhere
(:func:`sqlq_orm.queue.core.detail_json`), assembled by string concatenation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    and_,
    bindparam,
    cast,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.statements.base import StatementGroup
from sqlq_orm.schema.states import AttemptStatus, Event


def _text(value: ColumnElement[Any]) -> ColumnElement[str]:
    return cast(value, String)


def _json_attempt(attempt: ColumnElement[Any], *more: tuple[str, ColumnElement[Any]]) -> Any:
    """``{"attempt":N,...}`` exactly as ``json.dumps(..., separators=(",", ":"))``."""
    text: Any = literal('{"attempt":', String) + _text(attempt)
    for key, value in more:
        text = text + literal(f',"{key}":', String) + _text(value)
    return text + literal("}", String)


class HistoryStatements(StatementGroup):
    """Attempt rows and events of a claimed or succeeded batch, from the changed rows.

    Each writer takes a *source*: a selectable with the changed jobs' ``id``,
    ``attempt_count`` and ``claimed_by``. On most databases the source is the jobs
    table itself (``id IN :p_ids``, run right after the change, in its transaction).
    Where a statement may change rows inside a ``WITH`` (PostgreSQL), the change and
    its history go out as one statement instead (:meth:`with_history`): the source is
    the ``UPDATE ... RETURNING`` itself, and the whole batch is one round trip.
    """

    def _build_history(self) -> None:
        j = self.tables.jobs.c
        batch = (
            select(j.id, j.attempt_count, j.claimed_by)
            .where(j.id.in_(bindparam("p_ids", expanding=True)))
            .subquery("batch")
        )
        (self.open_attempts_of_batch,) = self.claim_history(batch, start=True)
        (self.claim_events_of_batch,) = self.claim_history(batch, start=False)
        self.close_succeeded_attempts_of_batch, self.succeeded_events_of_batch = (
            self.success_history(batch)
        )
        self._build_granted_leases()

    def _build_granted_leases(self) -> None:
        """The lease length a claim's history records, set to the one granted.

        A claim writes its history with the claim's own lease length; the jobs of types
        with a lease of their own (a task's ``lease=``) then get theirs in the same
        transaction (``set_leases``). These statements put the length granted into what
        the history says, before the transaction commits: the open attempt rows that
        stand for CLAIMED (``lease_seconds``), or the CLAIMED events just written.
        """
        a, e = self.tables.attempts.c, self.tables.events.c
        self.granted_lease_of_open_attempts = (
            update(self.tables.attempts)
            .where(
                a.job_id.in_(bindparam("p_ids", expanding=True)),
                a.status == AttemptStatus.RUNNING.value,
                a.after_event_id.is_not(None),
            )
            .values(lease_seconds=bindparam("p_lease_seconds", type_=Integer))
        )
        self.last_claimed_events = (
            select(e.job_id, func.max(e.id))
            .where(
                e.job_id.in_(bindparam("p_ids", expanding=True)),
                e.event == Event.CLAIMED.value,
            )
            .group_by(e.job_id)
        )
        self.granted_lease_of_claimed_event = (
            update(self.tables.events)
            .where(e.id == bindparam("p_event_id", type_=Integer))
            .values(detail=bindparam("p_detail", type_=String))
        )

    def with_history(self, change: Any, history: Callable[[Any], list[Any]]) -> Any:
        """``WITH changed AS (change), h1 AS (...), ... SELECT * FROM changed``.

        ``change`` is an ``UPDATE ... RETURNING id, attempt_count, claimed_by, ...``;
        ``history(source)`` builds the inserts over its rows. Only for backends where
        :attr:`~sqlq_orm.db.backends.base.Backend.history_in_one_statement` is set.
        """
        changed = change.cte("changed")
        writes = [insert_.cte(f"history_{i}") for i, insert_ in enumerate(history(changed))]
        return select(*changed.c).add_cte(*writes)

    def claim_history(self, source: Any, *, start: bool) -> list[Any]:
        """The claim's history: (attempt opened, standing for CLAIMED + STARTED) or
        (CLAIMED)."""
        attempts, events = self.tables.attempts, self.tables.events
        s = source.c
        now = self.now
        lease_seconds = bindparam("p_lease_seconds", type_=Integer)
        if not start:
            # The lease is taken; the attempt is the next one, opened by start().
            return [
                insert(events).from_select(
                    _EVENT_COLUMNS,
                    select(
                        s.id,
                        now,
                        literal(Event.CLAIMED.value),
                        s.claimed_by,
                        _json_attempt(s.attempt_count + 1, ("lease_seconds", lease_seconds)),
                    ).order_by(s.id),
                )
            ]
        # One row, no events: the row stands for CLAIMED and STARTED (and, later,
        # SUCCEEDED), placed after the job's last written event (sqlq_orm.ops.stand_ins).
        e = events.c
        last_event = (
            select(func.coalesce(func.max(e.id), 0)).where(e.job_id == s.id).scalar_subquery()
        )
        opened = insert(attempts).from_select(
            [
                "job_id",
                "attempt",
                "worker_id",
                "started_at",
                "status",
                "after_event_id",
                "lease_seconds",
            ],
            select(
                s.id,
                s.attempt_count,
                s.claimed_by,
                now,
                literal(AttemptStatus.RUNNING.value),
                last_event,
                lease_seconds,
            ),
        )
        return [opened]

    def success_history(self, source: Any) -> list[Any]:
        """A success's history: the attempt closed SUCCEEDED, and a SUCCEEDED event
        unless the attempt row stands for it."""
        attempts, events = self.tables.attempts, self.tables.events
        s, a = source.c, attempts.c
        now = self.now
        closed = self.dialect.insert(attempts).from_select(
            ["job_id", "attempt", "worker_id", "started_at", "finished_at", "status"],
            select(
                s.id,
                s.attempt_count,
                s.claimed_by,
                now,
                now,
                literal(AttemptStatus.SUCCEEDED.value),
            )
            # SQLite reads "SELECT ... FROM x ON CONFLICT" as a join's ON unless a WHERE
            # comes between (its documented upsert parsing ambiguity); true() would be
            # compiled away, so a predicate that always holds.
            .where(s.id.is_not(None)),
        )
        closed = closed.on_conflict_do_update(
            index_elements=[a.job_id, a.attempt],
            set_={
                "finished_at": now,
                "status": closed.excluded.status,
                "error_code": None,
                "error_detail": None,
            },
        )
        # Only attempts whose events are all written (opened by start() alone, or
        # before sqlq_0013) get a SUCCEEDED event; the others stand for theirs.
        logged = insert(events).from_select(
            _EVENT_COLUMNS,
            select(
                s.id,
                now,
                literal(Event.SUCCEEDED.value),
                s.claimed_by,
                _json_attempt(s.attempt_count),
            )
            .select_from(
                source.outerjoin(attempts, and_(a.job_id == s.id, a.attempt == s.attempt_count))
            )
            .where(a.after_event_id.is_(None))
            .order_by(s.id),
        )
        return [closed, logged]


_EVENT_COLUMNS = ["job_id", "ts", "event", "actor", "detail"]
