"""Claiming ready jobs: one statement leases up to ``limit`` jobs, each with a fresh token."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from sqlq_orm.core import validation
from sqlq_orm.core.lease import Lease
from sqlq_orm.db.statements.concurrency import over_limit
from sqlq_orm.db.statements.rate_limits import pick_within_rate
from sqlq_orm.errors import (
    InvalidInput,
    SqlqError,
)
from sqlq_orm.queue.core import QueueCore, detail_json, log, retry_if_rolled_back
from sqlq_orm.schema.mixins import QUEUE_MAX, WORKER_ID_MAX
from sqlq_orm.schema.states import JobStatus

_TOKEN_BYTES = 24
"""Random bytes in a lease token (as ``secrets.token_urlsafe(24)``: 32 characters)."""

_CONCURRENCY_ROUNDS = 5
"""How often a claim runs again after finding, before commit, that a concurrent claim
filled its keys (or after the database rolled it back as a deadlock victim); after
that it returns nothing this time, and the caller polls again."""


def lease_tokens(count: int) -> list[str]:
    """``count`` fresh lease tokens, each ``secrets.token_urlsafe(24)``'s like.

    One read of the system's randomness for the batch (the same source ``secrets``
    reads), not one per token: a claim of a hundred jobs made a hundred system calls.
    """
    data = secrets.token_bytes(_TOKEN_BYTES * count)
    return [
        base64.urlsafe_b64encode(data[i : i + _TOKEN_BYTES]).decode("ascii")
        for i in range(0, len(data), _TOKEN_BYTES)
    ]


class _KeyOverLimit(Exception):
    """A claim's concurrency keys are over their limits: roll it back and claim again."""


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
        lease_seconds_by_type: Mapping[str, int] | None = None,
        start_at_most: int | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` ready jobs to ``worker_id``: highest priority, then oldest.

        Each claimed job gets a fresh lease token, ``lease_expires_at = now +
        lease_seconds`` and a CLAIMED event. With ``start=True`` the jobs go straight to
        RUNNING (attempt opened, STARTED event), saving a round trip per job. Returns
        the leases sorted by job id, or an empty list when nothing is ready. Never claims
        more than ``limit``, and never hands one job to two claimers. Never takes a
        job whose ``concurrency_key`` already has ``concurrency_limit`` jobs held.

        ``lease_seconds_by_type`` gives job types a lease length of their own (a task's
        ``lease=``): their jobs are claimed with it, in the claim's transaction, so a
        long task is not swept before its first heartbeat, nor a short one held long.

        ``start_at_most`` (with ``start=True``): start only the first that many jobs
        (in claim order) and leave the rest CLAIMED, for
        :meth:`~sqlq_orm.Queue.start_many` once their handler is about to run. A
        worker claims its prefetch so: a job claimed but never started costs no retry
        when its lease is recovered (:meth:`~sqlq_orm.Queue.sweep`).
        """
        validation.require_name("worker_id", worker_id, WORKER_ID_MAX)
        queue_names = validation.claim_queues(queues, QUEUE_MAX)
        limit = validation.claim_limit(limit)
        seconds = validation.lease_seconds(
            self.default_lease_seconds if lease_seconds is None else lease_seconds
        )
        by_type = self._lease_lengths(lease_seconds_by_type, seconds)
        starting = limit if start else 0
        if start and start_at_most is not None:
            starting = min(limit, validation.require_int("start_at_most", start_at_most, minimum=0))
        for _ in range(_CONCURRENCY_ROUNDS):
            minted: list[str] = []
            try:
                return self._claim_once(
                    worker_id, queue_names, limit, seconds, starting, by_type, minted
                )
            except _KeyOverLimit as exc:
                # Rolled back: a concurrent claim took the last places of these keys.
                log.debug("claim rolled back, concurrency keys over limit: %s", exc)
            except DBAPIError as exc:
                # Two claims of one key recounting it (InnoDB's locking read) can each
                # wait for the other's new rows: the database rolls one back whole. It
                # claimed nothing, so claim again (any other error goes to the caller).
                if not self.dialect.is_retryable(exc):
                    found = self._leases_of_lost_answer(exc, worker_id, minted)
                    if not found:
                        raise
                    return found
                log.debug("claim rolled back by the database (%s)", type(exc.orig).__name__)
        return []

    def _leases_of_lost_answer(
        self, exc: DBAPIError, worker_id: str, minted: list[str]
    ) -> list[Lease]:
        """The jobs a claim leased although its answer was lost (issue 37, phantom
        claims): the link broke where its COMMIT may have landed, so look its own tokens
        up on a fresh connection and hand those leases over to run. Empty when the link
        did not break (the error is the caller's), when nothing was committed, or when
        the lookup fails too (the caller gets the claim's error; an unseen lease is then
        the sweeper's, as before)."""
        if not minted or not (isinstance(exc, OperationalError) or exc.connection_invalidated):
            return []
        try:
            with self.read() as connection:
                rows = connection.execute(self.sql.claimed_by_tokens, {"p_tokens": minted}).all()
        except SQLAlchemyError as lookup:
            log.warning(
                "claim failed (%s) and its leases could not be looked up (%s)",
                type(exc.orig).__name__,
                type(lookup).__name__,
            )
            return []
        leases = [
            lease
            for status in (JobStatus.RUNNING.value, JobStatus.CLAIMED.value)
            for lease in self._leases_from_rows(
                [row for row in rows if row.status == status],
                worker_id,
                started=status == JobStatus.RUNNING.value,
            )
        ]
        if leases:
            log.warning(
                "claim's answer was lost (%s) but it had leased %d job(s): running them",
                type(exc.orig).__name__,
                len(leases),
            )
        return sorted(leases, key=lambda lease: lease.job_id)

    def _claim_once(
        self,
        worker_id: str,
        queue_names: list[str],
        limit: int,
        seconds: int,
        starting: int,
        by_type: Mapping[str, int] | None = None,
        minted: list[str] | None = None,
    ) -> list[Lease]:
        """Claim up to ``limit`` jobs, the first ``starting`` of them started: one
        claim statement, or two in one transaction (started, then CLAIMED). The lease
        tokens it mints are added to ``minted`` (to find its leases if its answer is lost)."""
        minted = [] if minted is None else minted
        leases: list[Lease] = []
        with self._write() as connection:
            rows_by_start: list[tuple[bool, list[Any]]] = []
            for start, want in ((True, starting), (False, limit - starting)):
                if want > 0:
                    rows_by_start.append(
                        (
                            start,
                            self._claim_part(
                                connection, worker_id, queue_names, want, seconds, start, minted
                            ),
                        )
                    )
            if not any(rows for _, rows in rows_by_start):
                return []
            if self.sql.recheck_concurrency:
                self._recount_keys(connection, [row for _, rows in rows_by_start for row in rows])
            for start, rows in rows_by_start:
                if not rows:
                    continue
                part = self._leases_from_rows(rows, worker_id, started=start)
                if not self.sql.history_in_one_statement:  # else the claim wrote them
                    # Attempt rows (which stand for the CLAIMED and STARTED events) or
                    # the CLAIMED events, in SQL from the rows just claimed: one statement.
                    history = {
                        "p_ids": [lease.job_id for lease in part],
                        "p_lease_seconds": seconds,
                    }
                    if start:
                        self.sql.write(connection, self.sql.open_attempts_of_batch, history)
                    else:
                        self.sql.write(connection, self.sql.claim_events_of_batch, history)
                if by_type:
                    self._set_own_leases(connection, part, by_type, started=start)
                leases += part
        leases.sort(key=lambda lease: lease.job_id)
        return leases

    def _claim_part(
        self,
        connection: Connection,
        worker_id: str,
        queue_names: list[str],
        limit: int,
        seconds: int,
        start: bool,
        minted: list[str],
    ) -> list[Any]:
        """The rows of up to ``limit`` jobs claimed (and started, with ``start``)."""
        tokens = lease_tokens(limit)
        minted += tokens
        statement, params = self.sql.claim_for(queue_names, start=start)
        params.update(
            p_limit=limit,
            p_worker=worker_id,
            p_lease_seconds=seconds,
            tokens=self.dialect.bind_tokens(tokens),
        )
        rows = self._claim_rows(connection, statement, params, limit)
        if len(rows) < limit and self.tables.queues is not None:
            rows += self._claim_rate_limited(
                connection, queue_names, limit - len(rows), params, start, minted
            )
        return rows

    @staticmethod
    def _lease_lengths(by_type: Mapping[str, int] | None, seconds: int) -> dict[str, int]:
        """``by_type`` checked, without the types whose length is the claim's own."""
        lengths = {}
        for job_type, length in (by_type or {}).items():
            try:
                checked = validation.lease_seconds(length)
            except InvalidInput as exc:
                raise InvalidInput(f"lease_seconds_by_type[{job_type!r}]: {exc}") from None
            if checked != seconds:
                lengths[job_type] = checked
        return lengths

    def _set_own_leases(
        self,
        connection: Connection,
        leases: list[Lease],
        by_type: Mapping[str, int],
        *,
        started: bool,
    ) -> None:
        """Give the just-claimed jobs of ``by_type``'s types their own lease length:
        one guarded update per length, and the history records the length granted."""
        by_length: dict[int, list[Lease]] = {}
        for lease in leases:
            length = by_type.get(lease.type)
            if length is not None:
                by_length.setdefault(length, []).append(lease)
        for length, held in by_length.items():
            params = {
                "p_ids": [lease.job_id for lease in held],
                "p_pairs": [(lease.job_id, lease.token) for lease in held],
                "p_lease_seconds": length,
            }
            rows, _ = self.sql.run_returning(connection, self.sql.set_leases, params)
            expiries = {row.id: row.lease_expires_at for row in rows}
            for lease in held:
                lease.lease_expires_at = expiries.get(lease.job_id, lease.lease_expires_at)
            self._record_granted_lease(connection, held, length, started=started)

    def _record_granted_lease(
        self, connection: Connection, held: list[Lease], length: int, *, started: bool
    ) -> None:
        """What the claim's history says of the lease (CLAIMED's ``lease_seconds``,
        written or stood for by the attempt row) becomes the length granted (issue 34:
        it said the claim's default). Same transaction: nobody saw the first value."""
        ids = [lease.job_id for lease in held]
        if started:
            self.sql.write(
                connection,
                self.sql.granted_lease_of_open_attempts,
                {"p_ids": ids, "p_lease_seconds": length},
            )
            return
        attempts = {lease.job_id: lease.attempt for lease in held}
        claimed = connection.execute(self.sql.last_claimed_events, {"p_ids": ids}).all()
        details = [
            {
                "p_event_id": event_id,
                "p_detail": detail_json({"attempt": attempts[job_id], "lease_seconds": length}),
            }
            for job_id, event_id in claimed
        ]
        if details:
            self.sql.write(connection, self.sql.granted_lease_of_claimed_event, details)

    def _claim_rows(
        self, connection: Connection, statement: Any, params: dict[str, Any], limit: int
    ) -> list[Any]:
        rows, changed = self.sql.run_returning(connection, statement, params, count_changed=True)
        if changed != len(rows) or len(rows) > limit:
            # Every claimed row must get its CLAIMED event; a row changed but not
            # returned would be a job held by nobody. Roll the claim back.
            raise SqlqError(
                f"claim changed {changed} row(s) but returned {len(rows)} (limit "
                f"{limit}); rolled back, nothing was claimed"
            )
        return list(rows)

    def _claim_rate_limited(
        self,
        connection: Connection,
        queue_names: list[str],
        room: int,
        params: dict[str, Any],
        start: bool,
        minted: list[str],
    ) -> list[Any]:
        """Claim up to ``room`` jobs of the rate-limited queues among ``queue_names``,
        each queue's starts in its window kept within its limit per ``rate_key`` (see
        :mod:`sqlq_orm.db.statements.rate_limits`). Runs in the claim's transaction."""
        limited: Sequence[Any] = self.sql.execute(
            connection, self.sql.select_rate_limited, {"p_queues": queue_names}
        ).all()
        rows: list[Any] = []
        for name, _limit, _period in limited:
            if len(rows) >= room:
                break
            # Under the row's lock, the limit as it is now (changed, cleared, paused?).
            locked = connection.execute(self.sql.lock_rate_limited, {"p_name": name}).first()
            if locked is None:
                continue
            limit, period = int(locked.rate_limit), int(locked.rate_period)
            window = {"p_queue": name, "p_period": period}
            starts = {
                str(key): int(count)
                for key, count in connection.execute(self.sql.rate_starts_by_key, window)
            }
            full = [key for key, count in starts.items() if count >= limit]
            want = room - len(rows)
            candidates = [
                (int(job_id), str(key))
                for job_id, key in connection.execute(
                    self.sql.rate_candidates,
                    # Read past the picks' keys a little, so a full batch can come from
                    # several keys (a key with room left is picked in claim order).
                    {**window, "p_full": full, "p_scan": min(want * 10, 1000)},
                )
            ]
            picked = pick_within_rate(candidates, starts, limit, want)
            if not picked:
                continue
            tokens = lease_tokens(len(picked))
            minted += tokens
            claim_params = {
                "p_worker": params["p_worker"],
                "p_lease_seconds": params["p_lease_seconds"],
                "p_ids": picked,
                "p_limit": len(picked),
                "tokens": self.dialect.bind_tokens(tokens),
            }
            statement = self.sql.claim_and_start_ids if start else self.sql.claim_ids
            rows += self._claim_rows(connection, statement, claim_params, len(picked))
        return rows

    def _recount_keys(self, connection: Connection, rows: Sequence[Any]) -> None:
        """Count the claimed keys' held jobs again, now that no claim of those keys
        can be uncommitted (see :mod:`sqlq_orm.db.statements.concurrency`); raise
        :class:`_KeyOverLimit`, rolling the claim back, if one is over its limit."""
        keys = sorted({row.concurrency_key for row in rows if row.concurrency_key is not None})
        if not keys:
            return
        lock_keys = self.dialect.lock_concurrency_keys
        if lock_keys is not None and not lock_keys(
            connection, self.sql.concurrency_lock_scope, keys
        ):
            raise _KeyOverLimit(f"no lock on the concurrency keys {keys} in time")
        held = connection.execute(self.sql.recount_held, {"p_keys": keys}).all()
        over = over_limit(rows, held)
        if over:
            raise _KeyOverLimit(over)

    def _leases_from_rows(
        self, rows: Sequence[Any], worker_id: str, *, started: bool
    ) -> list[Lease]:
        """The claimed rows as leases, read by position: read by column name, a batch
        of a hundred rows cost more than the rest of the claim's Python."""
        app_columns = self.sql.app_columns
        now = time.monotonic()
        leases = []
        at: tuple[int, ...] = ()
        shape = None  # the rows of one result share their metadata (and positions)
        for row in rows:
            metadata = getattr(row, "_parent", None)
            if metadata is None or metadata is not shape:
                at, shape = _positions(row._fields, app_columns), metadata
            v = tuple(row)
            leases.append(
                Lease(
                    job_id=v[at[0]],
                    token=v[at[1]],
                    attempt=v[at[2]] if started else v[at[2]] + 1,
                    type=v[at[3]],
                    queue=v[at[4]],
                    worker_id=worker_id,
                    payload_json=v[at[5]],
                    payload_ref=v[at[6]],
                    retry_count=v[at[7]],
                    max_retries=v[at[8]],
                    max_runtime_seconds=v[at[9]],
                    lease_expires_at=v[at[10]],
                    deadline_at=v[at[11]],
                    started=started,
                    row_stands_for_events=started,
                    columns={
                        column.key: v[i]
                        for column, i in zip(app_columns, at[len(_LEASE_COLUMNS) :], strict=True)
                    },
                    last_heartbeat_event=now,
                )
            )
        return leases


_LEASE_COLUMNS = (
    "id",
    "lease_token",
    "attempt_count",
    "type",
    "queue",
    "payload",
    "payload_ref",
    "retry_count",
    "max_retries",
    "max_runtime_seconds",
    "lease_expires_at",
    "deadline_at",
)
"""The claim's returned columns a :class:`Lease` is made of, in the order read."""


def _positions(fields: tuple[str, ...], app_columns: Sequence[Any]) -> tuple[int, ...]:
    """Where each of :data:`_LEASE_COLUMNS`, then each app column, is in a row."""
    index = {name: i for i, name in enumerate(fields)}
    return tuple(index[name] for name in _LEASE_COLUMNS) + tuple(
        index[column.name] for column in app_columns
    )
