"""``sqlq queue pause|resume|limit|unlimit|list`` and ``sqlq jobs cancel|retry|discard``: the
operator's controls over whole queues and over jobs chosen by a filter.

Each is a plain function like the other commands (see :mod:`sqlq_orm.cli.commands`);
what it changes is stored in the database, so every worker on every machine obeys it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sqlq_orm.cli.connect import CommandError, open_queue
from sqlq_orm.ops.joblist import JobFilter
from sqlq_orm.ops.render.text import printable, table, utc
from sqlq_orm.queue.types import BulkResult

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


def queue_limit(
    db: str | None, name: str, max_starts: int, per_seconds: int, models: str | None = None
) -> int:
    """Rate-limit a queue: at most MAX job starts per SECONDS, per rate key, on every worker."""
    open_queue(db, models=models).set_rate_limit(name, max_starts, per_seconds, actor=CLI_ACTOR)
    print(printable(f"queue {name}: at most {max_starts} starts per {per_seconds} s per rate key"))
    return 0


def queue_unlimit(db: str | None, name: str, models: str | None = None) -> int:
    """Remove a queue's rate limit: its waiting jobs start as workers have room."""
    changed = open_queue(db, models=models).clear_rate_limit(name, actor=CLI_ACTOR)
    print(
        printable(
            f"removed the rate limit of queue {name}"
            if changed
            else f"queue {name} had no rate limit"
        )
    )
    return 0


def rate_text(limit: int | None, period: int | None) -> str:
    """A queue's rate limit as ``N/Ss`` (empty without one)."""
    return "" if limit is None else f"{limit}/{period}s"


def queue_list(db: str | None, output: str = "text", models: str | None = None) -> int:
    """List the queues (those with jobs, and those ever paused or rate-limited): paused
    or running, their rate limit, and their jobs waiting and in progress."""
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
                "rate_limit": state.rate_limit if state else None,
                "rate_period": state.rate_period if state else None,
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
            ["QUEUE", "STATE", "SINCE", "BY", "RATE LIMIT", "QUEUED", "IN PROGRESS"],
            [
                [
                    row["queue"],
                    "paused" if row["paused"] else "running",
                    "" if row["paused_at"] is None else utc(row["paused_at"]),
                    row["changed_by"] if row["paused"] else "",
                    rate_text(row["rate_limit"], row["rate_period"]),
                    row["queued"],
                    row["in_progress"],
                ]
                for row in rows
            ],
            right=(5, 6),
        )
    )
    return 0


def _filter(
    job_id: int | None,
    queue: str | None,
    job_type: str | None,
    status: str | None,
    error_code: str | None,
    args_contain: str | None = None,
    concurrency_key: str | None = None,
    columns: str | None = None,
) -> JobFilter:
    return JobFilter(
        status=None if status is None else status.upper(),
        queue=queue,
        type=job_type,
        error_code=error_code,
        job_id=job_id,
        args_contain=None if args_contain is None else _json_object("--args", args_contain),
        concurrency_key=concurrency_key,
        columns=None if columns is None else _json_object("--columns", columns),
    )


