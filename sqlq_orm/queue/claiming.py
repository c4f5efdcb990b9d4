"""Claiming ready jobs: one statement leases up to ``limit`` jobs, each with a fresh token."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from sqlq_orm.core import validation
from sqlq_orm.core.lease import Lease
from sqlq_orm.errors import (
    SqlqError,
)
from sqlq_orm.queue.core import QueueCore, retry_if_rolled_back
from sqlq_orm.schema.mixins import QUEUE_MAX, WORKER_ID_MAX


class Claiming(QueueCore):
    """Leasing ready jobs to a worker."""

    @retry_if_rolled_back
    def claim(
        self,
        worker_id: str,
        *,
        queues: Sequence[str] = ("default",),
        limit: int = 1,
        lease_seconds: int | None = None,
        start: bool = False,
    ) -> list[Lease]:
        """Lease up to ``limit`` ready jobs to ``worker_id``: highest priority, then oldest.

        Each claimed job gets a fresh lease token, ``lease_expires_at = now +
        lease_seconds`` and a CLAIMED event. With ``start=True`` the jobs go straight to
        RUNNING (attempt opened, STARTED event), saving a round trip per job. Returns
        the leases sorted by job id, or an empty list when nothing is ready. Never claims
        more than ``limit``, and never hands one job to two claimers.
        """
        validation.require_name("worker_id", worker_id, WORKER_ID_MAX)
        queue_names = validation.claim_queues(queues, QUEUE_MAX)
        limit = validation.claim_limit(limit)
        seconds = validation.lease_seconds(
            self.default_lease_seconds if lease_seconds is None else lease_seconds
        )
        tokens = [secrets.token_urlsafe(24) for _ in range(limit)]
        statement, params = self.sql.claim_for(queue_names, start=start)
        params.update(
            p_limit=limit,
            p_worker=worker_id,
            p_lease_seconds=seconds,
            tokens=self.dialect.bind_tokens(tokens),
        )
        with self._write() as connection:
            rows, changed = self.sql.run_returning(
                connection, statement, params, count_changed=True
            )
            if not rows:
                return []
            if changed != len(rows) or len(rows) > limit:
                # Every claimed row must get its CLAIMED event below; a row changed but
                # not returned would be a job held by nobody. Roll the claim back.
                raise SqlqError(
                    f"claim changed {changed} row(s) but returned {len(rows)} (limit "
                    f"{limit}); rolled back, nothing was claimed"
                )
            leases = [self._lease_from_row(row, worker_id, started=start) for row in rows]
            if not self.sql.history_in_one_statement:  # else the claim wrote them
                # Attempt rows and events in SQL from the rows just claimed: one
                # statement each for the whole batch.
                history = {"p_ids": [lease.job_id for lease in leases], "p_lease_seconds": seconds}
                if start:
                    connection.execute(self.sql.open_attempts_of_batch, history)
                    connection.execute(self.sql.claim_and_start_events_of_batch, history)
                else:
                    connection.execute(self.sql.claim_events_of_batch, history)
        leases.sort(key=lambda lease: lease.job_id)
        return leases

    def _lease_from_row(self, row: Any, worker_id: str, *, started: bool) -> Lease:
        return Lease(
            job_id=row.id,
            token=row.lease_token,
            attempt=row.attempt_count if started else row.attempt_count + 1,
            type=row.type,
            queue=row.queue,
            worker_id=worker_id,
            payload_json=row.payload,
            payload_ref=row.payload_ref,
            retry_count=row.retry_count,
            max_retries=row.max_retries,
            max_runtime_seconds=row.max_runtime_seconds,
            lease_expires_at=row.lease_expires_at,
            deadline_at=row.deadline_at,
            started=started,
            columns={c.key: row._mapping[c.name] for c in self.sql.app_columns},
            last_heartbeat_event=time.monotonic(),
        )
