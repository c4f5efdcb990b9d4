"""One job's timeline (``sqlq show``): its state, its attempts, every event, as text or JSON."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from sqlq_orm.core.docs import ERROR_CODES_PAGE
from sqlq_orm.ops.render.text import Paint, human_seconds, printable, table, to_json, utc
from sqlq_orm.ops.timeline import JobTimeline


def timeline_to_dict(timeline: JobTimeline) -> dict[str, Any]:
    """A job's timeline as JSON-ready data."""
    return dataclasses.asdict(timeline)


def render_timeline_json(timeline: JobTimeline) -> str:
    return to_json(timeline_to_dict(timeline))


def _detail_value(key: str, value: Any) -> Any:
    """An event detail's value as shown: epoch seconds (``run_at``, ``lease_expires_at``,
    ``slot_at``, ...) as UTC times, everything else as it is."""
    if key.endswith("_at") and isinstance(value, int) and not isinstance(value, bool):
        return utc(value).replace(" ", "T")
    return value


def _detail_text(detail: Any, limit: int = 80) -> str:
    if detail is None:
        return ""
    if isinstance(detail, dict):
        text = " ".join(f"{k}={_detail_value(k, v)}" for k, v in detail.items())
    else:
        text = str(detail)
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _offset(ts: int | None, origin: int) -> str:
    if ts is None:
        return "-"
    return ("+" if ts >= origin else "") + human_seconds(ts - origin)


def render_arguments(arguments: Sequence[tuple[str, Any, bool]]) -> str:
    """A task call's arguments as ``name=value`` (JSON values), a default marked
    ``(default)``: what ``sqlq show --handlers`` prints for a task's job."""
    shown = " ".join(
        f"{name}={json.dumps(value, ensure_ascii=False, separators=(',', ':'), default=repr)}"
        + (" (default)" if is_default else "")
        for name, value, is_default in arguments
    )
    shown = printable(shown)
    return shown[:399] + "…" if len(shown) > 400 else shown


def render_timeline_text(
    timeline: JobTimeline,
    *,
    color: bool = False,
    arguments: Sequence[tuple[str, Any, bool]] | None = None,
) -> str:
    """One job at a glance: its state, its attempts, then every event in order.

    ``arguments`` (a task's job: ``(name, value, is_default)`` in the signature's
    order) adds a line showing them as named parameters."""
    paint = Paint(color)
    job, now = timeline.job, timeline.now
    origin = job.created_at
    payload = (
        json.dumps(job.payload, ensure_ascii=False, separators=(",", ":"))
        if not isinstance(job.payload, str)
        else job.payload
    )
    payload = printable(payload)
    if len(payload) > 200:
        payload = payload[:199] + "…"
    max_runtime = "-" if job.max_runtime_seconds is None else f"{job.max_runtime_seconds}s"
    lines = [
        f"{paint(f'job {job.id}', 'bold')}  type={printable(job.type)}  "
        f"queue={printable(job.queue)}  "
        f"status={paint.status(job.status)}  priority={job.priority}",
        f"  created {utc(job.created_at)} ({human_seconds(now - job.created_at)} ago)   "
        f"run_at {_offset(job.run_at, origin)}   started {_offset(job.started_at, origin)}   "
        f"finished {_offset(job.finished_at, origin)}",
        f"  attempts {job.attempt_count}   retries {job.retry_count}/{job.max_retries}   "
        f"max_runtime {max_runtime}",
        f"  payload {payload}",
    ]
    if arguments is not None:
        lines.append(f"  arguments {render_arguments(arguments)}")
    if job.result is not None:
        shown = (
            job.result
            if isinstance(job.result, str)
            else json.dumps(job.result, ensure_ascii=False, separators=(",", ":"))
        )
        shown = printable(shown)
        lines.append(f"  result {shown[:199] + '…' if len(shown) > 200 else shown}")
    if job.payload_ref or job.result_ref:
        lines.append(
            f"  payload_ref {printable(job.payload_ref or '-')}   "
            f"result_ref {printable(job.result_ref or '-')}"
        )
    if job.dedupe_key:
        lines.append(f"  dedupe_key {printable(job.dedupe_key)}")
    if job.concurrency_key is not None:
        lines.append(
            f"  concurrency_key {printable(job.concurrency_key)} "
            f"(at most {job.concurrency_limit} at once)"
        )
    if job.columns:
        lines.append(
            "  "
            + "   ".join(
                f"{printable(name)} {printable(value)}" for name, value in job.columns.items()
            )
        )
    if job.error_code:
        lines.append(
            f"  error {paint(job.error_code, 'red')}: {printable(job.error_detail or '')}".rstrip(
                " :"
            )
        )
        lines.append(f"  (error codes: {ERROR_CODES_PAGE})")
    if timeline.worker_state is not None:
        state = paint.status(timeline.worker_state.value)
        seen = ""
        if timeline.worker is not None:
            w = timeline.worker
            seen = (
                f", {printable(w.hostname)} pid {w.pid}, "
                f"seen {human_seconds(w.seen_seconds_ago)} ago"
            )
        lease = "-"
        if job.lease_expires_at is not None:
            left = job.lease_expires_at - now
            lease = (
                paint(f"EXPIRED {human_seconds(-left)} ago", "red")
                if left <= 0
                else f"{human_seconds(left)} left"
            )
        heartbeat = (
            "-" if job.heartbeat_at is None else f"{human_seconds(now - job.heartbeat_at)} ago"
        )
        lines.append(
            f"  held by {printable(job.claimed_by)} ({state}{seen})   last heartbeat {heartbeat}   "
            f"lease {lease}"
        )
    parts = ["\n".join(lines)]
    for title, related in (("parents", timeline.parents), ("children", timeline.children)):
        if related:
            rows = [[r.id, r.type, paint.status(r.status), r.on_parent_failure] for r in related]
            parts.append(
                paint(title, "bold")
                + "\n"
                + table(["ID", "TYPE", "STATUS", "ON PARENT FAILURE"], rows, right=(0,))
            )
    if timeline.attempts:
        rows = [
            [
                a.attempt,
                paint.status(a.status),
                a.worker_id,
                _offset(a.started_at, origin),
                human_seconds(a.duration_seconds)
                + ("" if a.finished_at is not None else " so far"),
                " ".join(x for x in (a.error_code, a.error_detail) if x),
            ]
            for a in timeline.attempts
        ]
        parts.append(
            paint("attempts", "bold")
            + "\n"
            + table(["#", "STATUS", "WORKER", "STARTED", "TOOK", "ERROR"], rows, right=(0,))
        )
    rows = [
        [utc(e.ts), _offset(e.ts, origin), paint.status(e.event), e.actor, _detail_text(e.detail)]
        for e in timeline.events
    ]
    parts.append(
        paint("timeline", "bold")
        + "\n"
        + (table(["TIME", "T+", "EVENT", "ACTOR", "DETAIL"], rows) if rows else "  no events")
    )
    return "\n\n".join(parts)
