"""The ``sqlq`` commands: one plain function each, its parameters the command's options.

:mod:`sqlq_orm.cli.parser` maps the command line onto these (every argument's ``dest``
is a parameter name). To add an option: add the parameter to the function and the
argument to its sub-parser in :func:`~sqlq_orm.cli.parser.build_parser`. A command
returns its exit status; any error it raises is printed as one line by
:func:`sqlq_orm.cli.main`. ``sqlq worker`` exits 3 (:data:`EXIT_HANDLERS_STUCK`) when
stuck handler threads used up its budget: restart it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from sqlq_orm.cli.connect import (
    CommandError,
    database_url,
    migrate_schema,
    open_engine,
    open_queue,
    shown_url,
    worker_queue,
)
from sqlq_orm.ops.render.text import printable
from sqlq_orm.queue.types import SweepResult

EXIT_HANDLERS_STUCK = 3
"""``sqlq worker``'s exit status once abandoned handler threads spent its budget.

Python cannot kill a thread, so a worker whose stuck handlers hold its slots stops
(gracefully) and asks its supervisor, by this status, to start a fresh process.
"""


class _StopFlag:
    """Counts SIGTERM/SIGINT; the loops that poll it stop between steps."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt

    def __bool__(self) -> bool:
        return self.count > 0

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self)


# ----------------------------------------------------------------------- commands


def migrate(db: str | None) -> int:
    """Create or upgrade the sqlq tables."""
    engine = open_engine(db)
    summary = migrate_schema(engine)
    print(f"{shown_url(database_url(db))}: {summary}")
    return 0


def _check_against_registry(handlers: str, job_type: str, payload: Any) -> Any:
    """Refuse a type ``handlers`` does not run, or a task payload that does not bind;
    return the payload to store (a task's ``redact=`` names recorded in it)."""
    from sqlq_orm.tasks import TaskRegistry
    from sqlq_orm.worker.handlers import load_registry

    registry = load_registry(handlers)
    if job_type not in registry:
        known = ", ".join(registry.types) or "none"
        raise CommandError(f"{handlers} has no task or handler {job_type!r} (known: {known})")
    task = registry.get_task(job_type) if isinstance(registry, TaskRegistry) else None
    if task is not None:
        problem = task.signature.check_payload(payload)
        if problem is not None:
            raise CommandError(f"{problem}; nothing was written")
        return task.signature.marked(payload)
    return payload


def enqueue(
    db: str | None,
    job_type: str,
    payload: str | None = None,
    queue: str = "default",
    priority: int = 0,
    delay: float | None = None,
    max_retries: int | None = None,
    max_runtime: int | None = None,
    dedupe_key: str | None = None,
    payload_ref: str | None = None,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    models: str | None = None,
    depends_on: list[int] | None = None,
    on_parent_failure: str = "cancel",
    handlers: str | None = None,
) -> int:
    """Add one job; print its id. With ``--handlers``, the type must be one the registry
    runs, and a task's payload (its arguments by name) must bind to its signature."""
    decoded: Any = None
    if payload is not None:
        try:
            decoded = json.loads(payload)
        except ValueError as exc:
            raise CommandError(f"--payload is not valid JSON ({exc}): {payload[:80]!r}") from None
        except RecursionError:
            raise CommandError(
                f"--payload is nested too deeply to decode: {payload[:40]!r}...; "
                "payloads are small JSON documents"
            ) from None
    if handlers is not None:
        decoded = _check_against_registry(handlers, job_type, decoded)
    result = open_queue(db, models=models).enqueue(
        job_type,
        decoded,
        queue=queue,
        priority=priority,
        delay=delay,
        max_retries=max_retries,
        max_runtime_seconds=max_runtime,
        dedupe_key=dedupe_key,
        payload_ref=payload_ref,
        concurrency_key=concurrency_key,
        concurrency_limit=concurrency_limit,
        depends_on=depends_on,
        on_parent_failure=on_parent_failure,
    )
    suffix = "" if result.created else f" (already queued with dedupe key {dedupe_key!r})"
    print(f"{result.id}{suffix}")
    return 0


