"""A process pool's child: runs one job at a time, sent by the worker over a socket.

The child is forked from the worker with the handlers already imported (once per
child, never per job). It holds no lease and no connection of the queue's: the fork
guard of :mod:`sqlq_orm.db.engine` dropped the pooled connections it inherited, and a
handler's own database use is its own business. Jobs come in and outcomes go back as
one line of JSON each, never pickle. The child leaves when its socket closes (the
worker retires it, or died: ``PR_SET_PDEATHSIG`` also ends it with the worker).

``async def`` handlers run on an event loop of the child's own, made at its first
coroutine and kept for the child's life, one job at a time like the others; the
registry's loop clean-ups are awaited on it before the child exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from typing import Any, NoReturn

from sqlalchemy.engine import Engine

from sqlq_orm.core.lease import Lease
from sqlq_orm.worker.execution import await_handler, call_handler
from sqlq_orm.worker.handlers import AsyncJobContext, HandlerRegistry, JobContext
from sqlq_orm.worker.outcomes import INVALID_RESULT, Outcome
from sqlq_orm.worker.runs import JobRun

log = logging.getLogger("sqlq_orm.worker")

_PR_SET_PDEATHSIG = 1


def job_message(run: JobRun) -> bytes:
    """What the child needs of ``run`` to call its handler: one JSON line."""
    lease, context = run.lease, run.context
    return _line(
        {
            "job_id": lease.job_id,
            "attempt": lease.attempt,
            "type": lease.type,
            "queue": lease.queue,
            "payload_json": lease.payload_json,
            "payload_ref": lease.payload_ref,
            "retry_count": lease.retry_count,
            "max_retries": lease.max_retries,
            "max_runtime_seconds": lease.max_runtime_seconds,
            "retries_left": context.retries_left,
            "lease_seconds": context.lease_seconds,
            "columns": lease.columns,
        }
    )


def outcome_of_reply(reply: dict[str, Any]) -> Outcome:
    """The :class:`Outcome` a child's reply line stands for."""
    return Outcome(
        error_code=reply.get("error_code"),
        error_detail=reply.get("error_detail"),
        retryable=bool(reply.get("retryable", True)),
        result_ref=reply.get("result_ref"),
        result=reply.get("result"),
        snooze=reply.get("snooze"),
        retry_in=reply.get("retry_in"),
    )


class _ChildContext(JobContext):
    """A job's context in a child: the worker (the parent) holds the lease and ends
    the child when it gives up on the job, so the child never self-fences."""

    def _check_fence(self) -> None:
        return None


class _AsyncChildContext(AsyncJobContext):
    def _check_fence(self) -> None:
        return None


def serve(sock: socket.socket, handlers: HandlerRegistry, worker_id: str) -> NoReturn:
    """The child's life, right after the fork: run jobs until the socket closes."""
    status = 0
    try:
        _settle(os.getppid())
        _Child(sock, handlers, worker_id).run()
    except BaseException:  # noqa: BLE001 - a child must never return into the worker's code
        log.exception("a process pool child failed")
        status = 70
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    os._exit(status)


def _settle(parent: int) -> None:
    # The worker decides when its children stop: a Ctrl-C to the process group must
    # not end a job that shutdown's grace period would let finish.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    with contextlib.suppress(Exception):  # Linux only: end with the worker, even mid-job
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the worker died before prctl took effect
        os._exit(0)
    _drop_inherited_connections()
    global _RSS_AT_FORK_KB
    _RSS_AT_FORK_KB = _status_kb("VmRSS") or 0


_RSS_AT_FORK_KB = 0
"""The child's resident memory as it began: pages it still shares with the worker
(copy-on-write) count as resident in both."""


def _status_kb(field: str) -> int | None:
    """A ``/proc/self/status`` memory field in kilobytes (Linux), or None."""
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


_INHERITED: list[Any] = []
"""The connection pools the child inherited, kept from the garbage collector: a
collected connection may say goodbye to the server on the parent's socket."""


