"""Stats in the Prometheus text exposition format, for scraping.

:func:`stats_gauges` lists every gauge (all metrics are gauges); :func:`render_stats_prometheus`
writes them as text for ``sqlq stats --format prometheus`` without a dependency, and the
dashboard's ``/metrics`` hands the same gauges to ``prometheus_client``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlq_orm.ops.render.text import STATUS_ORDER
from sqlq_orm.ops.stats.views import QueueStats


def _label(value: object) -> str:
    text = str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass(frozen=True)
class GaugeFamily:
    """One metric: its name, its HELP text and its samples (labels, value)."""

    name: str
    help: str
    samples: list[tuple[dict[str, str], float]]


class _Families:
    """Collects the gauges in the order they are declared."""

    def __init__(self) -> None:
        self.families: list[GaugeFamily] = []

    def metric(
        self, name: str, help_text: str, samples: Iterable[tuple[dict[str, Any], float | int]]
    ) -> None:
        self.families.append(
            GaugeFamily(
                name,
                help_text,
                [({k: str(v) for k, v in labels.items()}, value) for labels, value in samples],
            )
        )


def render_stats_prometheus(stats: QueueStats) -> str:
    """Stats in the Prometheus text exposition format (all gauges)."""
    lines: list[str] = []
    for family in stats_gauges(stats):
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} gauge")
        for labels, value in family.samples:
            rendered = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(
                f"{family.name}{{{rendered}}} {value}" if rendered else f"{family.name} {value}"
            )
    return "\n".join(lines) + "\n"


def stats_gauges(stats: QueueStats) -> list[GaugeFamily]:
    """Every gauge the stats give, for this renderer and for ``prometheus_client``."""
    out = _Families()
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
    out.metric(
        "sqlq_queue_paused",
        "1 for each queue an operator paused (no job of it starts until resumed).",
        (({"queue": name}, 1) for name in stats.paused_queues),
    )
    out.metric(
        "sqlq_queue_rate_limit",
        "Job starts a rate-limited queue allows per period, per rate key.",
        (({"queue": name}, limit) for name, (limit, _period) in stats.rate_limits.items()),
    )
    out.metric(
        "sqlq_queue_rate_period_seconds",
        "The period of a rate-limited queue's limit, in seconds.",
        (({"queue": name}, period) for name, (_limit, period) in stats.rate_limits.items()),
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
    pools = [w for w in stats.workers if w.pool and "children" in w.pool]
    for name, key, text in (
        ("sqlq_worker_pool_recycles", "recycles", "Children a process pool replaced (recycled)."),
        ("sqlq_worker_pool_crashes", "crashes", "Children of a process pool that died in a job."),
        ("sqlq_worker_pool_deadline_kills", "deadline_kills", "Children ended at max runtime."),
    ):
        out.metric(name, text, (({"worker": w.id}, int(w.pool[key])) for w in pools if w.pool))
    out.metric(
        "sqlq_worker_pool_children",
        "Live children of each worker's process pool.",
        (({"worker": w.id}, len(w.pool["children"])) for w in pools if w.pool),
    )
    out.metric(
        "sqlq_worker_pool_child_jobs",
        "Jobs each child of a process pool has run.",
        (
            ({"worker": w.id, "pid": str(child["pid"])}, int(child["jobs"]))
            for w in pools
            if w.pool
            for child in w.pool["children"]
        ),
    )
    out.metric(
        "sqlq_retention_due_jobs",
        "Finished jobs past their retention (what prune would delete).",
        (({"status": r.status}, r.due_for_prune) for r in stats.retention),
    )
    return out.families
