"""A job's result: what a handler returns to have it stored with the job.

A handler that returns ``JobResult(value)`` succeeds and has ``value`` stored as JSON
in the job's ``result`` column (a task's return value is returned this way); a plain
returned string stays a ``result_ref``, as before. Pure: no database.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlq_orm.core import validation
from sqlq_orm.errors import InvalidInput

DEFAULT_RESULT_MAX_BYTES = validation.DEFAULT_PAYLOAD_MAX_BYTES
"""Results are small JSON, like payloads; large outputs go elsewhere (``result_ref``)."""


@dataclass(frozen=True)
class JobResult:
    """A handler's return value to be stored with its job (JSON)."""

    value: Any


def encode_result(value: Any, max_bytes: int = DEFAULT_RESULT_MAX_BYTES) -> str | None:
    """``value`` as JSON text of at most ``max_bytes``, or InvalidInput saying why not
    (None stays None: no result)."""
    return validation.encode_json(
        "result",
        value,
        max_bytes,
        "Store large outputs elsewhere and return their location as a result_ref",
    )


def decode_result(text: str | None) -> Any:
    """The value of a stored result (None for none)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"the stored result is not JSON ({exc}): {text[:60]!r}") from None