def worker(
    db: str | None,
    handlers: str,
    queues: Sequence[str] | None = None,
    concurrency: int = 1,
    prefetch: int | None = None,
    lease: int = 30,
    heartbeat: float | None = None,
    poll: float = 1.0,
    grace: float = 30.0,
    sweep_interval: float | tuple[float, float] | None = (10.0, 30.0),
    no_sweep: bool = False,
    worker_id: str | None = None,
    burst: bool = False,
    retry_base: float | None = None,
    models: str | None = None,
    pool: str = "thread",
    max_jobs_per_child: int | None = None,
    max_memory_per_child: int | None = None,
) -> int:
    """Run a worker until SIGTERM/SIGINT (or, with --burst, until the queue is empty).

    Exits with status 3 (:data:`EXIT_HANDLERS_STUCK`) when handlers stuck past their
    deadline used up the worker's budget of abandoned ones: restart it then.
    """
    from sqlq_orm.errors import HandlersStuck
    from sqlq_orm.worker.handlers import load_registry
    from sqlq_orm.worker.runtime import Worker

    registry = load_registry(handlers)
    # The claim loop, the completer, the heartbeat thread, the sweeper and a handler
    # that uses the queue may each hold a connection; pre-ping because a server or proxy
    # may close a connection that sat idle between heartbeats. Its waits on the network
    # fit in the lease, so a dead link is noticed before the lease runs out.
    queue = worker_queue(
        db,
        getattr(registry, "bound_queue", None),  # a TaskRegistry's: the app's engine, models
        models=models,
        retry_base=retry_base,
        pool_size=max(concurrency, 1) + 3,
        pool_pre_ping=True,
        worker_lease_seconds=lease,
    )
    try:
        Worker(
            queue,
            registry,
            queues=queues or ["default"],
            concurrency=concurrency,
            prefetch=prefetch,
            lease_seconds=lease,
            heartbeat_interval=heartbeat,
            poll_interval=poll,
            grace_period=grace,
            worker_id=worker_id,
            sweep_interval=None if no_sweep else sweep_interval,
            burst=burst,
            pool=pool,
            max_jobs_per_child=max_jobs_per_child,
            max_memory_per_child=max_memory_per_child,
        ).run()
    except HandlersStuck as exc:
        # The ERROR line naming the stuck jobs is in the log already.
        print(f"sqlq: error: {printable(str(exc))}", file=sys.stderr)
        # Leave now: the stuck threads and tasks are still running, and an interpreter
        # shutdown would destroy the tasks mid-await ("Task was destroyed but it is
        # pending", "coroutine ignored GeneratorExit") or wait on the threads.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(EXIT_HANDLERS_STUCK)
    return 0


def _print_sweep(result: SweepResult) -> None:
    print(
        f"swept: {result.expired} expired lease(s), {result.timed_out} past max runtime; "
        f"{result.requeued} requeued, {result.failed} failed",
        flush=True,
    )


def sweep(
    db: str | None,
    loop: bool = False,
    interval: float | tuple[float, float] = (10.0, 30.0),
    retry_base: float | None = None,
    models: str | None = None,
) -> int:
    """Recover expired leases and end jobs past their max runtime (once, or --loop)."""
    from sqlq_orm.worker.runtime import run_sweeper

    queue = open_queue(db, models=models, retry_base=retry_base)
    if not loop:
        _print_sweep(queue.sweep())
        return 0
    stop = _StopFlag()
    stop.install()

    def report(result: SweepResult) -> None:
        if result.total:
            _print_sweep(result)

    run_sweeper(queue, interval, should_stop=lambda: bool(stop), on_sweep=report)
    return 0


def _colour() -> bool:
    """Colour only for a terminal, and never when NO_COLOR is set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def stats(
    db: str | None,
    output: str = "text",
    watch: float | None = None,
    top: int = 10,
    worker_stale: int = 60,
    models: str | None = None,
) -> int:
    """Answer the five questions: states, stuck jobs, retries, failure reasons, retention."""
    from sqlq_orm.ops import render as report

    renderers = {
        "text": lambda s: report.render_stats_text(s, color=_colour()),
        "json": report.render_stats_json,
        "prometheus": report.render_stats_prometheus,
    }
    queue = open_queue(db, models=models, refuse_newer_schema=False)
    stop = _StopFlag()
    if watch is not None:
        if watch <= 0:
            raise CommandError(f"--watch needs a positive number of seconds, got {watch}")
        stop.install()
    while True:
        text = renderers[output](queue.stats(top_n=top, worker_stale_seconds=worker_stale))
        if watch is not None and output == "text" and sys.stdout.isatty():
            text = "\033[H\033[2J" + text  # home + clear: redraw in place
        print(text, flush=True)
        if watch is None:
            return 0
        deadline = time.monotonic() + watch
        while not stop and time.monotonic() < deadline:
            time.sleep(min(0.2, watch))
        if stop:
            return 0


def show(
    db: str | None,
    job_id: int,
    output: str = "text",
    models: str | None = None,
    handlers: str | None = None,
) -> int:
    """Show one job: its state, its attempts and its event timeline. With
    ``--handlers``, a task's job also shows its arguments as named parameters (in the
    task's signature order, defaults marked)."""
    from sqlq_orm.ops import render as report
    from sqlq_orm.ops.timeline import job_timeline

    timeline = job_timeline(open_queue(db, models=models, refuse_newer_schema=False), job_id)
    arguments = None if handlers is None else _task_arguments(handlers, timeline.job)
    if output == "json":
        data = report.timeline_to_dict(timeline)
        if arguments is not None:
            data["arguments"] = {name: value for name, value, _ in arguments}
        print(report.to_json(data))
    else:
        print(report.render_timeline_text(timeline, color=_colour(), arguments=arguments))
    return 0


