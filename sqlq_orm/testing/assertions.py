"""Assertions on the jobs an app enqueued, read from the real tables.

::

    place_order(...)                                   # the code under test
    assert_enqueued(send_receipt, args={"order_id": 7}, queue="mail")
    assert_not_enqueued(send_receipt, args={"order_id": 8})
    [job] = enqueued_jobs(send_receipt)
    assert job.args["order_id"] == 7

A job counts as enqueued while it waits to run: QUEUED (due now or later) or
WAITING for its parents. ``args`` match by parameter name, as a subset of the
job's arguments, compared as values through the task's codec: a dataclass or a
pydantic model given here equals the same value stored (a plain handler's job type,
given as a string, compares its JSON payload's keys). With ``session=``, the
caller's uncommitted jobs are seen too (the session's transaction).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sqlq_orm.errors import InvalidInput
from sqlq_orm.queue.queue import Queue
from sqlq_orm.schema.states import JobStatus
from sqlq_orm.tasks.registry import TaskRegistry
from sqlq_orm.tasks.signature import META_KEY, TaskSignature
from sqlq_orm.tasks.task import Task

ENQUEUED_STATUSES = (JobStatus.QUEUED.value, JobStatus.WAITING.value)
"""What "enqueued" means here: waiting to run (due now, later, or after its parents)."""

LISTED_AT_MOST = 20
"""How many jobs of other types a failed :func:`assert_enqueued` lists."""


@dataclass(frozen=True)
class EnqueuedCall:
    """One enqueued job as a test sees it: its arguments decoded by parameter name."""

    id: int
    type: str
    queue: str
    args: dict[str, Any]
    """By parameter name, rebuilt by the task's annotations (a plain handler's payload
    object as stored; ``{"payload": value}`` for a payload that is not an object)."""
    status: str
    priority: int
    run_at: int | None
    columns: dict[str, Any] = field(default_factory=dict)
    """The job's values of the columns the host app added to its job model."""

    def describe(self) -> str:
        """``send_receipt(order_id=7) on queue 'mail' (job 3)``: how failures list it."""
        shown = ", ".join(f"{name}={value!r}" for name, value in self.args.items())
        extra = f", {self.columns}" if self.columns else ""
        return f"{self.type}({shown}) on queue {self.queue!r} (job {self.id}, {self.status}{extra})"


def enqueued_jobs(
    task_or_type: Task[Any, Any] | str,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    columns: Mapping[str, Any] | None = None,
    session: Session | None = None,
    on: Queue | TaskRegistry | None = None,
) -> list[EnqueuedCall]:
    """The enqueued jobs of ``task_or_type`` (a task, or a job type name) that match,
    oldest first.

    ``on`` is the queue to read (default: the task's registry's); a job type given as
    a string needs it, or a ``session``'s registry-less read through ``on``.
    """
    return [
        job
        for job in _all_of_type(task_or_type, session, on)
        if _matches(job, task_or_type, args, queue, columns)
    ]


def assert_enqueued(
    task_or_type: Task[Any, Any] | str,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    columns: Mapping[str, Any] | None = None,
    count: int | None = None,
    session: Session | None = None,
    on: Queue | TaskRegistry | None = None,
) -> list[EnqueuedCall]:
    """Fail unless a job of ``task_or_type`` matching ``args``/``queue``/``columns`` is
    enqueued (exactly ``count`` of them, if given); return the matching jobs.

    The failure message lists what *was* enqueued of that type (arguments, queue).
    """
    every = _all_of_type(task_or_type, session, on)
    found = [job for job in every if _matches(job, task_or_type, args, queue, columns)]
    if (count is None and found) or (count is not None and len(found) == count):
        return found
    wanted = _wanted(task_or_type, args, queue, columns)
    many = "at least one job" if count is None else f"exactly {count} job(s)"
    listing = _listing(task_or_type, every)
    if not every:  # what else is there, then (the type may be misspelt, say)
        others = _enqueued(_queue_of(task_or_type, on), session, None, None, LISTED_AT_MOST)
        if others:
            listing += " Enqueued of other types:\n" + "\n".join(
                f"  - {job.describe()}" for job in others
            )
    raise AssertionError(f"expected {many} {wanted}, found {len(found)}.\n{listing}")


def assert_not_enqueued(
    task_or_type: Task[Any, Any] | str,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    columns: Mapping[str, Any] | None = None,
    session: Session | None = None,
    on: Queue | TaskRegistry | None = None,
) -> None:
    """Fail if any job of ``task_or_type`` matching ``args``/``queue``/``columns`` is
    enqueued; the message lists the ones that match."""
    every = _all_of_type(task_or_type, session, on)
    found = [job for job in every if _matches(job, task_or_type, args, queue, columns)]
    if found:
        wanted = _wanted(task_or_type, args, queue, columns)
        shown = "\n".join(f"  - {job.describe()}" for job in found)
        raise AssertionError(f"expected no job {wanted}, found {len(found)}:\n{shown}")


# ---------------------------------------------------------------------- reading