def _json_object(option: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandError(
            f'{option} must be a JSON object, e.g. \'{{"tenant": "acme"}}\' ({exc})'
        ) from None


def _jobs_action(
    action: str,
    db: str | None,
    job_id: int | None,
    queue: str | None,
    job_type: str | None,
    status: str | None,
    error_code: str | None,
    yes: bool,
    batch: int,
    max_batches: int | None,
    output: str,
    models: str | None,
    reason: str | None = None,
    args_contain: str | None = None,
    concurrency_key: str | None = None,
    columns: str | None = None,
) -> int:
    target = open_queue(db, models=models)
    job_filter = _filter(
        job_id, queue, job_type, status, error_code, args_contain, concurrency_key, columns
    )
    if job_filter.is_empty:
        raise CommandError(
            f"name the jobs to {action}: a JOB_ID, or a filter (--queue, --type, --status, "
            "--error-code, --args, --concurrency-key, --columns)"
        )
    single = job_id is not None and job_filter == JobFilter(job_id=job_id)
    if single:
        # One job named by id: act at once, as `sqlq cancel ID` does.
        assert job_id is not None
        dependents = 0
        if action == "cancel":
            target.cancel(job_id, actor=CLI_ACTOR, reason=reason)
        elif action == "retry":
            target.retry(job_id, actor=CLI_ACTOR)
        else:
            dependents = target.discard(job_id, actor=CLI_ACTOR)
        result = BulkResult(action, False, 1, 1, 0, dependents, 1, True)
    else:
        options: dict[str, Any] = {"batch_size": batch, "max_batches": max_batches}
        if action == "cancel":
            options["reason"] = reason
        result = getattr(target, f"{action}_jobs")(
            job_filter, actor=CLI_ACTOR, dry_run=not yes, **options
        )
    if output == "json":
        print(json.dumps(dataclasses.asdict(result), indent=2))
        return 0
    past = {"cancel": "cancelled", "retry": "requeued", "discard": "discarded"}[action]
    if result.dry_run:
        print(
            f"{result.matched} job(s) match; nothing done (dry run): run again with --yes "
            f"to {action} them"
        )
        return 0
    line = f"{past} {result.acted} job(s)"
    if result.skipped:
        line += f", {result.skipped} skipped (changed meanwhile)"
    if result.dependents:
        line += f", {result.dependents} dependent job(s) cancelled with them"
    if not result.complete:
        line += f"; stopped after {result.batches} batch(es), more match: run it again"
    print(line)
    return 0


def jobs_cancel(
    db: str | None,
    job_id: int | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    status: str | None = None,
    error_code: str | None = None,
    yes: bool = False,
    batch: int = 500,
    max_batches: int | None = None,
    output: str = "text",
    reason: str | None = None,
    models: str | None = None,
    args_contain: str | None = None,
    concurrency_key: str | None = None,
    columns: str | None = None,
) -> int:
    """Cancel one job, or every unfinished job a filter matches (a dry run without --yes)."""
    return _jobs_action(
        "cancel", db, job_id, queue, job_type, status, error_code, yes, batch, max_batches,
        output, models, reason, args_contain, concurrency_key, columns,
    )  # fmt: skip


def jobs_retry(
    db: str | None,
    job_id: int | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    status: str | None = None,
    error_code: str | None = None,
    yes: bool = False,
    batch: int = 500,
    max_batches: int | None = None,
    output: str = "text",
    models: str | None = None,
    args_contain: str | None = None,
    concurrency_key: str | None = None,
    columns: str | None = None,
) -> int:
    """Requeue one job, or every FAILED/CANCELLED job a filter matches (dry run without --yes)."""
    return _jobs_action(
        "retry", db, job_id, queue, job_type, status, error_code, yes, batch, max_batches,
        output, models, None, args_contain, concurrency_key, columns,
    )  # fmt: skip


def jobs_discard(
    db: str | None,
    job_id: int | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    status: str | None = None,
    error_code: str | None = None,
    yes: bool = False,
    batch: int = 500,
    max_batches: int | None = None,
    output: str = "text",
    models: str | None = None,
    args_contain: str | None = None,
    concurrency_key: str | None = None,
    columns: str | None = None,
) -> int:
    """Delete one job, or every job a filter matches that no worker holds, with their
    attempts and events (a dry run without --yes)."""
    return _jobs_action(
        "discard", db, job_id, queue, job_type, status, error_code, yes, batch, max_batches,
        output, models, None, args_contain, concurrency_key, columns,
    )  # fmt: skip


def schedules_pause(db: str | None, name: str, models: str | None = None) -> int:
    """Pause a recurring schedule: no scheduler fires it until it is resumed."""
    changed = open_queue(db, models=models).pause_schedule(name)
    print(
        printable(f"paused schedule {name}" if changed else f"schedule {name} was already paused")
    )
    return 0


def schedules_resume(db: str | None, name: str, models: str | None = None) -> int:
    """Resume a paused schedule from its first slot after now (the paused slots are skipped)."""
    changed = open_queue(db, models=models).resume_schedule(name)
    print(printable(f"resumed schedule {name}" if changed else f"schedule {name} was not paused"))
    return 0


def schedules_run(
    db: str | None, name: str, handlers: str | None = None, models: str | None = None
) -> int:
    """Enqueue one job of a schedule now, outside its slots (its payload comes from the
    code: --handlers names the registry that declares it)."""
    from sqlq_orm.worker.handlers import load_registry

    if handlers is None:
        raise CommandError(
            "sqlq schedules run needs --handlers module:registry: the schedule's payload "
            "and options are declared in code"
        )
    declared = {schedule.name: schedule for schedule in load_registry(handlers).schedules}
    schedule = declared.get(name)
    if schedule is None:
        raise CommandError(f"{handlers} declares no schedule named {name!r}")
    job = open_queue(db, models=models).run_schedule_now(schedule, actor=CLI_ACTOR)
    print(job.id)
    return 0