def _task_arguments(handlers: str, job: Any) -> list[tuple[str, Any, bool]] | None:
    """The job's arguments by name if ``handlers`` has a task of its type, else None."""
    from sqlq_orm.worker.handlers import load_registry

    registry = load_registry(handlers)
    task = getattr(registry, "get_task", lambda _name: None)(job.type)
    if task is None:
        return None
    payload = job.payload
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return None
    named: list[tuple[str, Any, bool]] | None = task.signature.named_arguments(payload)
    return named


def cancel(
    db: str | None, job_id: int, reason: str | None = None, models: str | None = None
) -> int:
    """Cancel an unfinished job (a worker holding it loses its lease)."""
    open_queue(db, models=models).cancel(job_id, actor="cli", reason=reason)
    print(f"cancelled job {job_id}")
    return 0


def retry(
    db: str | None, job_id: int, with_dependents: bool = False, models: str | None = None
) -> int:
    """Requeue a FAILED or CANCELLED job now, with a fresh retry budget (WAITING if it
    still waits for parents); ``--with-dependents`` brings back the jobs cancelled
    because it failed."""
    queue = open_queue(db, models=models)
    retried = queue.retry(job_id, actor="cli", with_dependents=with_dependents)
    for retried_id in retried:
        status = queue.get_job(retried_id).status
        print(f"requeued job {retried_id}" + ("" if status == "QUEUED" else f" ({status})"))
    return 0


def check(
    db: str | None, output: str = "text", models: str | None = None, handlers: str | None = None
) -> int:
    """Check every queue invariant (read-only); exit 1 if any row breaks one. With
    ``--handlers``, also the unfinished jobs that registry cannot run as stored."""
    from sqlq_orm.ops.invariants import INVARIANTS
    from sqlq_orm.ops.invariants import check as find_violations
    from sqlq_orm.tasks.drift import find_drift
    from sqlq_orm.worker.handlers import load_registry

    registry = None if handlers is None else load_registry(handlers)
    queue = open_queue(db, models=models, refuse_newer_schema=False)
    violations = find_violations(queue)
    drift = [] if registry is None else find_drift(queue, registry)
    if output == "json":
        found = [
            {"invariant": v.invariant, "job_id": v.job_id, "detail": v.detail} for v in violations
        ]
        report: dict[str, Any] = {"ok": not violations and not drift, "violations": found}
        if registry is not None:
            report["drift"] = [
                {"type": d.type, "count": d.count, "problem": d.problem,
                 "examples": [{"job_id": i, "why": why} for i, why in d.examples]}
                for d in drift
            ]  # fmt: skip
        print(json.dumps(report, indent=2))
    else:
        for violation in violations:
            print(printable(str(violation)))
        if violations:
            print(f"{len(violations)} violation(s) of the queue's invariants")
        else:
            print(f"ok: all {len(INVARIANTS)} invariants hold")
        for item in drift:
            print(printable(str(item)))
        if registry is not None:
            stuck = sum(d.count for d in drift)
            print(
                f"{stuck} unfinished job(s) the handlers cannot run as stored"
                if drift
                else f"ok: every unfinished job fits {handlers}"
            )
    return 1 if violations or drift else 0


