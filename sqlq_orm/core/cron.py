"""Cron expressions in a time zone, as epoch-second slots. Pure functions.

Parsing and iteration are cronsim's (the library Healthchecks.io runs its cron checks
on): five-field Debian-cron syntax, plus ``L``, ``LW`` and ``#``. Its DST rules are
Debian cron's, and so are ours:

- a job at a fixed local time that falls in the hour skipped in spring (02:30 on the
  day clocks jump from 02:00 to 03:00) runs once, at the first valid minute after it
  (03:00);
- a job at a fixed local time in the hour repeated in autumn runs once, in the first
  occurrence (``fold=0``);
- a job whose minute or hour field starts with ``*`` (``*/30 * * * *``) follows real
  time, so it runs in both occurrences of a repeated hour and none of a skipped one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import islice, takewhile
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from sqlq_orm.errors import InvalidInput
from sqlq_orm.schema.mixins import CRON_MAX, TIMEZONE_MAX


def time_zone(name: object) -> ZoneInfo:
    """The IANA time zone ``name`` (``"Europe/Paris"``, ``"UTC"``), or a clear error."""
    if not isinstance(name, str) or not name.strip() or len(name) > TIMEZONE_MAX:
        raise InvalidInput(
            f"timezone must be an IANA time zone name such as 'Europe/Paris' of at most "
            f"{TIMEZONE_MAX} characters, got {name!r}"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"timezone {name!r} is not a known IANA time zone; check the spelling "
            "('Europe/Paris'), or install the tzdata package on a system without "
            "time zone files"
        ) from None


class CronSchedule:
    """A five-field cron expression read in one time zone.

    Slots are whole epoch seconds (UTC); every method is pure and cheap enough to
    call on each scheduler tick for the schedules that are due.
    """

    def __init__(self, expression: object, timezone: object = "UTC") -> None:
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidInput(f"cron expression must be a non-empty string, got {expression!r}")
        if len(expression) > CRON_MAX:
            raise InvalidInput(
                f"cron expression is {len(expression)} characters; the limit is {CRON_MAX}"
            )
        fields = expression.split()
        if len(fields) != 5:
            raise InvalidInput(
                f"cron expression {expression!r} has {len(fields)} fields; expected 5 "
                "(minute hour day-of-month month day-of-week), e.g. '0 3 * * *'"
            )
        self.expression = " ".join(fields)
        self.timezone = str(timezone)
        self.zone = time_zone(timezone)
        try:
            self.next_after(0)
        except CronSimError as exc:
            raise InvalidInput(f"cron expression {expression!r} is invalid: {exc}") from None
        except StopIteration:
            raise InvalidInput(f"cron expression {expression!r} never matches a date") from None

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, {self.timezone!r})"

    def _iterate(self, epoch: int, *, reverse: bool) -> Iterator[int]:
        start = datetime.fromtimestamp(epoch, UTC).astimezone(self.zone)
        for moment in CronSim(self.expression, start, reverse=reverse):
            yield int(moment.timestamp())

    def next_after(self, epoch: int) -> int:
        """The first slot strictly after ``epoch``."""
        return next(self._iterate(int(epoch), reverse=False))

    def latest(self, at_or_before: int, *, not_before: int, count: int) -> list[int]:
        """Up to ``count`` newest slots in ``[not_before, at_or_before]``, oldest first."""
        if count <= 0 or at_or_before < not_before:
            return []
        # Reverse iteration yields slots strictly before its start: start one second on.
        newest_first = self._iterate(int(at_or_before) + 1, reverse=True)
        found = list(islice(takewhile(lambda slot: slot >= not_before, newest_first), count))
        return found[::-1]
