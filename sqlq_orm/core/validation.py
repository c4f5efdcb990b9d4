"""Checks on what callers pass in, done before anything is written. Pure functions.

Each check returns the cleaned value or raises :class:`~sqlq_orm.errors.InvalidInput`
naming the argument and the offending value.
"""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlq_orm.core import timing
from sqlq_orm.errors import InvalidInput

DEFAULT_PAYLOAD_MAX_BYTES = 64 * 1024
"""Payloads are for small JSON; large data goes elsewhere and travels as payload_ref."""

MAX_CLAIM_LIMIT = 1000

MAX_CLAIM_QUEUES = 100
"""How many queues one claim may name (each adds a branch to the claim's query)."""

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
"""Bounds of the INTEGER columns (priority, retries, runtimes) on every database."""
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""Bounds of a whole number every database's JSON functions compare exactly."""

MAX_JOB_ID = 2**63 - 1
"""The largest id a job can have: ids are signed 64-bit integers on every database, and
the first is 1."""

MAX_JSON_DEPTH = 31
"""How deeply arrays and objects may nest in a payload or a result (``[[1]]`` is 2):
MariaDB's JSON check refuses 32 levels, so every database gets that database's limit,
checked by the library before anything is written."""

MAX_EPOCH_SECONDS = 253_402_300_799
"""9999-12-31T23:59:59Z: a run_at beyond this is a mistake, not a schedule."""


def short(value: object) -> str:
    """``repr(value)``, cut to 80 characters, for error messages (a value too deep to
    repr is named by its type)."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"
    return text if len(text) <= 80 else text[:77] + "..."


_short = short


def require_name(argument: str, value: object, max_length: int) -> str:
    """A non-empty string (not only spaces) no longer than ``max_length``."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{argument} must be a non-empty string, got {_short(value)}")
    if len(value) > max_length:
        raise InvalidInput(
            f"{argument} is {len(value)} characters; the limit is {max_length}: {_short(value)}"
        )
    require_encodable(argument, value)
    if "\x00" in value:
        # PostgreSQL text cannot hold NUL; refuse it on every database alike.
        raise InvalidInput(f"{argument} must not contain NUL characters, got {_short(value)}")
    return value


def require_encodable(argument: str, text: str) -> None:
    """Refuse text that UTF-8 cannot carry (a lone surrogate such as ``"\\ud800"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise InvalidInput(
            f"{argument} is not valid Unicode: it holds the lone surrogate "
            f"{bad!r} at position {exc.start}: {_short(text)}"
        ) from None


def optional_name(argument: str, value: object, max_length: int) -> str | None:
    """Like :func:`require_name`, but ``None`` is allowed."""
    return None if value is None else require_name(argument, value, max_length)


def require_int(
    argument: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """An ``int`` (``bool`` is refused), within ``minimum`` and ``maximum`` if given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{argument} must be an integer, got {_short(value)}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{argument} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{argument} must be <= {maximum}, got {value!r}")
    return value


def optional_int(
    argument: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    """Like :func:`require_int`, but ``None`` is allowed."""
    if value is None:
        return None
    return require_int(argument, value, minimum=minimum, maximum=maximum)


def job_id(value: object, argument: str = "job_id") -> int:
    """A job id: an ``int`` (not a ``bool``, float or string) from 1 to :data:`MAX_JOB_ID`.

    Every call that takes a job id checks it here, so a value no job can have (0, a
    negative number, one past 64 bits) is refused with the argument's name instead of
    reaching the driver (where it overflows, or silently matches nothing).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{argument} must be an integer, got {_short(value)}")
    if not 1 <= value <= MAX_JOB_ID:
        raise InvalidInput(
            f"{argument} must be a job id from 1 to {MAX_JOB_ID} (2**63 - 1), got {_short(value)}"
        )
    return int(value)  # an EnqueuedJob (an int subclass) binds as a plain int


def lease_seconds(value: object) -> int:
    """A lease length: a whole number of seconds, at least
    :data:`~sqlq_orm.core.timing.MIN_LEASE_SECONDS`."""
    seconds = require_int("lease_seconds", value, maximum=INT32_MAX)
    if seconds < timing.MIN_LEASE_SECONDS:
        raise InvalidInput(
            f"lease_seconds must be >= {timing.MIN_LEASE_SECONDS}, got {seconds!r}: the "
            "queue's clock counts whole seconds and a worker renews a lease every third "
            "of it, so a shorter lease can lapse while its job is heartbeating"
        )
    return seconds


def wait_timeout(value: object) -> float:
    """How long a wait may take: a number of seconds >= 0, or ``math.inf`` (no limit).

    NaN is refused: it compares false with everything, so a deadline of NaN is never
    reached and the wait would never return.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"timeout must be a number of seconds >= 0, got {_short(value)}")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0:
        raise InvalidInput(
            f"timeout must be a number of seconds >= 0 (or math.inf to wait without a "
            f"limit), got {_short(value)}"
        )
    return seconds


