"""What ``sqlq prune`` and ``sqlq maintenance`` did (or would do), as text or JSON-ready data."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sqlq_orm.ops.render.text import table, utc
from sqlq_orm.ops.retention import MaintenanceResult, PruneResult


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
    if result.held_back_reason:
        lines.append(f"  {result.held_back_reason}")
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
