"""Values for the columns a host app added to its job model: checked before anything
is written, and what the database still refuses reported as the caller's bad input.

A wrong type or an over-long string is refused here, the same on every database
(SQLite would store either without a word). A value the database refuses anyway (a
foreign key to a row that does not exist, a unique key taken, a trigger) becomes
:class:`~sqlq_orm.errors.InvalidInput` naming the values and the database's reason,
with nothing written: where the job joins the caller's transaction, its insert runs in
a savepoint, so the caller's transaction goes on (PostgreSQL would otherwise abort it).
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, Column, Date, DateTime, Float, Integer, Numeric, String
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DataError, IntegrityError

from sqlq_orm.errors import InvalidInput

_SHOWN = 60


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."


@dataclass(frozen=True)
class AppColumn:
    """What a value of one app column must be."""

    name: str
    kinds: tuple[type, ...] | None
    """The Python types a value may have (None: the database decides)."""
    kind_name: str
    length: int | None
    nullable: bool
    required: bool
    """NOT NULL with no default: every job must give it."""


def _kinds(column: Column[Any]) -> tuple[tuple[type, ...] | None, str]:
    column_type = column.type
    if isinstance(column_type, Boolean):
        return (bool,), "boolean"
    if isinstance(column_type, Integer):
        return (int,), "integer"
    if isinstance(column_type, Float | Numeric):
        return (int, float, decimal.Decimal), "number"
    if isinstance(column_type, String):
        return (str,), "text"
    if isinstance(column_type, DateTime):
        return (datetime.datetime,), "datetime"
    if isinstance(column_type, Date):
        return (datetime.date,), "date"
    return None, type(column_type).__name__


def describe(columns: Sequence[Column[Any]]) -> dict[str, AppColumn]:
    """The rules of each app column, by the key enqueue takes it under."""
    described = {}
    for column in columns:
        kinds, kind_name = _kinds(column)
        has_default = column.default is not None or column.server_default is not None
        described[column.key] = AppColumn(
            name=column.key,
            kinds=kinds,
            kind_name=kind_name,
            length=getattr(column.type, "length", None) if kinds == (str,) else None,
            nullable=bool(column.nullable),
            required=not column.nullable and not has_default and column.computed is None,
        )
    return described


def check_values(table: str, rules: Mapping[str, AppColumn], values: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidInput` for the first value its column cannot hold, or a
    required column left out; names already checked against ``rules``."""
    for rule in rules.values():
        if rule.required and values.get(rule.name) is None:
            raise InvalidInput(
                f"{table}.{rule.name} is required (NOT NULL, no default): pass "
                f"{rule.name}=<{rule.kind_name}> to enqueue"
            )
    for name, value in values.items():
        rule = rules[name]
        if value is None:
            if not rule.nullable:
                raise InvalidInput(f"{name}=None: {table}.{name} is NOT NULL; pass a value")
            continue
        fits = rule.kinds is None or (
            isinstance(value, rule.kinds)
            and not (isinstance(value, bool) and bool not in rule.kinds)
        )
        if not fits:
            raise InvalidInput(
                f"{name}={_short(value)}: {table}.{name} holds {rule.kind_name} values, "
                f"not {type(value).__name__}"
            )
        if rule.length is not None and len(value) > rule.length:
            raise InvalidInput(
                f"{name}={_short(value)}: {table}.{name} holds at most {rule.length} "
                f"characters, this is {len(value)}"
            )


def shown_values(values: Mapping[str, Any]) -> str:
    """``name=value, ...`` for an error message."""
    return ", ".join(f"{name}={_short(value)}" for name, value in values.items())


@contextmanager
def refusals_reported(
    connection: Connection, shown: str, *, in_callers_transaction: bool
) -> Iterator[None]:
    """Around the insert of a job with app column ``values``: a value the database
    refuses raises :class:`InvalidInput` (in the caller's transaction, inside a
    savepoint that is rolled back, so the caller's transaction is still usable)."""
    try:
        if in_callers_transaction:
            with connection.begin_nested():
                yield
        else:
            yield
    except (IntegrityError, DataError) as exc:
        reason = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
        raise InvalidInput(
            f"the database refused the job's app column values ({shown or 'none given'}): "
            f"{reason}; nothing was written"
        ) from None
