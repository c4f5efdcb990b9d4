"""``CATEGORY:SUBCATEGORY`` error codes and short error details. Pure functions."""

from __future__ import annotations

import re

from sqlq_orm.errors import InvalidInput
from sqlq_orm.schema.mixins import ERROR_CODE_MAX, ERROR_DETAIL_MAX

_CODE = re.compile(r"^[A-Z][A-Z0-9_]*:[A-Z][A-Z0-9_]*$")
_SEPARATORS = re.compile(r"[\s\-.]+")

LEASE_EXPIRED = "LEASE:EXPIRED"
MAX_RUNTIME = "TIMEOUT:MAX_RUNTIME"
WORKER_CRASHED = "WORKER:CRASHED"  # a process pool child died running the job
UNHANDLED_EXCEPTION = "INTERNAL:UNHANDLED_EXCEPTION"
UNKNOWN_TYPE = "INVALID_INPUT:UNKNOWN_JOB_TYPE"
CORRUPT_PAYLOAD = "INVALID_INPUT:CORRUPT_PAYLOAD"
DEPENDENCY_FAILED = "DEPENDENCY:FAILED"  # a parent (depends_on) ended FAILED or CANCELLED

TRUNCATION_MARK = "…"


def normalize_error_code(code: object) -> str:
    """Return ``code`` as ``CATEGORY:SUBCATEGORY`` in upper case, or raise.

    Case, surrounding spaces and inner spaces, dashes or dots are forgiven
    (``"timeout: upstream-api"`` becomes ``"TIMEOUT:UPSTREAM_API"``); anything else
    that does not have exactly one colon between two identifiers is rejected.
    """
    if not isinstance(code, str):
        raise InvalidInput(f"error_code must be a string like 'TIMEOUT:UPSTREAM_API', got {code!r}")
    parts = code.split(":")
    if len(parts) != 2:
        raise InvalidInput(f"error_code must be CATEGORY:SUBCATEGORY (one colon), got {code!r}")
    normalized = ":".join(_SEPARATORS.sub("_", p.strip()).upper() for p in parts)
    if not _CODE.match(normalized):
        raise InvalidInput(
            "error_code must be CATEGORY:SUBCATEGORY made of letters, digits and "
            f"underscores, starting with a letter, got {code!r}"
        )
    if len(normalized) > ERROR_CODE_MAX:
        raise InvalidInput(
            f"error_code is {len(normalized)} characters; the limit is {ERROR_CODE_MAX}: "
            f"{code[:40]!r}..."
        )
    return normalized


def summarize_detail(detail: object, limit: int = ERROR_DETAIL_MAX) -> str | None:
    """Return ``detail`` as a string of at most ``limit`` characters (None stays None).

    Full tracebacks belong in logs; the database keeps a summary that a person can
    read at a glance and that cannot bloat the table.
    """
    if detail is None:
        return None
    # PostgreSQL refuses text holding NUL, and a failure that cannot be recorded
    # leaves its job RUNNING while the worker retries: show the NUL instead.
    text = str(detail).strip().replace("\x00", "\\x00")
    if len(text) <= limit:
        return text
    return text[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK
