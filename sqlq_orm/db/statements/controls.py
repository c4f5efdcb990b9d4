"""Operator controls on queues: pause, resume, and the guard the claim adds for them."""

from __future__ import annotations

from sqlalchemy import and_, bindparam, exists, func, or_, select, true, update
from sqlalchemy.sql.elements import ColumnElement

from sqlq_orm.db.statements.base import StatementGroup


class ControlStatements(StatementGroup):
    """Statements on the queue-control table (built only when the models have one)."""

    def _build_controls(self) -> None:
        queues = self.tables.queues
        if queues is None:
            return
        q = queues.c
        now = self.now
        pause = self.dialect.insert(queues).values(
            name=bindparam("p_name"),
            paused_at=now,
            changed_by=bindparam("p_actor"),
            updated_at=now,
        )
        # Pausing a paused queue keeps when it was first paused.
        self.pause_queue = pause.on_conflict_do_update(
            index_elements=[q.name],
            set_={
                "paused_at": func.coalesce(q.paused_at, pause.excluded.paused_at),
                "changed_by": pause.excluded.changed_by,
                "updated_at": pause.excluded.updated_at,
            },
        )
        # Rows changed: 1 when the queue was paused, 0 when it was running already.
        self.resume_queue = (
            update(queues)
            .where(q.name == bindparam("p_name"), q.paused_at.is_not(None))
            .values(paused_at=None, changed_by=bindparam("p_actor"), updated_at=now)
        )
        self.select_queue_controls = select(
            q.name, q.paused_at, q.changed_by, q.updated_at, q.rate_limit, q.rate_period
        ).order_by(q.name)
        self.select_paused_names = select(q.name).where(q.paused_at.is_not(None))
        self.is_queue_paused = self.select_paused_names.where(q.name == bindparam("p_name"))

    def not_paused(self, names: ColumnElement[str] | None = None) -> ColumnElement[bool]:
        """The claim's guard: none of the claimed queue(s) is paused or rate-limited.

        A rate-limited queue's jobs are claimed apart, under its row's lock (see
        :mod:`.rate_limits`).
        ``names`` is a bound queue name (one branch of a merged claim); by default the
        claim's ``p_queues`` list. The subquery does not refer to the job row, so the
        database evaluates it once per statement (a primary-key lookup), not per job;
        a paused queue's backlog is never scanned. Without a control table: no guard.
        """
        queues = self.tables.queues
        if queues is None:
            return true()
        q = queues.c
        named = (
            q.name.in_(bindparam("p_queues", expanding=True)) if names is None else q.name == names
        )
        held_back = or_(q.paused_at.is_not(None), q.rate_limit.is_not(None))
        return ~exists(select(q.name).where(and_(named, held_back)))