def _type_name(task_or_type: Task[Any, Any] | str) -> str:
    if isinstance(task_or_type, Task):
        return task_or_type.name
    if isinstance(task_or_type, str) and task_or_type:
        return task_or_type
    raise InvalidInput(f"expected a task or a job type name, got {task_or_type!r}")


def _queue_of(task_or_type: Task[Any, Any] | str, on: Queue | TaskRegistry | None) -> Queue:
    if isinstance(on, Queue):
        return on
    if isinstance(on, TaskRegistry):
        return on.queue
    if on is not None:
        raise InvalidInput(f"on= takes a Queue or a TaskRegistry, got {on!r}")
    if isinstance(task_or_type, Task):
        queue = task_or_type.registry.queue
        assert isinstance(queue, Queue)
        return queue
    raise InvalidInput(
        f"job type {task_or_type!r} is a name, not a task: pass on=queue (the Queue "
        "it was enqueued on) to say where to look"
    )


def _all_of_type(
    task_or_type: Task[Any, Any] | str, session: Session | None, on: Queue | TaskRegistry | None
) -> list[EnqueuedCall]:
    queue = _queue_of(task_or_type, on)
    signature = task_or_type.signature if isinstance(task_or_type, Task) else None
    return _enqueued(queue, session, _type_name(task_or_type), signature)


def _enqueued(
    queue: Queue,
    session: Session | None,
    type_name: str | None,
    signature: TaskSignature | None,
    limit: int | None = None,
) -> list[EnqueuedCall]:
    """The enqueued jobs of ``type_name`` (of every type: None), oldest first."""
    jobs = queue.tables.jobs
    statement = select(jobs).where(jobs.c.status.in_(ENQUEUED_STATUSES)).order_by(jobs.c.id)
    if type_name is not None:
        statement = statement.where(jobs.c.type == type_name)
    if limit is not None:
        statement = statement.limit(limit)
    if session is not None:
        rows = session.connection().execute(statement).mappings().all()
    else:
        with queue.read() as connection:
            rows = connection.execute(statement).mappings().all()
    app_columns = list(queue.sql.app_column_names)
    return [
        EnqueuedCall(
            id=row["id"],
            type=row["type"],
            queue=row["queue"],
            args=_decoded(signature, _payload(row["payload"])),
            status=str(row["status"]),
            priority=row["priority"],
            run_at=row["run_at"],
            columns={name: row[name] for name in app_columns},
        )
        for row in rows
    ]


def _payload(stored: Any) -> Any:
    return json.loads(stored) if isinstance(stored, (str, bytes)) else stored


def _decoded(signature: TaskSignature | None, payload: Any) -> dict[str, Any]:
    if not isinstance(payload, Mapping):
        return {} if payload is None else {"payload": payload}
    if signature is None:
        return dict(payload)
    args: dict[str, Any] = {}
    for name, value in payload.items():
        if name == META_KEY:
            continue
        converter = signature.converters.get(name)
        decode = None if converter is None else converter.decode
        if decode is not None and value is not None:
            with contextlib.suppress(Exception):  # shown as stored when it no longer fits
                value = decode(value)
        args[name] = value
    return args


# --------------------------------------------------------------------- matching


def _as_stored(signature: TaskSignature | None, name: str, value: Any) -> Any:
    """``value`` as it would be stored for parameter ``name`` (JSON, after the codec)."""
    if signature is not None and name in signature.converters:
        encode = signature.converters[name].encode
        if encode is not None and value is not None:
            with contextlib.suppress(Exception):  # already in its stored form
                value = encode(value)
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value


def _matches(
    job: EnqueuedCall,
    task_or_type: Task[Any, Any] | str,
    args: Mapping[str, Any] | None,
    queue: str | None,
    columns: Mapping[str, Any] | None,
) -> bool:
    if queue is not None and job.queue != queue:
        return False
    if columns and any(job.columns.get(name) != value for name, value in columns.items()):
        return False
    if not args:
        return True
    signature = task_or_type.signature if isinstance(task_or_type, Task) else None
    given = dict(job.args)
    if signature is not None:  # a parameter left out has its default
        for name, parameter in signature.parameters.items():
            if name not in given and parameter.default is not parameter.empty:
                given[name] = parameter.default
    for name, expected in args.items():
        if name not in given:
            return False
        if _as_stored(signature, name, given[name]) != _as_stored(signature, name, expected):
            return False
    return True


def _wanted(
    task_or_type: Task[Any, Any] | str,
    args: Mapping[str, Any] | None,
    queue: str | None,
    columns: Mapping[str, Any] | None,
) -> str:
    parts = [f"of type {_type_name(task_or_type)!r}"]
    if args:
        parts.append("with args " + ", ".join(f"{k}={v!r}" for k, v in args.items()))
    if queue is not None:
        parts.append(f"on queue {queue!r}")
    if columns:
        parts.append(f"with columns {dict(columns)!r}")
    return " ".join(parts)


def _listing(task_or_type: Task[Any, Any] | str, every: list[EnqueuedCall]) -> str:
    if not every:
        return f"No job of type {_type_name(task_or_type)!r} is enqueued."
    shown = "\n".join(f"  - {job.describe()}" for job in every)
    return f"Enqueued of type {_type_name(task_or_type)!r}:\n{shown}"
