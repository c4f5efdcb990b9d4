"""Recurring schedules as declared in code, and which slots a due schedule enqueues.

A :class:`Schedule` is what ``registry.periodic(...)`` records: a cron expression in a
time zone and the job to enqueue at each slot. :func:`plan_slots` decides, for a
schedule whose next slot has come, which slots to enqueue now and where the next one
is. Pure functions; the queue runs the guarded write that makes each slot happen once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlq_orm.core import validation
from sqlq_orm.core.cron import CronSchedule
from sqlq_orm.errors import InvalidInput
from sqlq_orm.schema.mixins import QUEUE_MAX, SCHEDULE_NAME_MAX, TYPE_MAX

DEFAULT_GRACE_SECONDS = 60
"""How late a slot may be enqueued and still count as on time (``missed="skip"``)."""

DEFAULT_CATCH_UP_LIMIT = 10
"""Most missed slots ``missed="all"`` enqueues after a downtime (the newest ones)."""

MAX_CATCH_UP_LIMIT = 1000


class Missed(StrEnum):
    """What a schedule does with slots that passed while no scheduler ran."""

    LATEST = "latest"  #: enqueue the most recent missed slot once (the default)
    SKIP = "skip"  #: enqueue nothing that is later than the grace period
    ALL = "all"  #: enqueue every missed slot, up to catch_up_limit of the newest


@dataclass(frozen=True)
class Schedule:
    """A recurring job: enqueue ``type`` with ``payload`` at every slot of ``cron``.

    Build it with :meth:`declare` (or ``registry.periodic``), which checks every field
    and raises :class:`~sqlq_orm.errors.InvalidInput` naming the bad one.
    """

    name: str
    cron: CronSchedule
    type: str
    payload: Any = None
    queue: str = "default"
    priority: int = 0
    max_retries: int | None = None
    max_runtime_seconds: int | None = None
    missed: Missed = Missed.LATEST
    grace_seconds: int = DEFAULT_GRACE_SECONDS
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT

    @classmethod
    def declare(
        cls,
        cron: str,
        type: str,
        *,
        payload: Any = None,
        name: str | None = None,
        queue: str = "default",
        timezone: str = "UTC",
        priority: int = 0,
        max_retries: int | None = None,
        max_runtime_seconds: int | None = None,
        missed: Missed | str = Missed.LATEST,
        grace_seconds: int = DEFAULT_GRACE_SECONDS,
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
    ) -> Schedule:
        """Check every argument and return the schedule; ``name`` defaults to ``type``."""
        validation.require_name("type", type, TYPE_MAX)
        name = validation.require_name(
            "schedule name", type if name is None else name, SCHEDULE_NAME_MAX
        )
        validation.require_name("queue", queue, QUEUE_MAX)
        validation.require_int(
            "priority", priority, minimum=validation.INT32_MIN, maximum=validation.INT32_MAX
        )
        validation.optional_int("max_retries", max_retries, minimum=0, maximum=validation.INT32_MAX)
        validation.optional_int(
            "max_runtime_seconds", max_runtime_seconds, minimum=1, maximum=validation.INT32_MAX
        )
        try:
            policy = Missed(missed)
        except ValueError:
            raise InvalidInput(
                f"missed must be one of {[m.value for m in Missed]}, got {missed!r}"
            ) from None
        validation.require_int("grace_seconds", grace_seconds, minimum=0)
        validation.require_int(
            "catch_up_limit", catch_up_limit, minimum=1, maximum=MAX_CATCH_UP_LIMIT
        )
        try:  # the size cap is the queue's, checked at each slot's enqueue
            validation.encode_payload(payload, max_bytes=sys.maxsize)
        except InvalidInput as exc:
            raise InvalidInput(f"payload of schedule {name!r} is not JSON: {exc}") from None
        return cls(
            name=name,
            cron=CronSchedule(cron, timezone),
            type=type,
            payload=payload,
            queue=queue,
            priority=priority,
            max_retries=max_retries,
            max_runtime_seconds=max_runtime_seconds,
            missed=policy,
            grace_seconds=grace_seconds,
            catch_up_limit=catch_up_limit,
        )

    @property
    def timezone(self) -> str:
        """The IANA time zone the cron expression is read in."""
        return self.cron.timezone


@dataclass(frozen=True)
class SlotPlan:
    """What one due schedule does now: the slots to enqueue and its next slot."""

    enqueue: tuple[int, ...]
    """Slots (epoch seconds, oldest first) to enqueue a job for."""
    next_slot_at: int
    """The first slot after now: the schedule is due again then."""
    skipped: bool
    """Whether an older due slot was passed over (by the missed-slot policy)."""


def plan_slots(
    schedule: Schedule, *, next_slot_at: int, last_slot_at: int | None, now: int
) -> SlotPlan:
    """Which of the slots in ``[next_slot_at, now]`` to enqueue, per ``schedule.missed``.

    Slots at or before ``last_slot_at`` (already enqueued) are never planned again,
    whatever ``next_slot_at`` says (a cron change registered by a process whose clock
    lags behind may move it back).
    """
    floor = next_slot_at if last_slot_at is None else max(next_slot_at, last_slot_at + 1)
    following = schedule.cron.next_after(next_slot_at)
    if following > now:
        # The common tick: exactly one slot (next_slot_at) has come; no backward search.
        on_time = now - next_slot_at <= schedule.grace_seconds
        enqueue_one = next_slot_at >= floor and (schedule.missed is not Missed.SKIP or on_time)
        return SlotPlan(
            enqueue=(next_slot_at,) if enqueue_one else (),
            next_slot_at=following,
            skipped=next_slot_at >= floor and not enqueue_one,
        )
    wanted = schedule.catch_up_limit if schedule.missed is Missed.ALL else 1
    # One more than wanted, so we know whether an older due slot was left out.
    due = schedule.cron.latest(now, not_before=floor, count=wanted + 1)
    enqueue = due[-wanted:]
    if schedule.missed is Missed.SKIP:
        enqueue = [slot for slot in enqueue if now - slot <= schedule.grace_seconds]
    return SlotPlan(
        enqueue=tuple(enqueue),
        next_slot_at=schedule.cron.next_after(now),
        skipped=len(due) > len(enqueue),
    )
