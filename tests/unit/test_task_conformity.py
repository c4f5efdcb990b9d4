"""Values against their annotations (issue 34 item 6), pure: what
:func:`sqlq_orm.tasks.conformity.type_problem` accepts and what it names."""

from __future__ import annotations

import collections.abc as abc
import dataclasses
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import pydantic
import pytest

from sqlq_orm.tasks.conformity import type_problem


@dataclasses.dataclass
class Order:
    id: int
    qty: int


@dataclasses.dataclass
class Basket:
    orders: list[Order]
    note: str | None = None


class Flags(TypedDict):
    dry_run: bool
    level: NotRequired[int]


class Customer(pydantic.BaseModel):
    name: str


FITS = [
    (1, int),
    (1, float),  # an int is a float, as for type checkers
    (1.5, float),
    (True, bool),
    ("x", str),
    (None, None),
    (None, Optional[int]),  # noqa: UP045 - the spelling under test
    (3, int | None),
    ([1, 2], list[int]),
    ((1, 2), tuple[int, ...]),
    ((1, "a"), tuple[int, str]),
    ({1, 2}, set[int]),
    ([1, 2], abc.Sequence[int]),
    ({"a": 1}, dict[str, int]),
    ({"a": 1}, abc.Mapping[str, int]),
    (Order(1, 2), Order),
    (Basket([Order(1, 2)]), Basket),
    ({"dry_run": True}, Flags),
    ({"dry_run": False, "level": 2}, Flags),
    (Customer(name="a"), Customer),
    ("b", Literal["a", "b"]),
    (5, Annotated[int, "meta"]),
    ({"anything": [1]}, Any),
    ([Order(1, 2), None], list[Order | None]),
]


@pytest.mark.parametrize(("value", "hint"), FITS, ids=[repr(h) for _, h in FITS])
def test_values_that_match_their_annotation_pass(value, hint):
    assert type_problem(value, hint, "arg") is None


MISFITS = [
    (Order("not-an-int", 5), Order, "order.id must be int, got str 'not-an-int'"),  # type: ignore[arg-type]
    ({"bogus": 1}, Order, "order must be Order, got dict"),
    (5, Order, "order must be Order, got int 5"),
    (Order(1, 2), int, "order must be int, got Order"),
    (True, int, "order must be int, got bool True"),
    ("1", int, "order must be int, got str '1'"),
    ({"dry_run": "yes"}, Flags, "order['dry_run'] must be bool, got str 'yes'"),
    ({"level": 1}, Flags, "order (Flags) is missing the key 'dry_run'"),
    ({"dry_run": True, "extra": 1}, Flags, "order (Flags) has no key 'extra'"),
    (Basket([Order(1, "x")]), Basket, "order.orders[0].qty must be int"),  # type: ignore[arg-type]
    ([1, "2"], list[int], "order[1] must be int, got str '2'"),
    ((1, 2, 3), tuple[int, int], "order must have 2 items, got 3"),
    ({"a": "b"}, dict[str, int], "order['a'] must be int"),
    ({1: 1}, dict[str, int], "order key 1 must be str"),
    ("abc", list[str], "order must be list, got str"),
    ("c", Literal["a", "b"], "order must be one of ['a', 'b']"),
    (1.5, int | None, "order must be int | None, got float 1.5"),
    ({"name": "a"}, Customer, "order must be Customer, got dict"),
]


@pytest.mark.parametrize(("value", "hint", "message"), MISFITS, ids=[m for *_, m in MISFITS])
def test_values_that_do_not_match_are_named_with_where_and_what(value, hint, message):
    problem = type_problem(value, hint, "order")
    assert problem is not None
    assert problem.startswith(message), problem
