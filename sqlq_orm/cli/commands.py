"""The ``sqlq`` command line (also ``python -m sqlq_orm``): a thin layer over the library.

Each command is one plain function below whose parameters are the command's options;
the parser only maps arguments onto them (every argument's ``dest`` is a parameter
name). To add an option: add the parameter to the function and the argument to its
sub-parser in :func:`build_parser`.

The database comes from ``--db URL``, else ``$SQLQ_DATABASE_URL``, else the SQLite file
``sqlq.db`` in the working directory. Any error prints one line to stderr and exits 1
(2 for a usage error). ``sqlq worker`` exits 3 (:data:`EXIT_HANDLERS_STUCK`) when stuck
handler threads used up its budget: restart it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import sqlalchemy
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

from sqlq_orm.core.backoff import RetryPolicy
from sqlq_orm.db.engine import create_engine
from sqlq_orm.errors import SqlqError
from sqlq_orm.queue.queue import Queue
from sqlq_orm.queue.types import SweepResult

DEFAULT_DB_URL = "sqlite:///sqlq.db"
DB_ENV_VAR = "SQLQ_DATABASE_URL"
EXIT_HANDLERS_STUCK = 3
"""``sqlq worker``'s exit status once abandoned handler threads spent its budget.

Python cannot kill a thread, so a worker whose stuck handlers hold its slots stops
(gracefully) and asks its supervisor, by this status, to start a fresh process.
"""

log = logging.getLogger("sqlq_orm.cli")


class CommandError(SqlqError):
    """A command could not do what was asked; the message is shown as is."""


# ----------------------------------------------------------------------- plumbing


def database_url(db: str | None) -> str:
    """The URL to use: ``--db``, else ``$SQLQ_DATABASE_URL``, else ``sqlq.db`` here."""
    return db or os.environ.get(DB_ENV_VAR) or DEFAULT_DB_URL


def _shown(url: str) -> str:
    try:
        return sqlalchemy.make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def open_engine(db: str | None, **kwargs: Any) -> Engine:
    """An engine for the chosen database, with a clear error for a bad URL."""
    url = database_url(db)
    try:
        return create_engine(url, **kwargs)
    except NoSuchModuleError:
        raise CommandError(
            f"unsupported database URL {_shown(url)}: sqlq_orm supports sqlite:// and "
            "postgresql:// (install sqlq_orm[postgres] for PostgreSQL)"
        ) from None
    except ArgumentError as exc:
        raise CommandError(
            f"invalid database URL {url!r} ({exc}); expected e.g. sqlite:///sqlq.db or "
            "postgresql://user@host/dbname"
        ) from None


def migrate_schema(engine: Engine) -> str:
    """Bring the schema to the newest revision with the packaged Alembic migrations."""
    from sqlq_orm.migrate import current, upgrade

    upgrade(engine)
    return f"schema at revision {', '.join(sorted(current(engine)))} (newest)"


def open_queue(db: str | None, *, retry_base: float | None = None, **engine_kwargs: Any) -> Queue:
    """A :class:`Queue` on the chosen database, after checking its tables exist."""
    engine = open_engine(db, **engine_kwargs)
    retry_policy = None
    if retry_base is not None:
        retry_policy = RetryPolicy(base_seconds=retry_base, max_seconds=max(retry_base, 3600.0))
    queue = Queue(engine, retry_policy=retry_policy)
    jobs_table = queue.tables.jobs
    with queue.read() as connection:
        exists = sqlalchemy.inspect(connection).has_table(jobs_table.name, schema=jobs_table.schema)
    if not exists:
        raise CommandError(
            f"the database {_shown(database_url(db))} has no {jobs_table.name} table; "
            "run `sqlq migrate` first"
        )
    return queue


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


def _parse_interval(text: str) -> float | tuple[float, float]:
    """``"10-30"`` (a range to draw from) or ``"5"`` (seconds)."""
    low, sep, high = text.partition("-")
    try:
        if sep:
            return (float(low), float(high))
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds like 5 or a range like 10-30, got {text!r}"
        ) from None


# ----------------------------------------------------------------------- commands


def migrate(db: str | None) -> int:
    """Create or upgrade the sqlq tables."""
    engine = open_engine(db)
    summary = migrate_schema(engine)
    print(f"{_shown(database_url(db))}: {summary}")
    return 0


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
) -> int:
    """Add one job; print its id."""
    decoded: Any = None
    if payload is not None:
        try:
            decoded = json.loads(payload)
        except ValueError as exc:
            raise CommandError(f"--payload is not valid JSON ({exc}): {payload[:80]!r}") from None
    result = open_queue(db).enqueue(
        job_type,
        decoded,
        queue=queue,
        priority=priority,
        delay=delay,
        max_retries=max_retries,
        max_runtime_seconds=max_runtime,
        dedupe_key=dedupe_key,
        payload_ref=payload_ref,
    )
    suffix = "" if result.created else f" (already queued with dedupe key {dedupe_key!r})"
    print(f"{result.id}{suffix}")
    return 0


def worker(
    db: str | None,
    handlers: str,
    queues: Sequence[str] | None = None,
    concurrency: int = 1,
    lease: int = 30,
    heartbeat: float | None = None,
    poll: float = 1.0,
    grace: float = 30.0,
    sweep_interval: float | tuple[float, float] | None = (10.0, 30.0),
    no_sweep: bool = False,
    worker_id: str | None = None,
    burst: bool = False,
    retry_base: float | None = None,
) -> int:
    """Run a worker until SIGTERM/SIGINT (or, with --burst, until the queue is empty).

    Exits 3 if stuck handler threads spent the worker's budget (restart it).
    """
    from sqlq_orm.errors import HandlersStuck
    from sqlq_orm.worker.handlers import load_registry
    from sqlq_orm.worker.runtime import Worker

    registry = load_registry(handlers)
    # Job threads, the heartbeat thread and the claim loop each may hold a connection.
    queue = open_queue(
        db, retry_base=retry_base, pool_size=max(concurrency, 1) + 3, pool_pre_ping=True
    )
    try:
        Worker(
            queue,
            registry,
            queues=queues or ["default"],
            concurrency=concurrency,
            lease_seconds=lease,
            heartbeat_interval=heartbeat,
            poll_interval=poll,
            grace_period=grace,
            worker_id=worker_id,
            sweep_interval=None if no_sweep else sweep_interval,
            burst=burst,
        ).run()
    except HandlersStuck as exc:
        # The ERROR line naming the stuck jobs is in the log already.
        print(f"sqlq: error: {exc}", file=sys.stderr)
        return EXIT_HANDLERS_STUCK
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
) -> int:
    """Recover expired leases and end jobs past their max runtime (once, or --loop)."""
    from sqlq_orm.worker.runtime import run_sweeper

    queue = open_queue(db, retry_base=retry_base)
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
) -> int:
    """Answer the five questions: states, stuck jobs, retries, failure reasons, retention."""
    from sqlq_orm.ops.render import stats_text as report

    renderers = {
        "text": lambda s: report.render_stats_text(s, color=_colour()),
        "json": report.render_stats_json,
        "prometheus": report.render_stats_prometheus,
    }
    queue = open_queue(db)
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


def show(db: str | None, job_id: int, output: str = "text") -> int:
    """Show one job: its state, its attempts and its event timeline."""
    from sqlq_orm.ops.render import stats_text as report
    from sqlq_orm.ops.stats import collect as observability

    timeline = observability.job_timeline(open_queue(db), job_id)
    if output == "json":
        print(report.render_timeline_json(timeline))
    else:
        print(report.render_timeline_text(timeline, color=_colour()))
    return 0


def cancel(db: str | None, job_id: int, reason: str | None = None) -> int:
    """Cancel an unfinished job (a worker holding it loses its lease)."""
    open_queue(db).cancel(job_id, actor="cli", reason=reason)
    print(f"cancelled job {job_id}")
    return 0


def retry(db: str | None, job_id: int) -> int:
    """Requeue a FAILED or CANCELLED job now, with a fresh retry budget."""
    open_queue(db).retry(job_id, actor="cli")
    print(f"requeued job {job_id}")
    return 0


def check(db: str | None, output: str = "text") -> int:
    """Check every queue invariant (read-only); exit 1 if any row breaks one."""
    from sqlq_orm.ops.invariants import INVARIANTS
    from sqlq_orm.ops.invariants import check as find_violations

    violations = find_violations(open_queue(db))
    if output == "json":
        found = [
            {"invariant": v.invariant, "job_id": v.job_id, "detail": v.detail} for v in violations
        ]
        print(json.dumps({"ok": not violations, "violations": found}, indent=2))
    else:
        for violation in violations:
            print(violation)
        if violations:
            print(f"{len(violations)} violation(s) of the queue's invariants")
        else:
            print(f"ok: all {len(INVARIANTS)} invariants hold")
    return 1 if violations else 0


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
) -> int:
    """Delete finished jobs past their retention (with attempts and events), in batches."""
    from sqlq_orm.ops.render import stats_text as report
    from sqlq_orm.ops.retention import RetentionPolicy

    policy = RetentionPolicy().with_days(
        succeeded_days=succeeded_days,
        failed_days=failed_days,
        cancelled_days=cancelled_days,
        heartbeat_event_days=heartbeat_days,
        worker_days=worker_days,
    )
    result = open_queue(db).prune(
        policy, batch_size=batch, max_batches=max_batches, dry_run=dry_run
    )
    if output == "json":
        print(report.to_json(report.prune_to_dict(result)))
    else:
        print(report.render_prune_text(result))
    return 0


def maintenance(db: str | None, checkpoint: bool = False, vacuum: bool = False) -> int:
    """SQLite: checkpoint the WAL and/or VACUUM (off-peak); PostgreSQL: VACUUM (ANALYZE)."""
    from sqlq_orm.ops.render import stats_text as report
    from sqlq_orm.ops.retention import run_maintenance

    if not (checkpoint or vacuum):
        raise CommandError("nothing to do: pass --checkpoint and/or --vacuum")
    print(report.render_maintenance_text(
        run_maintenance(open_queue(db), checkpoint=checkpoint, vacuum=vacuum)
    ))  # fmt: skip
    return 0


def demo(path: str | None = None, jobs: int = 300, workers: int = 3) -> int:
    """Run the self-contained demo on a fresh SQLite file; print its report."""
    from sqlq_orm.cli.demo import run_demo

    return run_demo(path=path, jobs=jobs, workers=workers)


# ------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each sub-command's ``command`` default is its function."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"database URL (default: ${DB_ENV_VAR}, else {DEFAULT_DB_URL})",
    )
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log more (repeatable)"
    )
    parser = argparse.ArgumentParser(
        prog="sqlq",
        description="A job queue inside your application's database.",
        parents=[common],
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def add(name: str, function: Callable[..., int], **kwargs: Any) -> argparse.ArgumentParser:
        doc = (function.__doc__ or "").strip().splitlines()[0]
        sub = commands.add_parser(name, help=doc, description=doc, parents=[common], **kwargs)
        sub.set_defaults(command=function)
        return sub

    add("migrate", migrate)

    p = add("enqueue", enqueue)
    p.add_argument("job_type", metavar="TYPE", help="job type (the handler's name)")
    p.add_argument("--payload", metavar="JSON", help="payload as JSON text")
    p.add_argument("--queue", default="default", help="queue name (default: default)")
    p.add_argument("--priority", type=int, default=0, help="higher runs first (default 0)")
    p.add_argument("--delay", type=float, metavar="SECONDS", help="do not run before this delay")
    p.add_argument("--max-retries", type=int, metavar="N", help="retries after a failure")
    p.add_argument("--max-runtime", type=int, metavar="SECONDS", help="end the run after this")
    p.add_argument("--dedupe-key", metavar="KEY", help="no second unfinished job with this key")
    p.add_argument("--payload-ref", metavar="REF", help="pointer to large input kept elsewhere")

    p = add("worker", worker)
    p.add_argument(
        "--handlers", required=True, metavar="MODULE:REGISTRY",
        help="where the HandlerRegistry lives, e.g. myapp.jobs:registry",
    )  # fmt: skip
    p.add_argument(
        "--queue", dest="queues", action="append", metavar="NAME",
        help="queue to serve (repeatable; default: default)",
    )  # fmt: skip
    p.add_argument("--concurrency", type=int, default=1, help="jobs at once (default 1)")
    p.add_argument("--lease", type=int, default=30, metavar="SECONDS", help="lease (default 30)")
    p.add_argument("--heartbeat", type=float, metavar="SECONDS", help="default: lease / 3")
    p.add_argument("--poll", type=float, default=1.0, metavar="SECONDS", help="idle poll (1)")
    p.add_argument(
        "--grace", type=float, default=30.0, metavar="SECONDS",
        help="on SIGTERM, time running jobs get to finish before release (default 30)",
    )  # fmt: skip
    p.add_argument(
        "--sweep-interval", type=_parse_interval, default=(10.0, 30.0), metavar="SECONDS",
        help="in-worker sweeper interval, e.g. 5 or 10-30 (default 10-30, jittered)",
    )  # fmt: skip
    p.add_argument("--no-sweep", action="store_true", help="do not run the sweeper here")
    p.add_argument("--worker-id", metavar="ID", help="default: hostname:pid:random")
    p.add_argument("--burst", action="store_true", help="exit once nothing is left to do")
    p.add_argument(
        "--retry-base", type=float, metavar="SECONDS",
        help="first retry delay for failures this worker records (default 10, doubling)",
    )  # fmt: skip

    p = add("sweep", sweep)
    p.add_argument("--loop", action="store_true", help="keep sweeping until SIGTERM/SIGINT")
    p.add_argument(
        "--interval", type=_parse_interval, default=(10.0, 30.0), metavar="SECONDS",
        help="with --loop: seconds between sweeps, e.g. 15 or 10-30 (default 10-30)",
    )  # fmt: skip
    p.add_argument("--retry-base", type=float, metavar="SECONDS", help="first retry delay")

    def add_output(sub: argparse.ArgumentParser, *formats: str) -> None:
        sub.add_argument(
            "--json", dest="output", action="store_const", const="json", default="text",
            help="print JSON for machines",
        )  # fmt: skip
        if formats:
            sub.add_argument(
                "--format", dest="output", choices=["text", "json", *formats],
                help="output format (default: text)",
            )  # fmt: skip

    p = add("stats", stats)
    add_output(p, "prometheus")
    p.add_argument(
        "--watch", type=float, metavar="SECONDS", help="redraw every SECONDS until Ctrl-C"
    )
    p.add_argument("--top", type=int, default=10, metavar="N", help="failure reasons (10)")
    p.add_argument(
        "--worker-stale", type=int, default=60, metavar="SECONDS",
        help="a worker not seen for this long is reported silent (default 60)",
    )  # fmt: skip

    for name, function in (("show", show), ("cancel", cancel), ("retry", retry)):
        p = add(name, function)
        p.add_argument("job_id", type=int, metavar="JOB_ID")
        if name == "cancel":
            p.add_argument("--reason", help="recorded on the CANCELLED event")
        if name == "show":
            add_output(p)

    p = add("check", check)
    add_output(p)

    p = add("prune", prune)
    p.add_argument("--dry-run", action="store_true", help="count what is due; delete nothing")
    p.add_argument(
        "--batch", type=int, default=5000, metavar="N", help="jobs per transaction (5000)"
    )
    p.add_argument(
        "--max-batches", type=int, metavar="N",
        help="stop after N delete transactions (run again to continue)",
    )  # fmt: skip
    for option, default in (
        ("succeeded", 30), ("failed", 90), ("cancelled", 30), ("heartbeat", -1), ("worker", 7),
    ):  # fmt: skip
        what = {"heartbeat": "HEARTBEAT events", "worker": "workers not seen"}.get(
            option, f"{option.upper()} jobs"
        )
        p.add_argument(
            f"--{option}-days", type=int, metavar="N",
            help=f"keep {what} N days; -1 keeps forever (default {default})",
        )  # fmt: skip
    add_output(p)

    p = add("maintenance", maintenance)
    p.add_argument(
        "--checkpoint", action="store_true",
        help="SQLite: PRAGMA wal_checkpoint(TRUNCATE) (copy the WAL back, truncate it)",
    )  # fmt: skip
    p.add_argument(
        "--vacuum", action="store_true",
        help="SQLite: VACUUM, rewrites the file (exclusive lock: off-peak only); "
        "PostgreSQL: VACUUM (ANALYZE) of the queue tables",
    )  # fmt: skip

    p = add("demo", demo)
    p.add_argument("--path", metavar="DIR", help="directory for the demo database (default: temp)")
    p.add_argument("--jobs", type=int, default=300, help="how many jobs (default 300)")
    p.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    return parser


def _call(function: Callable[..., int], args: argparse.Namespace) -> int:
    """Call a command function with the parsed arguments named like its parameters."""
    values = vars(args)
    values.setdefault("db", None)  # --db is optional everywhere
    wanted = inspect.signature(function).parameters
    return function(**{name: values[name] for name in wanted if name in values})


def _describe(exc: BaseException, db: str | None) -> str:
    if isinstance(exc, SqlqError):
        return str(exc)
    first_line = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]
    if isinstance(exc, OperationalError):
        return f"cannot use the database {_shown(database_url(db))}: {first_line}"
    return f"database error: {first_line}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sqlq``; returns the exit status."""
    args = build_parser().parse_args(argv)
    verbosity = getattr(args, "verbose", 0) or 0
    level = logging.WARNING
    if verbosity or args.command is worker:  # a worker's log is its activity record
        level = logging.DEBUG if verbosity > 1 else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    db = getattr(args, "db", None)
    try:
        return _call(args.command, args)
    except (SqlqError, SQLAlchemyError) as exc:
        log.debug("the full error", exc_info=exc)  # shown with -vv
        print(f"sqlq: error: {_describe(exc, db)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
