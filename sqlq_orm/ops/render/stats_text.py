"""Rendering of queue stats, job timelines, prune and maintenance results.

Three forms: a terminal report (aligned tables; ANSI colour only when asked, i.e.
when stdout is a TTY), JSON for machines, and the Prometheus text exposition format
(a small exporter written here: the format is a few lines of text, and
``prometheus_client`` would add a dependency for no gain). Pure functions over the
dataclasses of :mod:`sqlq_orm.ops.stats.collect` and :mod:`sqlq_orm.ops.retention`;
nothing here touches the database.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlq_orm.ops.retention import KEEP_FOREVER, MaintenanceResult, PruneResult
from sqlq_orm.ops.stats.collect import (
    HeldJob,
    JobTimeline,
    QueueStats,
    WorkerState,
)
from sqlq_orm.schema.states import JobStatus

STATUS_ORDER = [s.value for s in JobStatus]

_RESET = "\033[0m"
_COLOURS = {
    "red": "\033[31m",
    "green": "\033[32m",
    "yellow": "\033[33m",
    "blue": "\033[34m",
    "dim": "\033[2m",
    "bold": "\033[1m",
}
_STATUS_COLOUR = {
    "QUEUED": "blue",
    "CLAIMED": "yellow",
    "RUNNING": "yellow",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "dim",
    "alive": "green",
    "silent": "red",
    "unregistered": "red",
}
_ANSI = re.compile(r"\033\[[0-9;]*m")


# ----------------------------------------------------------------------- helpers


class _Paint:
    """Wraps text in ANSI colours, or leaves it alone when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, colour: str | None) -> str:
        if not self.enabled or colour is None or not text:
            return text
        return f"{_COLOURS[colour]}{text}{_RESET}"

    def status(self, text: str) -> str:
        return self(text, _STATUS_COLOUR.get(text))


def utc(ts: int | None) -> str:
    """Epoch seconds as ``2024-01-02 03:04:05Z``; ``-`` for None."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def human_seconds(seconds: int | float | None) -> str:
    """A duration as ``45s``, ``3m20s``, ``2h05m`` or ``3d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds}s"
    for unit, size, small, small_size in (
        ("m", 60, "s", 1),
        ("h", 3600, "m", 60),
        ("d", 86_400, "h", 3600),
    ):
        if unit == "d" or seconds < size * (60 if unit == "m" else 24):
            whole, rest = divmod(seconds, size)
            rest //= small_size
            return f"{sign}{whole}{unit}{rest:02d}{small}" if rest else f"{sign}{whole}{unit}"
    raise AssertionError("unreachable")


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.0f}%"


