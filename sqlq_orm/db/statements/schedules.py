"""Recurring schedules: registering them, finding the due ones, claiming their slots."""

from __future__ import annotations

from sqlalchemy import BigInteger, bindparam, case, delete, func, or_, select, update

from sqlq_orm.db.statements.base import StatementGroup


class ScheduleStatements(StatementGroup):
    """Statements on the schedules table (only built when the models have one)."""

    def _build_schedules(self) -> None:
        schedules = self.tables.schedules
        if schedules is None:
            return
        s = schedules.c
        now = self.now
        # -- register: upsert from the code's declaration ----------------------------
        register = self.dialect.insert(schedules).values(
            name=bindparam("p_name"),
            type=bindparam("p_type"),
            queue=bindparam("p_queue"),
            cron=bindparam("p_cron"),
            timezone=bindparam("p_timezone"),
            last_slot_at=None,
            next_slot_at=bindparam("p_next_slot_at"),
            created_at=now,
            updated_at=now,
        )
        new = register.excluded
        # Re-registering (every worker start) keeps the progress, so slots missed while
        # nothing ran are still due; a changed cron or time zone starts from its own
        # next slot.
        timing_changed = or_(s.cron != new.cron, s.timezone != new.timezone)
        anything_changed = or_(timing_changed, s.type != new.type, s.queue != new.queue)
        self.upsert_schedule = register.on_conflict_do_update(
            index_elements=[s.name],
            # The columns compared with the old row first: MySQL assigns left to right
            # and later expressions see the new values (PostgreSQL and SQLite: all see
            # the old row).
            set_={
                "next_slot_at": case((timing_changed, new.next_slot_at), else_=s.next_slot_at),
                "updated_at": case((anything_changed, now), else_=s.updated_at),
                "type": new.type,
                "queue": new.queue,
                "cron": new.cron,
                "timezone": new.timezone,
            },
        )
        # A running scheduler's periodic re-registration: recreate a row that is gone,
        # never change one that is there (the latest started process's definition
        # stays; see Queue.register_schedules).
        self.register_missing_schedule = register.on_conflict_do_update(
            index_elements=[s.name], set_={"updated_at": s.updated_at}
        )
        # -- tick: which schedules are due, by the queue's clock ----------------------
        self.select_due_schedules = (
            select(
                s.name,
                s.type,
                s.queue,
                s.cron,
                s.timezone,
                s.last_slot_at,
                s.next_slot_at,
                now.label("now"),
            )
            .where(s.next_slot_at <= now, s.paused_at.is_(None))
            .order_by(s.name)
        )
        # -- claim a schedule's slots: compare-and-set on next_slot_at -----------------
        # Of any number of schedulers that saw the same next_slot_at, one updates the
        # row; the others find it moved (rowcount 0) and enqueue nothing. next_slot_at
        # only moves forward, so the slots each winner owns never overlap. The guard on
        # last_slot_at keeps an enqueued slot from being enqueued again whatever
        # next_slot_at says.
        first_slot = bindparam("p_first_slot", type_=BigInteger)
        last_slot = bindparam("p_last_slot", type_=BigInteger)
        self.advance_schedule = (
            update(schedules)
            .where(
                s.name == bindparam("p_name"),
                s.next_slot_at == bindparam("p_seen_next_slot_at"),
                or_(s.last_slot_at.is_(None), s.last_slot_at < first_slot),
                # A pause committed after the tick read the row still holds.
                s.paused_at.is_(None),
            )
            .values(
                last_slot_at=func.coalesce(last_slot, s.last_slot_at),
                next_slot_at=bindparam("p_next_slot_at"),
                updated_at=now,
            )
        )
        # -- reads and removal --------------------------------------------------------
        self.select_schedules = select(
            s.name,
            s.type,
            s.queue,
            s.cron,
            s.timezone,
            s.last_slot_at,
            s.next_slot_at,
            s.updated_at,
            s.paused_at,
        ).order_by(s.name)
        # -- operator controls ----------------------------------------------------------
        self.pause_schedule = (
            update(schedules)
            .where(s.name == bindparam("p_name"), s.paused_at.is_(None))
            .values(paused_at=now, updated_at=now)
        )
        # Resuming starts from the first slot after now: the slots of the pause are
        # skipped, not caught up (the caller computes it from the row's cron).
        self.select_schedule_timing = select(s.cron, s.timezone, s.paused_at).where(
            s.name == bindparam("p_name")
        )
        self.resume_schedule = (
            update(schedules)
            .where(s.name == bindparam("p_name"), s.paused_at.is_not(None))
            .values(paused_at=None, next_slot_at=bindparam("p_next_slot_at"), updated_at=now)
        )
        self.delete_schedule = delete(schedules).where(s.name == bindparam("p_name"))
