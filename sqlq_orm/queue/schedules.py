"""Recurring schedules: registering them and enqueueing each due slot exactly once.

The slot claim is a compare-and-set on the schedule's ``next_slot_at`` in the same
transaction as the slot's jobs: whichever scheduler's update takes enqueues, the
others (rowcount 0) do nothing, so any number of processes, on any clocks, may tick.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.engine import Connection

from sqlq_orm.core import validation
from sqlq_orm.core.schedule import Schedule, plan_slots
from sqlq_orm.errors import InvalidInput, SqlqError
from sqlq_orm.queue.enqueue import Enqueueing
from sqlq_orm.queue.types import ScheduleState, TickResult
from sqlq_orm.schema.states import Event

log = logging.getLogger("sqlq_orm.scheduler")

SCHEDULER_ACTOR = "scheduler"
"""The actor of the ENQUEUED events a schedule writes."""


class Schedules(Enqueueing):
    """Registering recurring schedules, ticking them, listing them."""

    def _require_schedules_table(self) -> None:
        if self.tables.schedules is None:
            raise SqlqError(
                "this queue's models have no schedule model: bind "
                "sqlq_orm.ScheduleMixin to your base and pass it as Models(schedule=...) "
                "to run recurring schedules"
            )

    def register_schedules(self, schedules: Iterable[Schedule], *, replace: bool = True) -> None:
        """Upsert the schedules declared in code into the schedules table.

        A schedule seen for the first time starts at its first slot after now. One
        already registered keeps its progress (so slots missed while nothing ran are
        still due) unless its cron expression or time zone changed, in which case it
        starts from the new expression's first slot after now.

        With ``replace=False`` (a running scheduler's periodic re-registration) a row
        that exists is left as it is, definition included: only missing rows are
        written. So during a rolling deploy the definition of the process that started
        last is the stored one, and processes still running the old code neither
        revert it nor (see :meth:`enqueue_due_slots`) fire it.
        """
        self._require_schedules_table()
        listed = list(schedules)
        names = [schedule.name for schedule in listed]
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise InvalidInput(f"schedule names must be unique, got {twice} more than once")
        if not listed:
            return
        for schedule in listed:
            # Here, not at the tick: one bad payload would fail every tick for everyone.
            try:
                self._storable_json(
                    "payload", validation.encode_payload(schedule.payload, self.payload_max_bytes)
                )
            except InvalidInput as exc:
                raise InvalidInput(f"schedule {schedule.name!r}: {exc}") from None
        with self._write() as connection:
            now = self.context.now(connection)
            rows = [
                {
                    "p_name": schedule.name,
                    "p_type": schedule.type,
                    "p_queue": schedule.queue,
                    "p_cron": schedule.cron.expression,
                    "p_timezone": schedule.timezone,
                    "p_next_slot_at": schedule.cron.next_after(now),
                }
                for schedule in sorted(listed, key=lambda s: s.name)
            ]
            # One statement per schedule, not executemany: PyMySQL's bulk rewrite of an
            # INSERT ... ON DUPLICATE KEY UPDATE with parameters after VALUES fails, and
            # registration runs once per few minutes.
            statement = self.sql.upsert_schedule if replace else self.sql.register_missing_schedule
            for row in rows:
                connection.execute(statement, row)

    def enqueue_due_slots(self, schedules: Mapping[str, Schedule]) -> TickResult:
        """One scheduler tick: enqueue the due slots of ``schedules`` (by name).

        Reads the due rows without a write lock; only when one is due does it open a
        write transaction, in which each due schedule is advanced by compare-and-set
        and, if this process won, its slots' jobs are enqueued. Schedules in the table
        that ``schedules`` does not name (declared by another deployment) are left to
        whoever declares them, and so are those whose stored definition (type, queue,
        cron, time zone) differs from this process's: **the stored definition wins**.
        It is the one the most recently started process registered, so during a
        rolling deploy the old code's schedulers stop firing a changed schedule the
        moment the new code registers it (they would otherwise fire the old cron once
        more), and a rollback is the same in reverse.
        """
        self._require_schedules_table()
        with self.read() as connection:
            due = []
            for row in connection.execute(self.sql.select_due_schedules):
                schedule = schedules.get(row.name)
                if schedule is None:
                    continue
                stored = (row.type, row.queue, row.cron, row.timezone)
                if stored != _definition(schedule):
                    _log_superseded(schedule, stored)
                    continue
                due.append(row)
        if not due:
            return TickResult()
        claimed = skipped = 0
        slots: list[tuple[Schedule, int]] = []
        with self._write() as connection:
            now = self.context.now(connection)
            # In name order, so two schedulers lock rows in one order (no deadlock).
            for row in due:
                schedule = schedules[row.name]
                plan = plan_slots(
                    schedule,
                    next_slot_at=row.next_slot_at,
                    last_slot_at=row.last_slot_at,
                    now=now,
                )
                won = connection.execute(
                    self.sql.advance_schedule,
                    {
                        "p_name": schedule.name,
                        "p_seen_next_slot_at": row.next_slot_at,
                        "p_first_slot": plan.enqueue[0] if plan.enqueue else plan.next_slot_at,
                        "p_last_slot": plan.enqueue[-1] if plan.enqueue else None,
                        "p_next_slot_at": plan.next_slot_at,
                    },
                ).rowcount
                if won != 1:
                    continue
                claimed += 1
                skipped += plan.skipped
                slots.extend((schedule, slot) for slot in plan.enqueue)
            job_ids = self._enqueue_slots(connection, slots)
            queues = {schedule.queue for schedule, _ in slots}
            if job_ids:
                self._announce_jobs(connection, queues)
        if job_ids:
            self._wake_workers(None, queues)
        return TickResult(due=len(due), claimed=claimed, job_ids=tuple(job_ids), skipped=skipped)

    def _enqueue_slots(
        self, connection: Connection, slots: list[tuple[Schedule, int]]
    ) -> list[int]:
        """Insert one job per slot (due at its slot) and their ENQUEUED events, in bulk."""
        if not slots:
            return []
        prepared: list[tuple[dict[str, Any], dict[str, Any]]] = [
            (
                self._job_params(
                    schedule.type,
                    schedule.payload,
                    queue=schedule.queue,
                    priority=schedule.priority,
                    run_at=slot,
                    delay=None,
                    max_retries=schedule.max_retries,
                    max_runtime_seconds=schedule.max_runtime_seconds,
                    dedupe_key=None,
                    payload_ref=None,
                ),
                {},
            )
            for schedule, slot in slots
        ]
        # executemany with RETURNING, batched into multi-row INSERTs; both databases
        # number one INSERT's rows in VALUES order, so the sorted ids follow ``slots``.
        # (Not _insert_bulk: on PostgreSQL it writes generic ENQUEUED events itself.)
        job_ids = sorted(
            int(row[0]) for row in connection.execute(self.sql.insert_job, [p for p, _ in prepared])
        )
        if len(job_ids) != len(prepared):
            raise SqlqError(f"inserted {len(job_ids)} of {len(prepared)} jobs; rolled back")
        # The schedule and slot in the ENQUEUED event are what `sqlq check` reads to
        # prove no slot got two jobs.
        events = [
            self._event(
                job_id,
                Event.ENQUEUED,
                SCHEDULER_ACTOR,
                {"queue": schedule.queue, "type": schedule.type, "schedule": schedule.name,
                 "slot": slot},
            )
            for job_id, (schedule, slot) in zip(job_ids, slots, strict=True)
        ]  # fmt: skip
        self._write_events(connection, events)
        return job_ids

    def list_schedules(self) -> list[ScheduleState]:
        """Every registered schedule with its last and next slot, by name."""
        self._require_schedules_table()
        with self.read() as connection:
            return [
                ScheduleState(**row._mapping)
                for row in connection.execute(self.sql.select_schedules)
            ]

    def remove_schedule(self, name: str) -> bool:
        """Delete a schedule's row (one no longer declared anywhere); True if it was there.

        Jobs it already enqueued stay. A scheduler that still declares it registers it
        again at its next registration (every few minutes), from its next slot.
        """
        self._require_schedules_table()
        with self._write() as connection:
            return bool(connection.execute(self.sql.delete_schedule, {"p_name": name}).rowcount)


def _definition(schedule: Schedule) -> tuple[str, str, str, str]:
    """What the schedules table stores of a schedule, in the order of a due row."""
    return (schedule.type, schedule.queue, schedule.cron.expression, schedule.timezone)


_superseded_logged: set[tuple[str, tuple[str, ...]]] = set()


def _log_superseded(schedule: Schedule, stored: tuple[str, str, str, str]) -> None:
    """Say once per stored definition that this process leaves a schedule alone."""
    key = (schedule.name, stored)
    if key in _superseded_logged:
        return
    _superseded_logged.add(key)
    log.info(
        "schedule %r: the table holds type=%r queue=%r cron=%r timezone=%r (registered by a "
        "process started later); this process declares %r and leaves the schedule to the "
        "processes that declare the stored definition",
        schedule.name, *stored, _definition(schedule),
    )  # fmt: skip