def _visible_len(text: str) -> int:
    return len(_ANSI.sub("", text))


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    right: Sequence[int] = (),
    indent: str = "  ",
) -> str:
    """Aligned columns; ``right`` lists the columns (numbers) aligned right.

    Cells may carry ANSI colour: widths are measured on the visible text.
    """
    cells = [[str(h) for h in headers]]
    cells += [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(_visible_len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = []
        for i, cell in enumerate(row):
            gap = " " * (widths[i] - _visible_len(cell))
            padded.append(gap + cell if i in right else cell + gap)
        lines.append((indent + "  ".join(padded)).rstrip())
    return "\n".join(lines)


# ------------------------------------------------------------------------- stats


def stats_to_dict(stats: QueueStats) -> dict[str, Any]:
    """Stats as plain JSON-ready data, derived figures (rates, totals) included."""
    data = dataclasses.asdict(stats)
    data["counts"]["total"] = stats.counts.total
    data["oldest_ready_latency_seconds"] = stats.oldest_ready_latency_seconds
    for bucket, row in zip(stats.retries, data["retries"], strict=True):
        row["count"] = bucket.count
    for health, row in zip(stats.types, data["types"], strict=True):
        row["failure_rate_recent"] = health.failure_rate_recent
    for code, row in zip(stats.errors, data["errors"], strict=True):
        row["total"] = code.total
    for window, row in zip(stats.throughput, data["throughput"], strict=True):
        row["finished"] = window.finished
        row["failure_rate"] = window.failure_rate
        row["per_minute"] = round(window.per_minute, 3)
    return data


def _json_default(value: Any) -> Any:
    if isinstance(value, WorkerState):
        return value.value
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def to_json(data: Any) -> str:
    """Indented JSON text."""
    return json.dumps(data, indent=2, sort_keys=False, default=_json_default)


def render_stats_json(stats: QueueStats) -> str:
    """Stats as JSON text (see :func:`stats_to_dict`)."""
    return to_json(stats_to_dict(stats))


def render_stats_text(stats: QueueStats, *, color: bool = False) -> str:
    """The five questions on one screen: states, stuck jobs, retries, failures, retention."""
    paint = _Paint(color)
    alive = sum(1 for w in stats.workers if w.state is WorkerState.ALIVE)
    header = (
        f"{paint('sqlq stats', 'bold')}  {utc(stats.now)}   {stats.counts.total} jobs   "
        f"workers: {alive} alive, {len(stats.workers) - alive} silent   "
        f"queue latency: {human_seconds(stats.oldest_ready_latency_seconds)}"
    )
    sections = [
        header,
        _section_counts(stats, paint),
        _section_held(stats, paint),
        _section_retries(stats, paint),
        _section_errors(stats, paint),
        _section_retention(stats, paint),
    ]
    return "\n\n".join(s for s in sections if s)


def _status_header(paint: _Paint) -> list[str]:
    return [paint.status(s) for s in STATUS_ORDER]


def _section_counts(stats: QueueStats, paint: _Paint) -> str:
    counts = stats.counts
    numeric = range(1, len(STATUS_ORDER) + 2)
    latency = {q.queue: q for q in stats.latency}
    queue_rows = []
    for name, statuses in counts.by_queue.items():
        row: list[Any] = [name, *(statuses.get(s, 0) for s in STATUS_ORDER), sum(statuses.values())]
        waiting = latency.get(name)
        row.append(
            "-"
            if waiting is None
            else f"{human_seconds(waiting.latency_seconds)} ({waiting.ready} ready, "
            f"{waiting.scheduled} later)"
        )
        queue_rows.append(row)
    queue_rows.append(["TOTAL", *(counts.by_status[s] for s in STATUS_ORDER), counts.total, ""])
    durations = {d.type: d for d in stats.durations}
    type_rows = []
    for name, statuses in counts.by_type.items():
        d = durations.get(name)
        type_rows.append(
            [
                name,
                *(statuses.get(s, 0) for s in STATUS_ORDER),
                sum(statuses.values()),
                "-" if d is None else f"{human_seconds(d.p50)} / {human_seconds(d.p95)}",
            ]
        )
    windows = "\n".join(
        f"  finished in the last {human_seconds(t.window_seconds)}: {t.finished} "
        f"({t.succeeded} ok, {paint(str(t.failed), 'red' if t.failed else None)} failed, "
        f"{t.cancelled} cancelled), failure rate {_percent(t.failure_rate)}"
        for t in stats.throughput
    )
    return "\n".join(
        [
            paint("1. Jobs by state", "bold"),
            table(
                ["QUEUE", *_status_header(paint), "TOTAL", "OLDEST READY"],
                queue_rows,
                right=numeric,
            ),
            table(
                [
                    "TYPE",
                    *_status_header(paint),
                    "TOTAL",
                    f"RUN P50/P95 ({human_seconds(stats.duration_window_seconds)})",
                ],
                type_rows,
                right=numeric,
            ),
            windows,
        ]
    )


def _lease_text(job: HeldJob, now: int, paint: _Paint) -> str:
    if job.lease_expires_at is None:
        return "-"
    if job.lease_expired:
        return paint(f"EXPIRED {human_seconds(now - job.lease_expires_at)} ago", "red")
    return f"{human_seconds(job.lease_expires_at - now)} left"


def _alert(paint: _Paint, count: int) -> str:
    """A count that is red when it is not zero."""
    return paint(str(count), "red" if count else None)


def _section_held(stats: QueueStats, paint: _Paint) -> str:
    title = paint("2. Oldest in-progress jobs (longest without a heartbeat first)", "bold")
    leases = stats.leases
    oldest = ""
    if leases.oldest_expired_at is not None:
        oldest = f" (oldest {human_seconds(stats.now - leases.oldest_expired_at)} ago)"
    lease_line = (
        f"  leases expired, not yet swept: {_alert(paint, leases.expired)}{oldest}"
        f"   past max runtime: {_alert(paint, leases.past_deadline)}"
    )
    if not stats.oldest_held:
        return f"{title}\n  none in progress\n{lease_line}"
    rows = []
    for job in stats.oldest_held:
        state = paint.status(job.worker_state.value)
        if job.worker_last_seen_at is not None:
            state += f" (seen {human_seconds(stats.now - job.worker_last_seen_at)} ago)"
        rows.append(
            [
                job.id,
                job.type,
                job.queue,
                paint.status(job.status),
                job.attempt,
                human_seconds(job.silent_seconds),
                human_seconds(job.held_seconds),
                job.claimed_by,
                state,
                _lease_text(job, stats.now, paint),
            ]
        )
    headers = [
        "JOB",
        "TYPE",
        "QUEUE",
        "STATUS",
        "TRY",
        "SILENT",
        "HELD",
        "WORKER",
        "WORKER IS",
        "LEASE",
    ]
    lines = [title, table(headers, rows, right=(0, 4, 5, 6)), lease_line]
    silent = [w for w in stats.workers if w.state is not WorkerState.ALIVE]
    if silent:
        names = ", ".join(
            f"{w.id} ({human_seconds(w.seen_seconds_ago)} ago, {w.held_jobs} job(s))"
            for w in silent
        )
        lines.append(f"  {paint('silent workers', 'red')}: {names}")
    return "\n".join(lines)


_RETRY_COLUMNS = 6


def _section_retries(stats: QueueStats, paint: _Paint) -> str:
    title = paint("3. Retries and failing types", "bold")
    present = sorted({b.retry_count for b in stats.retries if b.count})
    shown, tail = present, None
    if len(present) > _RETRY_COLUMNS:  # fold the long tail into one "R<k>+" column
        shown, tail = present[: _RETRY_COLUMNS - 1], present[_RETRY_COLUMNS - 1]
    keys: list[int] = shown + ([] if tail is None else [tail])
    headers = [f"R{c}" for c in shown] + ([] if tail is None else [f"R{tail}+"])
    window = human_seconds(stats.types[0].window_seconds) if stats.types else ""
    rows = []
    for health in stats.types:
        per_count = dict.fromkeys(keys, 0)
        for bucket in stats.retries:
            if bucket.type == health.type and bucket.count:
                key = bucket.retry_count if bucket.retry_count in per_count else tail
                per_count[key] += bucket.count  # type: ignore[index]
        rate = health.failure_rate_recent
        rows.append(
            [
                health.type,
                *per_count.values(),
                health.retrying,
                paint(str(health.failed_total), "red" if health.failed_total else None),
                health.failed_recent,
                health.succeeded_recent,
                paint(_percent(rate), "red" if rate else None),
            ]
        )
    if not rows:
        return f"{title}\n  no jobs"
    headers = [
        "TYPE",
        *headers,
        "RETRYING",
        "FAILED",
        f"FAILED {window}",
        f"OK {window}",
        f"FAIL RATE {window}",
    ]
    note = "  R<n>: unfinished or FAILED jobs by retry_count; RETRYING: unfinished with retries"
    return "\n".join([title, table(headers, rows, right=range(1, len(headers))), note])


def _section_errors(stats: QueueStats, paint: _Paint) -> str:
    title = paint(f"4. Top failure reasons (top {len(stats.errors)})", "bold")
    if not stats.errors:
        return f"{title}\n  no failures"
    rows = [
        [paint(e.error_code or "(none)", "red"), e.failed, e.retrying, e.total]
        for e in stats.errors
    ]
    return "\n".join(
        [title, table(["ERROR CODE", "FAILED", "RETRYING", "TOTAL"], rows, right=(1, 2, 3))]
    )


def _keep(days: int) -> str:
    return "forever" if days == KEEP_FOREVER else f"{days}d"


def _section_retention(stats: QueueStats, paint: _Paint) -> str:
    rows = [
        [
            paint.status(r.status),
            _keep(r.keep_days),
            r.jobs,
            human_seconds(r.oldest_age_seconds),
            paint(str(r.due_for_prune), "yellow" if r.due_for_prune else None),
        ]
        for r in stats.retention
    ]
    return "\n".join(
        [
            paint("5. Retention (sqlq prune deletes what is due, in batches)", "bold"),
            table(["STATUS", "KEEP", "JOBS", "OLDEST", "DUE"], rows, right=(2, 3, 4)),
        ]
    )


# ---------------------------------------------------------------------- prometheus


def _label(value: object) -> str:
    text = str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Exposition:
    """Collects samples grouped by metric, each with its HELP and TYPE lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(
        self, name: str, help_text: str, samples: Iterable[tuple[dict[str, Any], float | int]]
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} gauge")
        for labels, value in samples:
            rendered = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{rendered}}} {value}" if rendered else f"{name} {value}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render_stats_prometheus(stats: QueueStats) -> str:
    """Stats in the Prometheus text exposition format (all gauges)."""
    out = _Exposition()
    out.metric(
        "sqlq_jobs",
        "Jobs by queue and status.",
        (
            ({"queue": q, "status": s}, statuses.get(s, 0))
            for q, statuses in stats.counts.by_queue.items()
            for s in STATUS_ORDER
        ),
    )
    out.metric(
        "sqlq_jobs_by_type",
        "Jobs by type and status.",
        (
            ({"type": t, "status": s}, n)
            for t, statuses in stats.counts.by_type.items()
            for s, n in statuses.items()
        ),
    )
    out.metric(
        "sqlq_queue_latency_seconds",
        "Age of the oldest ready QUEUED job (now - run_at).",
        (({"queue": q.queue}, q.latency_seconds) for q in stats.latency),
    )
    out.metric(
        "sqlq_queue_ready_jobs",
        "QUEUED jobs whose run_at has come.",
        (({"queue": q.queue}, q.ready) for q in stats.latency),
    )
    oldest = stats.oldest_held[0].silent_seconds if stats.oldest_held else 0
    out.metric(
        "sqlq_oldest_in_progress_silent_seconds",
        "Seconds since the last heartbeat of the longest-silent CLAIMED/RUNNING job.",
        [({}, oldest)],
    )
    out.metric(
        "sqlq_expired_leases",
        "Held jobs whose lease expired and that the sweeper has not taken back yet.",
        [({}, stats.leases.expired)],
    )
    out.metric(
        "sqlq_past_deadline_jobs",
        "RUNNING jobs past their max runtime, not yet swept.",
        [({}, stats.leases.past_deadline)],
    )
    out.metric(
        "sqlq_retry_jobs",
        "Unfinished and FAILED jobs by type and retry_count.",
        (({"type": b.type, "retry_count": b.retry_count}, b.count) for b in stats.retries),
    )
    out.metric(
        "sqlq_failed_jobs_by_error_code",
        "FAILED jobs by error_code (top N).",
        (({"error_code": e.error_code or ""}, e.failed) for e in stats.errors),
    )
    out.metric(
        "sqlq_retrying_jobs_by_error_code",
        "Unfinished jobs whose last run failed, by error_code (top N).",
        (({"error_code": e.error_code or ""}, e.retrying) for e in stats.errors),
    )
    out.metric(
        "sqlq_finished_jobs",
        "Jobs finished within the window, by status.",
        (
            ({"window_seconds": t.window_seconds, "status": s}, n)
            for t in stats.throughput
            for s, n in (
                ("SUCCEEDED", t.succeeded),
                ("FAILED", t.failed),
                ("CANCELLED", t.cancelled),
            )
        ),
    )
    out.metric(
        "sqlq_failure_rate",
        "failed / (succeeded + failed) within the window (absent when nothing ran).",
        (
            ({"window_seconds": t.window_seconds}, round(t.failure_rate, 6))
            for t in stats.throughput
            if t.failure_rate is not None
        ),
    )
    out.metric(
        "sqlq_attempt_duration_seconds",
        "Attempt duration percentiles by type (jobs finished within the duration window).",
        (
            ({"type": d.type, "quantile": q}, v)
            for d in stats.durations
            for q, v in (("0.5", d.p50), ("0.95", d.p95), ("1", d.max))
        ),
    )
    out.metric(
        "sqlq_worker_last_seen_seconds",
        "Seconds since each registered worker was last seen.",
        (({"worker": w.id, "state": w.state.value}, w.seen_seconds_ago) for w in stats.workers),
    )
    out.metric(
        "sqlq_retention_due_jobs",
        "Finished jobs past their retention (what prune would delete).",
        (({"status": r.status}, r.due_for_prune) for r in stats.retention),
    )
    return out.text()


# ------------------------------------------------------------------------ timeline


def timeline_to_dict(timeline: JobTimeline) -> dict[str, Any]:
    """A job's timeline as JSON-ready data."""
    return dataclasses.asdict(timeline)


def render_timeline_json(timeline: JobTimeline) -> str:
    return to_json(timeline_to_dict(timeline))


def _detail_text(detail: Any, limit: int = 80) -> str:
    if detail is None:
        return ""
    if isinstance(detail, dict):
        text = " ".join(f"{k}={v}" for k, v in detail.items())
    else:
        text = str(detail)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _offset(ts: int | None, origin: int) -> str:
    if ts is None:
        return "-"
    return ("+" if ts >= origin else "") + human_seconds(ts - origin)


def render_timeline_text(timeline: JobTimeline, *, color: bool = False) -> str:
    """One job at a glance: its state, its attempts, then every event in order."""
    paint = _Paint(color)
    job, now = timeline.job, timeline.now
    origin = job.created_at
    payload = (
        json.dumps(job.payload, ensure_ascii=False, separators=(",", ":"))
        if not isinstance(job.payload, str)
        else job.payload
    )
    if len(payload) > 200:
        payload = payload[:199] + "…"
    max_runtime = "-" if job.max_runtime_seconds is None else f"{job.max_runtime_seconds}s"
    lines = [
        f"{paint(f'job {job.id}', 'bold')}  type={job.type}  queue={job.queue}  "
        f"status={paint.status(job.status)}  priority={job.priority}",
        f"  created {utc(job.created_at)} ({human_seconds(now - job.created_at)} ago)   "
        f"run_at {_offset(job.run_at, origin)}   started {_offset(job.started_at, origin)}   "
        f"finished {_offset(job.finished_at, origin)}",
        f"  attempts {job.attempt_count}   retries {job.retry_count}/{job.max_retries}   "
        f"max_runtime {max_runtime}",
        f"  payload {payload}",
    ]
    if job.payload_ref or job.result_ref:
        lines.append(f"  payload_ref {job.payload_ref or '-'}   result_ref {job.result_ref or '-'}")
    if job.dedupe_key:
        lines.append(f"  dedupe_key {job.dedupe_key}")
    if job.error_code:
        lines.append(
            f"  error {paint(job.error_code, 'red')}: {job.error_detail or ''}".rstrip(" :")
        )
    if timeline.worker_state is not None:
        state = paint.status(timeline.worker_state.value)
        seen = ""
        if timeline.worker is not None:
            w = timeline.worker
            seen = f", {w.hostname} pid {w.pid}, seen {human_seconds(w.seen_seconds_ago)} ago"
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
            f"  held by {job.claimed_by} ({state}{seen})   last heartbeat {heartbeat}   "
            f"lease {lease}"
        )
    parts = ["\n".join(lines)]
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


# ------------------------------------------------------------------ prune and upkeep


def prune_to_dict(result: PruneResult) -> dict[str, Any]:
    data = dataclasses.asdict(result)
    data["total_jobs"] = result.total_jobs
    return data


def render_prune_text(result: PruneResult) -> str:
    """What prune deleted (or would delete), per status, and whether it finished."""
    verb = "would delete" if result.dry_run else "deleted"
    rows = [
        [status, "kept forever" if cutoff is None else utc(cutoff), result.jobs.get(status, 0)]
        for status, cutoff in result.cutoffs.items()
    ]
    lines = [
        f"prune{' (dry run, nothing written)' if result.dry_run else ''}: {verb} "
        f"{result.total_jobs} job(s) with their attempts and events",
        table(["STATUS", "FINISHED BEFORE", "JOBS"], rows, right=(2,)),
        f"  heartbeat events {verb}: {result.heartbeat_events}   workers {verb}: {result.workers}",
    ]
    if not result.dry_run:
        lines.append(
            f"  {result.batches} batch(es); "
            + ("done" if result.complete else "stopped at --max-batches: run again to continue")
        )
    return "\n".join(lines)


def render_maintenance_text(results: Sequence[MaintenanceResult]) -> str:
    if not results:
        return "nothing to do: pass --checkpoint and/or --vacuum"
    lines = []
    for r in results:
        if r.statement is None:
            lines.append(f"{r.task}: skipped: {r.message}")
        else:
            output = f" -> {r.output}" if r.output else ""
            lines.append(f"{r.task}: {r.statement}{output}\n  {r.message}")
    return "\n".join(lines)