def schedules(
    db: str | None,
    handlers: str | None = None,
    remove: str | None = None,
    output: str = "text",
    models: str | None = None,
) -> int:
    """List recurring schedules with their last and next run (or --remove one)."""
    from sqlalchemy.exc import SQLAlchemyError

    from sqlq_orm.cli import schedules as listing
    from sqlq_orm.worker.handlers import load_registry

    declared = None if handlers is None else load_registry(handlers).schedules
    queue = open_queue(db, models=models, refuse_newer_schema=remove is not None)
    try:
        if remove is not None:
            if not queue.remove_schedule(remove):
                raise CommandError(f"no schedule named {remove!r} in the schedules table")
            print(f"removed schedule {remove!r}")
            return 0
        rows = queue.list_schedules()
        now = queue.context.read_now()
    except SQLAlchemyError as exc:
        raise CommandError(
            "cannot read the schedules table; is the schema at sqlq_0002 or later? run "
            f"`sqlq migrate` ({type(exc).__name__})"
        ) from None
    lines = listing.schedule_lines(rows, declared, now)
    print(listing.render_json(lines) if output == "json" else listing.render_text(lines, now))
    return 0


def prune(
    db: str | None,
    dry_run: bool = False,
    batch: int = 5000,
    max_batches: int | None = None,
    succeeded_days: int | None = None,
    failed_days: int | None = None,
    cancelled_days: int | None = None,
    heartbeat_days: int | None = None,
    worker_days: int | None = None,
    output: str = "text",
    models: str | None = None,
) -> int:
    """Delete finished jobs past their retention (with attempts and events), in batches."""
    from sqlq_orm.ops import render as report
    from sqlq_orm.ops.retention import RetentionPolicy

    policy = RetentionPolicy().with_days(
        succeeded_days=succeeded_days,
        failed_days=failed_days,
        cancelled_days=cancelled_days,
        heartbeat_event_days=heartbeat_days,
        worker_days=worker_days,
    )
    result = open_queue(db, models=models).prune(
        policy, batch_size=batch, max_batches=max_batches, dry_run=dry_run
    )
    if output == "json":
        print(report.to_json(report.prune_to_dict(result)))
    else:
        print(report.render_prune_text(result))
    return 0


def maintenance(
    db: str | None, checkpoint: bool = False, vacuum: bool = False, models: str | None = None
) -> int:
    """SQLite: checkpoint the WAL and/or VACUUM (off-peak); PostgreSQL: VACUUM (ANALYZE)."""
    from sqlq_orm.ops import render as report
    from sqlq_orm.ops.retention import run_maintenance

    if not (checkpoint or vacuum):
        raise CommandError("nothing to do: pass --checkpoint and/or --vacuum")
    # Upkeep does not read the schema.
    queue = open_queue(db, models=models, refuse_newer_schema=False)
    print(report.render_maintenance_text(
        run_maintenance(queue, checkpoint=checkpoint, vacuum=vacuum)
    ))  # fmt: skip
    return 0


def dashboard(
    db: str | None,
    host: str = "127.0.0.1",
    port: int = 8765,
    enable_actions: bool = False,
    authorize: str | None = None,
    refresh: int = 5,
    models: str | None = None,
    allowed_hosts: list[str] | None = None,
) -> int:
    """Serve the web dashboard (overview, jobs, workers, /metrics) until Ctrl-C."""
    try:
        from sqlq_orm.dashboard import create_app
        from sqlq_orm.dashboard.security import require_safe_bind
        from sqlq_orm.dashboard.serve import load_authorize, serve
    except ImportError as exc:
        raise CommandError(
            f"the dashboard needs its extra: pip install 'sqlq_orm[dashboard]' ({exc})"
        ) from None
    hook = load_authorize(authorize)
    require_safe_bind(host, hook)  # before touching the database
    # Read-only dashboards may look at a schema a newer sqlq_orm migrated; acting may not.
    queue = open_queue(db, models=models, refuse_newer_schema=enable_actions)
    # The names it answers to: loopback, the address it is bound to (unless that is
    # every address), and the operator's own.
    hosts = ["localhost", "127.0.0.1", "::1"]
    if host not in ("0.0.0.0", "::", ""):
        hosts.append(host)
    hosts.extend(allowed_hosts or [])
    app = create_app(
        queue,
        enable_actions=enable_actions,
        authorize=hook,
        refresh_seconds=refresh,
        allowed_hosts=hosts,
    )
    mode = "actions enabled" if enable_actions else "read-only"
    print(f"sqlq dashboard ({mode}) for {shown_url(database_url(db))}: http://{host}:{port}/")
    sys.stdout.flush()
    serve(app, host=host, port=port, authorize=hook)
    return 0


def demo(db: str | None = None, path: str | None = None, jobs: int = 300, workers: int = 3) -> int:
    """Run the self-contained demo (a fresh SQLite file, or ``--db`` with an empty
    queue); print its report."""
    from sqlq_orm.cli.demo import run_demo

    return run_demo(db=db, path=path, jobs=jobs, workers=workers)
