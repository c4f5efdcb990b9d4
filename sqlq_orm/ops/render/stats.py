"""The stats report: the five questions on one screen, and the same data as JSON.

:func:`render_stats_text` answers them in sections (states, stuck jobs, retries,
failure reasons, retention); :func:`render_stats_json` gives everything
:class:`~sqlq_orm.ops.stats.views.QueueStats` holds, derived figures included.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlq_orm.core.docs import ERROR_CODES_PAGE
from sqlq_orm.ops.render.text import (
    STATUS_ORDER,
    Paint,
    Styled,
    human_seconds,
    percent,
    printable,
    table,
    to_json,
    utc,
)
from sqlq_orm.ops.retention import KEEP_FOREVER
from sqlq_orm.ops.stats.views import HeldJob, QueueStats, WorkerState


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


def render_stats_json(stats: QueueStats) -> str:
    """Stats as JSON text (see :func:`stats_to_dict`)."""
    return to_json(stats_to_dict(stats))


def render_stats_text(stats: QueueStats, *, color: bool = False) -> str:
    """The five questions on one screen: states, stuck jobs, retries, failures, retention."""
    paint = Paint(color)
    alive = sum(1 for w in stats.workers if w.state is WorkerState.ALIVE)
    header = (
        f"{paint('sqlq stats', 'bold')}  {utc(stats.now)}   {stats.counts.total} jobs   "
        f"workers: {alive} alive, {len(stats.workers) - alive} silent   "
        f"queue latency: {human_seconds(stats.oldest_ready_latency_seconds)}"
    )
    for worker in stats.workers:
        if worker.pool_kind != "thread":
            header += f"\n  pool of {printable(worker.id)}: {printable(worker.pool_summary)}"
    if stats.paused_queues:
        header += "\n" + paint(
            f"paused queues (no job of theirs starts): {', '.join(stats.paused_queues)}",
            "yellow",
        )
    if stats.rate_limits:
        limits = ", ".join(
            f"{name} {limit}/{period}s" for name, (limit, period) in stats.rate_limits.items()
        )
        header += "\n" + paint(
            f"rate-limited queues (starts per period, per rate key): {limits}", None
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


def _status_header(paint: Paint) -> list[str]:
    return [paint.status(s) for s in STATUS_ORDER]


def _section_counts(stats: QueueStats, paint: Paint) -> str:
    counts = stats.counts
    numeric = range(1, len(STATUS_ORDER) + 2)
    latency = {q.queue: q for q in stats.latency}
    paused = set(stats.paused_queues)
    queue_rows = []
    for name, statuses in counts.by_queue.items():
        shown = f"{name} (paused)" if name in paused else name
        if name in stats.rate_limits:
            limit, period = stats.rate_limits[name]
            shown += f" ({limit}/{period}s)"
        row: list[Any] = [
            shown,
            *(statuses.get(s, 0) for s in STATUS_ORDER),
            sum(statuses.values()),
        ]
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
        f"{t.cancelled} cancelled), failure rate {percent(t.failure_rate)}"
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


def _lease_text(job: HeldJob, now: int, paint: Paint) -> str:
    if job.lease_expires_at is None:
        return "-"
    if job.lease_expired:
        return paint(f"EXPIRED {human_seconds(now - job.lease_expires_at)} ago", "red")
    return f"{human_seconds(job.lease_expires_at - now)} left"


def _alert(paint: Paint, count: int) -> str:
    """A count that is red when it is not zero."""
    return paint(str(count), "red" if count else None)


def _section_held(stats: QueueStats, paint: Paint) -> str:
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
            seen = human_seconds(stats.now - job.worker_last_seen_at)
            state = Styled(f"{state} (seen {seen} ago)")
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
            f"{printable(w.id)} ({human_seconds(w.seen_seconds_ago)} ago, {w.held_jobs} job(s))"
            for w in silent
        )
        lines.append(f"  {paint('silent workers', 'red')}: {names}")
    return "\n".join(lines)


_RETRY_COLUMNS = 6


def _section_retries(stats: QueueStats, paint: Paint) -> str:
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
                paint(percent(rate), "red" if rate else None),
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


def _section_errors(stats: QueueStats, paint: Paint) -> str:
    title = paint(f"4. Top failure reasons (top {len(stats.errors)})", "bold")
    if not stats.errors:
        return f"{title}\n  no failures"
    rows = [
        [paint(e.error_code or "(none)", "red"), e.failed, e.retrying, e.total]
        for e in stats.errors
    ]
    headers = ["ERROR CODE", "FAILED", "RETRYING", "TOTAL"]
    note = f"  what each code means: {ERROR_CODES_PAGE}"
    return "\n".join([title, table(headers, rows, right=(1, 2, 3)), note])


def _keep(days: int) -> str:
    return "forever" if days == KEEP_FOREVER else f"{days}d"


def _section_retention(stats: QueueStats, paint: Paint) -> str:
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
