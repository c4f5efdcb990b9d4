"""Task arguments kept out of what is displayed: the job says which, in its payload.

A task declared with ``@registry.task(redact=("password",))`` stores its arguments as
usual (the handler still gets them), plus the names to redact under the payload's
reserved key: ``{"email": "a@b.c", "password": "...", "__sqlq__": {"redact":
["password"]}}``. Everything that displays a job reads that list from the job itself,
so ``sqlq show``, the dashboard and :func:`sqlq_orm.job_timeline` redact without the
task's code at hand, and the library's own messages about an argument (a stored value
that no longer fits its annotation) leave a redacted value out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

META_KEY = "__sqlq__"
"""The payload key reserved for what travels with a job beside its arguments (a trace
context, the names to redact); never passed to a task function."""

REDACT_KEY = "redact"
"""Under :data:`META_KEY`: the names of the arguments to redact."""

REDACTED = "[redacted]"
"""What is displayed instead of a redacted argument's value."""


def redacted_names(payload: Any) -> frozenset[str]:
    """The argument names ``payload`` asks to redact (none for a payload without any)."""
    if not isinstance(payload, Mapping):
        return frozenset()
    meta = payload.get(META_KEY)
    names = meta.get(REDACT_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(names, list):
        return frozenset()
    return frozenset(name for name in names if isinstance(name, str))


def redact(payload: Any) -> Any:
    """``payload`` as it may be displayed: each argument it names to redact (that it
    holds) replaced by :data:`REDACTED`; the payload itself is not changed."""
    names = redacted_names(payload)
    if not names:
        return payload
    return {key: REDACTED if key in names else value for key, value in payload.items()}


def mark(payload: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """``payload`` with ``names`` recorded as the arguments to redact."""
    listed = sorted(names)
    if not listed:
        return payload
    meta = payload.get(META_KEY)
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    meta[REDACT_KEY] = listed
    return {**payload, META_KEY: meta}