def _drop_inherited_connections() -> None:
    # The engines sqlq_orm made drop theirs already (the fork guard, db/engine.py);
    # an app's own engine (sqlalchemy.create_engine, used by the parent before the
    # fork) would otherwise hand the child the parent's pooled connections.
    for found in gc.get_objects():
        if isinstance(found, Engine):
            _INHERITED.append(found.pool)
            found.dispose(close=False)


def peak_rss_kb() -> int:
    """How much resident memory this child added at its peak, in kilobytes: Linux's
    ``VmHWM`` less what was resident as it began. The memory a child shares with the
    worker it was forked from counts as its own too, so a big worker would otherwise
    see every child past the limit after its first job. Elsewhere ``ru_maxrss``."""
    peak = _status_kb("VmHWM")
    if peak is None:
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return max(0, peak - _RSS_AT_FORK_KB)


class _Child:
    def __init__(self, sock: socket.socket, handlers: HandlerRegistry, worker_id: str) -> None:
        self.sock = sock
        self.handlers = handlers
        self.worker_id = worker_id
        self.loop: asyncio.AbstractEventLoop | None = None
        self.shutdown = threading.Event()  # never set: the worker ends the child instead

    def run(self) -> None:
        reader = self.sock.makefile("rb")
        try:
            for line in reader:
                reply = self._run_job(json.loads(line))
                self.sock.sendall(_line(reply))
        finally:
            self._close_loop()

    def _run_job(self, job: dict[str, Any]) -> dict[str, Any]:
        lease = Lease(
            job_id=job["job_id"],
            token="",  # the worker keeps the lease; the child never needs it
            attempt=job["attempt"],
            type=job["type"],
            queue=job["queue"],
            worker_id=self.worker_id,
            payload_json=job["payload_json"],
            payload_ref=job["payload_ref"],
            retry_count=job["retry_count"],
            max_retries=job["max_retries"],
            max_runtime_seconds=job["max_runtime_seconds"],
            lease_expires_at=0,
            columns=job["columns"] or {},
        )
        coroutine = self.handlers.is_coroutine(lease.type)
        context_type = _AsyncChildContext if coroutine else _ChildContext
        context = context_type(
            job_id=lease.job_id,
            attempt=lease.attempt,
            type=lease.type,
            queue=lease.queue,
            payload=None,
            payload_ref=lease.payload_ref,
            worker_id=self.worker_id,
            retries_left=job["retries_left"],
            retry_count=lease.retry_count,
            lease_seconds=job["lease_seconds"],
            leased_at=time.monotonic(),
            shutdown=self.shutdown,
            columns=lease.columns,
        )
        run = JobRun(lease=lease, context=context)
        if coroutine:
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
                asyncio.set_event_loop(self.loop)
            outcome = self.loop.run_until_complete(
                await_handler(self.handlers, run, self.worker_id)
            )
        else:
            outcome = call_handler(self.handlers, run, self.worker_id)
        return _reply(outcome)

    def _close_loop(self) -> None:
        if self.loop is None:
            return
        for cleanup in self.handlers.loop_cleanups:
            try:
                self.loop.run_until_complete(cleanup())
            except Exception:  # noqa: BLE001 - one failing clean-up must not skip the rest
                log.exception("loop clean-up %r failed", cleanup)


def _reply(outcome: Outcome) -> dict[str, Any]:
    reply = {
        "error_code": outcome.error_code,
        "error_detail": outcome.error_detail,
        "retryable": outcome.retryable,
        "result_ref": outcome.result_ref,
        "result": outcome.result,
        "snooze": outcome.snooze,
        "retry_in": outcome.retry_in,
        "rss_kb": peak_rss_kb(),
    }
    try:
        json.dumps(outcome.result)
    except (TypeError, ValueError) as exc:
        reply.update(
            error_code=INVALID_RESULT,
            error_detail=f"the handler's result is not JSON: {exc}",
            retryable=False,
            result=None,
        )
    return reply


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, default=str, separators=(",", ":")).encode() + b"\n"
