"""What a claim hands a worker: the job's identity, its payload, and the lease token."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlq_orm.core.error_codes import CORRUPT_PAYLOAD
from sqlq_orm.errors import JobError


@dataclass
class Lease:
    """A worker's borrowed hold on one job.

    Every later call for this claim (``start``, ``heartbeat``, ``succeed``, ``fail``,
    ``release``) takes the lease and is fenced by its token: once the job has been
    reclaimed, cancelled or finished elsewhere, those calls raise
    :class:`~sqlq_orm.errors.LeaseLost` and change nothing.
    """

    job_id: int
    token: str = field(repr=False)  # a credential: never printed or logged
    attempt: int
    type: str
    queue: str
    worker_id: str
    payload_json: str | None = field(repr=False)
    payload_ref: str | None
    retry_count: int
    max_retries: int
    max_runtime_seconds: int | None
    lease_expires_at: int
    deadline_at: int | None = None
    started: bool = False
    columns: dict[str, Any] = field(default_factory=dict)
    """Values of the columns the host app added to its job model, by name."""
    last_heartbeat_event: float = field(default=0.0, repr=False, compare=False)
    row_stands_for_events: bool = field(default=False, repr=False, compare=False)
    """True when the claim also started the job: its attempt row stands for its
    CLAIMED, STARTED and SUCCEEDED events (:mod:`sqlq_orm.ops.stand_ins`), so a success
    need not look for a SUCCEEDED event to write. False (the safe default) makes the
    success check the row."""

    @property
    def payload(self) -> Any:
        """The job's payload, decoded from JSON.

        Raises :class:`~sqlq_orm.errors.JobError` with ``INVALID_INPUT:CORRUPT_PAYLOAD``
        (not retryable) if the stored text is not valid JSON.
        """
        if self.payload_json is None:
            return None
        try:
            return json.loads(self.payload_json)
        except ValueError as exc:
            raise JobError(
                CORRUPT_PAYLOAD,
                f"stored payload of job {self.job_id} is not valid JSON: {exc}",
                retryable=False,
            ) from None

    @property
    def retries_left(self) -> int:
        """How many more failures this job may have before it ends FAILED."""
        return max(0, self.max_retries - self.retry_count)