def claim_queues(value: object, max_length: int) -> list[str]:
    """The queues a claim takes from: one name or a sequence of names, duplicates dropped."""
    if isinstance(value, str):
        names = [value]
    elif isinstance(value, (list, tuple, set, frozenset)):
        names = list(value)
    else:
        raise InvalidInput(f"queues must be a queue name or a list of names, got {_short(value)}")
    if not names:
        raise InvalidInput("queues must name at least one queue, got none")
    unique = list(dict.fromkeys(require_name("queue", name, max_length) for name in names))
    if len(unique) > MAX_CLAIM_QUEUES:
        raise InvalidInput(f"a claim may name at most {MAX_CLAIM_QUEUES} queues, got {len(unique)}")
    return unique


def claim_limit(value: object) -> int:
    """How many jobs one claim may take: 1 to :data:`MAX_CLAIM_LIMIT`."""
    limit = require_int("limit", value, minimum=1)
    if limit > MAX_CLAIM_LIMIT:
        raise InvalidInput(f"limit must be <= {MAX_CLAIM_LIMIT}, got {limit!r}")
    return limit


_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""One encoder for every payload and result: ``json.dumps`` with options builds a new
one per call, a measurable part of a one-job enqueue (issue 27)."""


def encode_payload(payload: object, max_bytes: int) -> str | None:
    """Serialise a payload to compact JSON text, refusing what JSON cannot carry."""
    return encode_json(
        "payload",
        payload,
        max_bytes,
        "Store large data elsewhere and pass its location as payload_ref",
    )


def encode_json(argument: str, value: object, max_bytes: int, too_big: str) -> str | None:
    """Serialise ``value`` (a payload, a result) to compact JSON text of at most
    ``max_bytes``, refusing what JSON cannot carry; ``too_big`` says what to do instead."""
    if value is None:
        return None
    try:
        text = _COMPACT_JSON.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"{argument} must be JSON-serialisable ({exc}); got a {type(value).__name__}"
        ) from None
    except RecursionError:
        raise InvalidInput(
            f"{argument} is nested too deeply to serialise: arrays and objects may nest "
            f"at most {MAX_JSON_DEPTH} levels deep; flatten it"
        ) from None
    require_json_depth(argument, text)
    _require_string_keys(value, argument)
    require_encodable(argument, text)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise InvalidInput(
            f"{argument} is {size} bytes of JSON; the limit is {max_bytes}. {too_big}"
        )
    return text


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in the JSON ``text`` (a scalar: 0, ``[]``: 1,
    ``[{"a": 1}]``: 2). Reads the text, never recursing, whatever its depth."""
    if "[" not in text and "{" not in text:
        return 0
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    depth = deepest = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def require_json_depth(argument: str, text: str) -> None:
    """InvalidInput unless arrays and objects nest at most :data:`MAX_JSON_DEPTH` levels
    in the JSON ``text`` of ``argument``: the same limit on every database."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return  # cannot nest deeper than it has brackets (the common case)
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise InvalidInput(
            f"{argument} is nested {depth} levels deep; arrays and objects may nest at most "
            f"{MAX_JSON_DEPTH} levels (MariaDB's JSON limit, kept on every database). "
            "Flatten it, or store it elsewhere and pass its location"
        )


_NUL_ESCAPE = re.compile(r"(?:^|[^\\])(?:\\\\)*\\u0000")
"""``\\u0000`` in JSON text as an escape (an odd run of backslashes before ``u0000``)."""


_STRING_OR_BIG_FLOAT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?e\+\d+)')
"""A JSON string (left alone), or a number Python wrote with a positive exponent."""


def plain_big_floats(text: str | None) -> str | None:
    """``text`` (JSON from :func:`encode_json`) with every float Python wrote in exponent
    form (``1e+16``: at or above 1e16) spelled out with a decimal point
    (``10000000000000000.0``), for PostgreSQL's JSONB: it keeps a number's digits but
    not its notation, and would return ``1e+16`` as the integer ``10000000000000000``
    (and the largest double as an integer it is not equal to)."""
    if text is None or "e+" not in text:
        return text

    def spell_out(match: re.Match[str]) -> str:
        number = match.group(1)
        return match.group(0) if number is None else f"{Decimal(number):f}.0"

    return _STRING_OR_BIG_FLOAT.sub(spell_out, text)


def refuse_nul_in_json(argument: str, text: str | None, database: str) -> str | None:
    """``text`` (JSON from :func:`encode_json`) unless a string in it holds NUL, which
    ``database``'s JSON type cannot store (PostgreSQL's JSONB); then InvalidInput."""
    if text is not None and "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise InvalidInput(
            f"{argument} holds the character NUL (\\u0000) in a string, which {database}'s "
            f"JSONB cannot store: {_short(text)}. Remove it, or encode such data "
            "(e.g. base64) before enqueueing"
        )
    return text


def _require_string_keys(payload: object, argument: str = "payload") -> None:
    """Refuse a mapping key that is not a string, at any depth.

    JSON object keys are strings: ``json.dumps`` turns ``1``, ``1.5``, ``True`` and
    ``None`` keys into ``"1"``, ``"1.5"``, ``"true"`` and ``"null"`` without a word, so a
    handler would read back another payload than the one enqueued (and ``{1: "a", "1":
    "b"}`` would lose ``"a"``). Runs after ``json.dumps`` has accepted the payload: the
    quick check walks only dicts, lists and tuples (about half the time ``json.dumps``
    takes); the path to the offending key is worked out only once one is found.
    """
    if type(payload) in _SCALARS or not isinstance(payload, _CONTAINERS):
        return
    try:
        if _string_keys_only(payload):
            return
    except RecursionError:
        raise InvalidInput(
            f"{argument} is nested too deeply to check (Python's recursion limit is "
            f"{sys.getrecursionlimit()}); flatten it"
        ) from None
    path, key = _first_non_string_key(payload)
    where = argument + "".join(f"[{step!r}]" for step in path)
    raise InvalidInput(
        f"{argument} keys must be strings: {where} has the key {_short(key)} "
        f"({type(key).__name__}), which JSON would silently turn into the string "
        f"'{json.dumps(key)}'; convert it yourself (e.g. str(key))"
    )


def _string_keys_only(node: Any) -> bool:
    """True when every dict in ``node`` (a dict, list or tuple) has only string keys."""
    if isinstance(node, dict):
        for key, item in node.items():
            if type(key) is not str and not isinstance(key, str):
                return False
            if (
                type(item) not in _SCALARS
                and isinstance(item, _CONTAINERS)
                and not _string_keys_only(item)
            ):
                return False
        return True
    for item in node:
        if (
            type(item) not in _SCALARS
            and isinstance(item, _CONTAINERS)
            and not _string_keys_only(item)
        ):
            return False
    return True


_CONTAINERS = (dict, list, tuple)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _first_non_string_key(payload: Any) -> tuple[tuple[object, ...], object]:
    """The path to the first key that is not a string, and that key (one is known to be)."""
    stack: list[tuple[Any, tuple[object, ...]]] = [(payload, ())]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(node, dict) and not isinstance(key, str):
                return path, key
            if isinstance(item, _CONTAINERS):
                stack.append((item, (*path, key)))
    raise AssertionError("no key that is not a string")


def schedule(run_at: object, delay: object) -> tuple[int | None, int]:
    """Return ``(absolute run_at or None, delay in seconds)`` from the two options.

    ``run_at`` is epoch seconds (int or float) or an aware ``datetime``, rounded up to
    a whole second; ``delay`` is seconds from the database's now, turned into the
    whole seconds to add to it so the job never runs early
    (:func:`~sqlq_orm.core.timing.not_before`). At most one may be given.
    """
    if run_at is not None and delay is not None:
        raise InvalidInput(
            f"give run_at or delay, not both (run_at={_short(run_at)}, delay={_short(delay)})"
        )
    if run_at is not None:
        return _epoch_seconds(run_at), 0
    if delay is None:
        return None, 0
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise InvalidInput(f"delay must be a number of seconds, got {_short(delay)}")
    # "not 0 <= delay <= max" also refuses NaN and infinity.
    if not 0 <= delay <= MAX_EPOCH_SECONDS:
        raise InvalidInput(
            f"delay must be between 0 and {MAX_EPOCH_SECONDS} seconds, got {delay!r}"
        )
    # Never early: the database's now is the current second truncated (see timing).
    return None, timing.not_before(delay)


def _epoch_seconds(run_at: object) -> int:
    """Whole epoch seconds from an int, a float or an aware datetime, rounded up (a job
    never runs before the moment asked for)."""
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise InvalidInput(f"run_at must be timezone-aware, got naive {run_at!r}")
        run_at = run_at.timestamp()
    if isinstance(run_at, float):
        if not 0 <= run_at <= MAX_EPOCH_SECONDS:  # also refuses NaN and infinity
            raise InvalidInput(f"run_at must be between 0 and {MAX_EPOCH_SECONDS}, got {run_at!r}")
        return math.ceil(run_at)
    if isinstance(run_at, bool) or not isinstance(run_at, int):
        raise InvalidInput(
            f"run_at must be epoch seconds (int or float) or an aware datetime, "
            f"got {_short(run_at)}"
        )
    return require_int("run_at", run_at, minimum=0, maximum=MAX_EPOCH_SECONDS)


def app_columns(values: dict[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """Extra column values for a host app's job model; unknown names are refused."""
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise InvalidInput(
            f"unknown job column(s) {unknown}; extra keyword arguments to enqueue must be "
            f"columns the app added to its job model (available: {sorted(allowed) or 'none'})"
        )
    return values


