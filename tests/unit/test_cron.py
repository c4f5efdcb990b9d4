"""Cron slots in a time zone (cronsim's rules) and the missed-slot plan. No database."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

import sqlq_orm
from sqlq_orm.core.cron import CronSchedule
from sqlq_orm.core.schedule import Missed, Schedule, plan_slots

PARIS = ZoneInfo("Europe/Paris")


def paris(*args: int, fold: int = 0) -> int:
    return int(datetime(*args, tzinfo=PARIS).replace(fold=fold).timestamp())


def utc(*args: int) -> int:
    return int(datetime(*args, tzinfo=ZoneInfo("UTC")).timestamp())


# ------------------------------------------------------------------ slots


def test_next_after_is_strictly_after():
    daily = CronSchedule("0 3 * * *", "UTC")

    assert daily.next_after(utc(2026, 1, 1, 2, 59)) == utc(2026, 1, 1, 3, 0)
    assert daily.next_after(utc(2026, 1, 1, 3, 0)) == utc(2026, 1, 2, 3, 0)


def test_a_schedule_is_read_in_its_own_time_zone():
    nightly = CronSchedule("0 3 * * *", "Europe/Paris")

    assert nightly.next_after(utc(2026, 1, 10, 0)) == utc(2026, 1, 10, 2, 0)  # CET = UTC+1
    assert nightly.next_after(utc(2026, 7, 10, 0)) == utc(2026, 7, 10, 1, 0)  # CEST = UTC+2


def test_latest_returns_the_newest_slots_in_range_oldest_first():
    hourly = CronSchedule("0 * * * *")
    now = utc(2026, 1, 1, 10, 30)

    assert hourly.latest(now, not_before=utc(2026, 1, 1, 0), count=3) == [
        utc(2026, 1, 1, 8), utc(2026, 1, 1, 9), utc(2026, 1, 1, 10),
    ]  # fmt: skip
    assert hourly.latest(now, not_before=utc(2026, 1, 1, 9, 30), count=5) == [utc(2026, 1, 1, 10)]
    assert hourly.latest(utc(2026, 1, 1, 10), not_before=utc(2026, 1, 1, 10), count=1) == [
        utc(2026, 1, 1, 10)
    ]  # a slot exactly at now is due
    assert hourly.latest(now, not_before=utc(2026, 1, 1, 10, 1), count=5) == []


def test_spring_forward_runs_a_job_in_the_skipped_hour_once_at_the_first_valid_minute():
    # 2026-03-29: Paris jumps from 02:00 CET to 03:00 CEST; 02:30 does not exist.
    nightly = CronSchedule("30 2 * * *", "Europe/Paris")

    slots = [nightly.next_after(paris(2026, 3, 28, 12))]
    slots.append(nightly.next_after(slots[-1]))
    slots.append(nightly.next_after(slots[-1]))

    assert slots == [paris(2026, 3, 29, 3, 0), paris(2026, 3, 30, 2, 30), paris(2026, 3, 31, 2, 30)]


def test_fall_back_runs_a_fixed_time_job_once_in_the_first_of_the_repeated_hours():
    # 2026-10-25: Paris goes from 03:00 CEST back to 02:00 CET; 02:30 happens twice.
    nightly = CronSchedule("30 2 * * *", "Europe/Paris")

    first = nightly.next_after(paris(2026, 10, 24, 12))
    second = nightly.next_after(first)

    assert first == paris(2026, 10, 25, 2, 30, fold=0)  # 00:30 UTC
    assert first == utc(2026, 10, 25, 0, 30)
    assert second == paris(2026, 10, 26, 2, 30)  # not the repeated 02:30 at 01:30 UTC


def test_an_interval_job_follows_real_time_through_the_repeated_hour():
    every_half_hour = CronSchedule("*/30 * * * *", "Europe/Paris")

    slots = every_half_hour.latest(
        paris(2026, 10, 25, 3, 0), not_before=paris(2026, 10, 25, 2, 0, fold=0), count=10
    )

    # 02:00, 02:30 CEST, then 02:00, 02:30 CET, then 03:00: half an hour apart throughout.
    assert [b - a for a, b in zip(slots, slots[1:], strict=False)] == [1800] * 4
    assert len(slots) == 5


@pytest.mark.parametrize(
    "expression, message",
    [
        ("0 3 * *", "has 4 fields; expected 5"),
        ("0 0 3 * * *", "has 6 fields"),
        ("61 * * * *", "is invalid: Bad minute"),
        ("0 0 31 2 *", "is invalid"),
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
        ("0 * * * " + "1," * 100 + "1", "characters; the limit is 200"),
    ],
)
def test_a_bad_cron_expression_is_refused_naming_it(expression, message):
    with pytest.raises(sqlq_orm.InvalidInput, match=message):
        CronSchedule(expression)


@pytest.mark.parametrize("zone", ["Europe/Pariss", "", "../etc/passwd", 5, "x" * 65])
def test_an_unknown_time_zone_is_refused_naming_it(zone):
    with pytest.raises(sqlq_orm.InvalidInput, match="timezone"):
        CronSchedule("0 3 * * *", zone)


# ------------------------------------------------------------------- declare


def test_declare_defaults_the_name_to_the_job_type():
    schedule = Schedule.declare("0 3 * * *", "reports.nightly", timezone="Europe/Paris")

    assert (schedule.name, schedule.timezone, schedule.missed) == (
        "reports.nightly", "Europe/Paris", Missed.LATEST,
    )  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"payload": {"at": object()}}, "payload of schedule 'reports.nightly' is not JSON"),
        ({"payload": float("nan")}, "is not JSON"),
        ({"payload": {"day": {1: "mon"}}}, r"payload\['day'\] has the key 1"),
        ({"missed": "burst"}, "missed must be one of"),
        ({"catch_up_limit": 0}, "catch_up_limit"),
        ({"grace_seconds": -1}, "grace_seconds"),
        ({"queue": ""}, "queue"),
        ({"name": "x" * 201}, "schedule name is 201 characters"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_declare_refuses_bad_arguments_naming_them(kwargs, message):
    with pytest.raises(sqlq_orm.InvalidInput, match=message):
        Schedule.declare("0 3 * * *", "reports.nightly", **kwargs)


def test_registry_periodic_records_schedules_and_refuses_a_second_of_one_name():
    registry = sqlq_orm.HandlerRegistry()
    registry.periodic("0 3 * * *", "reports.nightly", payload={"kind": "full"})
    registry.periodic("0 * * * *", "reports.nightly", name="reports.hourly")

    with pytest.raises(sqlq_orm.InvalidInput, match="already declared .*pass name="):
        registry.periodic("0 4 * * *", "reports.nightly")

    assert [s.name for s in registry.schedules] == ["reports.hourly", "reports.nightly"]
    assert registry.schedules[1].payload == {"kind": "full"}


# --------------------------------------------------------------------- plan

HOURLY = dict(cron="0 * * * *", type="report")
NOW = utc(2026, 1, 1, 10, 0, 20)  # 20 seconds after the 10:00 slot


def plan(missed: str, *, next_slot_at: int, last_slot_at: int | None = None, **kwargs):
    schedule = Schedule.declare(HOURLY["cron"], HOURLY["type"], missed=missed, **kwargs)
    return plan_slots(schedule, next_slot_at=next_slot_at, last_slot_at=last_slot_at, now=NOW)


def test_a_slot_on_time_is_enqueued_by_every_policy():
    for missed in Missed:
        result = plan(missed, next_slot_at=utc(2026, 1, 1, 10))

        assert result.enqueue == (utc(2026, 1, 1, 10),), missed
        assert result.next_slot_at == utc(2026, 1, 1, 11)
        assert not result.skipped


def test_after_downtime_latest_enqueues_only_the_most_recent_missed_slot():
    result = plan("latest", next_slot_at=utc(2026, 1, 1, 5))

    assert result.enqueue == (utc(2026, 1, 1, 10),)
    assert result.skipped
    assert result.next_slot_at == utc(2026, 1, 1, 11)


def test_after_downtime_skip_enqueues_nothing_later_than_the_grace_period():
    late = Schedule.declare("30 * * * *", "report", missed="skip", grace_seconds=60)

    result = plan_slots(late, next_slot_at=utc(2026, 1, 1, 5, 30), last_slot_at=None, now=NOW)

    assert result.enqueue == ()
    assert result.skipped
    assert result.next_slot_at == utc(2026, 1, 1, 10, 30)


def test_after_downtime_all_enqueues_the_newest_missed_slots_up_to_the_limit():
    result = plan("all", next_slot_at=utc(2026, 1, 1, 5), catch_up_limit=3)
    everything = plan("all", next_slot_at=utc(2026, 1, 1, 8), catch_up_limit=10)

    assert result.enqueue == (utc(2026, 1, 1, 8), utc(2026, 1, 1, 9), utc(2026, 1, 1, 10))
    assert result.skipped
    assert everything.enqueue == (utc(2026, 1, 1, 8), utc(2026, 1, 1, 9), utc(2026, 1, 1, 10))
    assert not everything.skipped


def test_a_slot_already_enqueued_is_never_planned_again():
    # next_slot_at moved back (a lagging process re-registered a cron change).
    result = plan("all", next_slot_at=utc(2026, 1, 1, 8), last_slot_at=utc(2026, 1, 1, 9))

    assert result.enqueue == (utc(2026, 1, 1, 10),)
