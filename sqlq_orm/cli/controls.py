"""``sqlq queue pause|resume|list``: the operator's controls over whole queues.

Each is a plain function like the other commands (see :mod:`sqlq_orm.cli.commands`);
what it changes is stored in the database, so every worker on every machine obeys it.
"""

from __future__ import annotations

import json
from typing import Any

from sqlq_orm.cli.connect import open_queue
from sqlq_orm.ops.render.text import printable, table, utc

CLI_ACTOR = "cli"


def queue_pause(db: str | None, name: str, models: str | None = None) -> int:
    """Pause a queue: no worker starts its jobs until it is resumed (running jobs finish)."""
    changed = open_queue(db, models=models).pause_queue(name, actor=CLI_ACTOR)
    print(printable(f"paused queue {name}" if changed else f"queue {name} was already paused"))
    return 0


def queue_resume(db: str | None, name: str, models: str | None = None) -> int:
    """Resume a paused queue: its idle workers are woken at once."""
    changed = open_queue(db, models=models).resume_queue(name, actor=CLI_ACTOR)
    print(printable(f"resumed queue {name}" if changed else f"queue {name} was not paused"))
    return 0


def queue_list(db: str | None, output: str = "text", models: str | None = None) -> int:
    """List the queues (those with jobs, and those ever paused): paused or running, and
    their jobs waiting and in progress."""
    queue = open_queue(db, models=models, refuse_newer_schema=False)
    states = {state.name: state for state in queue.queue_states()}
    by_queue = queue.stats(top_n=1, stuck_limit=1).counts.by_queue
    rows: list[dict[str, Any]] = []
    for name in sorted(set(states) | set(by_queue)):
        state = states.get(name)
        counts = by_queue.get(name, {})
        rows.append(
            {
                "queue": name,
                "paused": bool(state and state.paused),
                "paused_at": state.paused_at if state else None,
                "changed_by": state.changed_by if state else None,
                "queued": counts.get("QUEUED", 0) + counts.get("WAITING", 0),
                "in_progress": counts.get("CLAIMED", 0) + counts.get("RUNNING", 0),
            }
        )
    if output == "json":
        print(json.dumps({"queues": rows}, indent=2))
        return 0
    if not rows:
        print("no queues yet (a queue exists once a job is enqueued into it or it is paused)")
        return 0
    print(
        table(
            ["QUEUE", "STATE", "SINCE", "BY", "QUEUED", "IN PROGRESS"],
            [
                [
                    row["queue"],
                    "paused" if row["paused"] else "running",
                    "" if row["paused_at"] is None else utc(row["paused_at"]),
                    row["changed_by"] if row["paused"] else "",
                    row["queued"],
                    row["in_progress"],
                ]
                for row in rows
            ],
            right=(4, 5),
        )
    )
    return 0