def concurrency(key: object, limit: object, key_max_length: int) -> tuple[str | None, int | None]:
    """A concurrency key and its limit: ``(None, None)`` for none, else ``(key, limit)``.

    A key without a limit gets the limit 1 (one job of that key at a time); a limit
    without a key limits nothing, and is refused rather than silently ignored.
    """
    if key is None:
        if limit is not None:
            raise InvalidInput(
                f"concurrency_limit={_short(limit)} needs a concurrency_key to limit"
            )
        return None, None
    name = require_name("concurrency_key", key, key_max_length)
    if limit is None:
        return name, 1
    return name, require_int("concurrency_limit", limit, minimum=1, maximum=INT32_MAX)


SCHEMA_NAME_MAX = 63
"""PostgreSQL's identifier limit (MariaDB's database names allow 64)."""


def schema_name(value: object) -> str | None:
    """A schema (database, on MariaDB) name for the queue's tables: letters, digits and
    underscores, not starting with a digit, at most 63 characters; None: the default."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value
        or len(value) > SCHEMA_NAME_MAX
        or not (value[0].isascii() and (value[0].isalpha() or value[0] == "_"))
        or not all(c.isascii() and (c.isalnum() or c == "_") for c in value)
    ):
        raise InvalidInput(
            f"schema must be a name of letters, digits and underscores (not starting with "
            f"a digit, at most {SCHEMA_NAME_MAX} characters), got {_short(value)}"
        )
    return value
