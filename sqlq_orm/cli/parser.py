"""The ``sqlq`` argument parser: it only maps the command line onto the command functions.

Each sub-command's ``command`` default is its function in :mod:`sqlq_orm.cli.commands`,
and every argument's ``dest`` names one of that function's parameters;
:func:`call_command` passes along exactly the parameters the function takes.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

from sqlq_orm.cli.commands import (
    cancel,
    check,
    dashboard,
    demo,
    enqueue,
    maintenance,
    migrate,
    prune,
    retry,
    schedules,
    show,
    stats,
    sweep,
    worker,
)
from sqlq_orm.cli.connect import DB_ENV_VAR, DEFAULT_DB_URL
from sqlq_orm.cli.controls import (
    jobs_cancel,
    jobs_discard,
    jobs_retry,
    queue_limit,
    queue_list,
    queue_pause,
    queue_resume,
    queue_unlimit,
    schedules_pause,
    schedules_resume,
    schedules_run,
)
from sqlq_orm.core import validation
from sqlq_orm.core.timing import MIN_LEASE_SECONDS
from sqlq_orm.ops.render.text import printable

INT32_MAX = validation.INT32_MAX


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, like every other error."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse drops OSError here; a reader gone away (``sqlq --help | head``) must
        # reach sqlq_orm.cli.main, which ends the command quietly.
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"sqlq: error: {printable(message)} (see `{self.prog} --help`)\n")


def job_id(text: str) -> int:
    """A job id: a whole number from 1 to :data:`~sqlq_orm.core.validation.MAX_JOB_ID`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= value <= validation.MAX_JOB_ID:
        raise argparse.ArgumentTypeError(
            f"job id {text} is out of range: job ids go from 1 to {validation.MAX_JOB_ID}"
        )
    return value


def whole_number(minimum: int, maximum: int = INT32_MAX) -> Callable[[str], int]:
    """An argument type: a whole number from ``minimum`` to ``maximum``.

    Every integer option has one, so a value the database cannot hold is refused by
    the parser, which names the option, instead of overflowing in the driver.
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {minimum} to {maximum}, got {text!r}"
            )
        return value

    return parse


_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?: <[^`]*>)?`")
"""A Sphinx role (``:data:`~x.NAME` ``): shown as its last dotted part."""


def _plain(text: str) -> str:
    """A docstring paragraph as help text: one line, no reStructuredText markup."""
    text = _ROLE.sub(lambda match: match.group(1).rsplit(".", 1)[-1], " ".join(text.split()))
    return text.replace("``", "").replace("%", "%%")


def command_help(function: Callable[..., int]) -> tuple[str, str]:
    """``(summary, description)`` from a command function's docstring: its first
    paragraph for the list of commands, all of it for the command's own ``--help``."""
    paragraphs = [_plain(p) for p in inspect.cleandoc(function.__doc__ or "").split("\n\n")]
    paragraphs = [p for p in paragraphs if p]
    return paragraphs[0], " ".join(paragraphs)


def parse_interval(text: str) -> float | tuple[float, float]:
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each sub-command's ``command`` default is its function."""
    common = Parser(add_help=False)
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"database URL (default: ${DB_ENV_VAR}, else {DEFAULT_DB_URL})",
    )
    common.add_argument(
        "--models",
        default=argparse.SUPPRESS,
        metavar="MODULE:NAME",
        help="the app's sqlq_orm.Models, when it bound the mixins to its own base and "
        "columns (default: $SQLQ_MODELS, else the library's models)",
    )
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log more (repeatable)"
    )
    parser = Parser(
        prog="sqlq",
        description="A job queue inside your application's database.",
        parents=[common],
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def add(name: str, function: Callable[..., int], **kwargs: Any) -> argparse.ArgumentParser:
        summary, description = command_help(function)
        sub = commands.add_parser(
            name, help=summary, description=description, parents=[common], **kwargs
        )
        sub.set_defaults(command=function)
        return sub

    add("migrate", migrate)

    p = add("enqueue", enqueue)
    p.add_argument("job_type", metavar="TYPE", help="job type (the handler's or task's name)")
    p.add_argument(
        "--payload", metavar="JSON",
        help="payload as JSON text (for a task: its arguments by name, {\"to\": \"a@b\"})",
    )  # fmt: skip
    p.add_argument(
        "--handlers", metavar="MODULE:REGISTRY",
        help="check the type is one this registry runs, and a task's arguments bind",
    )  # fmt: skip
    p.add_argument("--queue", default="default", help="queue name (default: default)")
    p.add_argument(
        "--priority",
        type=whole_number(validation.INT32_MIN),
        default=0,
        help="higher runs first (default 0)",
    )
    p.add_argument("--delay", type=float, metavar="SECONDS", help="do not run before this delay")
    p.add_argument(
        "--max-retries", type=whole_number(0), metavar="N", help="retries after a failure"
    )
    p.add_argument(
        "--max-runtime", type=whole_number(1), metavar="SECONDS", help="end the run after this"
    )
    p.add_argument("--dedupe-key", metavar="KEY", help="no second unfinished job with this key")
    p.add_argument("--payload-ref", metavar="REF", help="pointer to large input kept elsewhere")
    p.add_argument(
        "--concurrency-key", metavar="KEY",
        help="at most --concurrency-limit jobs with this key run at once",
    )  # fmt: skip
    p.add_argument(
        "--concurrency-limit", type=whole_number(1), metavar="N",
        help="how many jobs of --concurrency-key may run at once (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--depends-on", type=job_id, action="append", metavar="ID",
        help="wait until job ID has succeeded (repeat for several parents)",
    )  # fmt: skip
    p.add_argument(
        "--on-parent-failure", choices=["cancel", "run"], default="cancel",
        help="if a parent fails or is cancelled: cancel this job (default) or run it anyway",
    )  # fmt: skip

    p = add("worker", worker)
    p.add_argument(
        "--handlers", required=True, metavar="MODULE:REGISTRY",
        help="where the HandlerRegistry lives, e.g. myapp.jobs:registry; a TaskRegistry "
        "bound to a queue also gives the database and models (without --db, "
        "$SQLQ_DATABASE_URL, --models or $SQLQ_MODELS)",
    )  # fmt: skip
    p.add_argument(
        "--queue", dest="queues", action="append", metavar="NAME",
        help="queue to serve (repeatable; default: default)",
    )  # fmt: skip
    p.add_argument(
        "--concurrency", type=whole_number(1, 10_000), default=1, help="jobs at once (default 1)"
    )
    p.add_argument(
        "--prefetch",
        type=whole_number(0, 100_000),
        default=None,
        help="claimed jobs that may wait for a free thread, at most (default 100; "
        "only as many as the threads reach in 0.25 s at the handlers' pace)",
    )
    p.add_argument(
        "--lease",
        type=whole_number(MIN_LEASE_SECONDS),
        default=30,
        metavar="SECONDS",
        help=f"lease (default 30; at least {MIN_LEASE_SECONDS}: the clock counts whole seconds)",
    )
    p.add_argument("--heartbeat", type=float, metavar="SECONDS", help="default: lease / 3")
    p.add_argument(
        "--poll", type=float, default=1.0, metavar="SECONDS",
        help="longest idle wait; wake-ups end it sooner (1)",
    )  # fmt: skip
    p.add_argument(
        "--grace", type=float, default=30.0, metavar="SECONDS",
        help="on SIGTERM, time running jobs get to finish before release (default 30)",
    )  # fmt: skip
    p.add_argument(
        "--sweep-interval", type=parse_interval, default=(10.0, 30.0), metavar="SECONDS",
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
        "--interval", type=parse_interval, default=(10.0, 30.0), metavar="SECONDS",
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
    p.add_argument(
        "--top", type=whole_number(1, 1000), default=10, metavar="N", help="failure reasons (10)"
    )
    p.add_argument(
        "--worker-stale", type=whole_number(1), default=60, metavar="SECONDS",
        help="a worker not seen for this long is reported silent (default 60)",
    )  # fmt: skip

    for name, function in (("show", show), ("cancel", cancel), ("retry", retry)):
        p = add(name, function)
        p.add_argument("job_id", type=job_id, metavar="JOB_ID")
        if name == "cancel":
            p.add_argument("--reason", help="recorded on the CANCELLED event")
        if name == "retry":
            p.add_argument(
                "--with-dependents", action="store_true",
                help="also bring back the jobs cancelled because this one failed "
                "(DEPENDENCY:FAILED), each waiting for its parents",
            )  # fmt: skip
        if name == "show":
            add_output(p)
            p.add_argument(
                "--handlers", metavar="MODULE:REGISTRY",
                help="a task's job shows its arguments as named parameters, in the order "
                "of the task's signature in this registry",
            )  # fmt: skip

    p = add("check", check)
    p.add_argument(
        "--handlers", metavar="MODULE:REGISTRY",
        help="also list unfinished jobs this registry cannot run as stored: types with no "
        "handler or task, and task jobs whose arguments no longer bind to its signature",
    )  # fmt: skip
    add_output(p)

    p = add("schedules", schedules)
    p.add_argument(
        "--handlers", metavar="MODULE:REGISTRY",
        help="also show what this HandlerRegistry declares (registry.periodic)",
    )  # fmt: skip
    p.add_argument("--remove", metavar="NAME", help="delete a schedule no code declares any more")
    add_output(p)
    schedule_actions = p.add_subparsers(title="actions (default: list)", metavar="ACTION")
    for action, control in (
        ("run", schedules_run), ("pause", schedules_pause), ("resume", schedules_resume),
    ):  # fmt: skip
        summary, description = command_help(control)
        sub = schedule_actions.add_parser(
            action, help=summary, description=description, parents=[common]
        )
        sub.set_defaults(command=control)
        sub.add_argument("name", metavar="NAME", help="the schedule's name")
        if action == "run":
            sub.add_argument(
                "--handlers", metavar="MODULE:REGISTRY", required=True,
                help="the HandlerRegistry that declares the schedule (its payload)",
            )  # fmt: skip

    p = commands.add_parser(
        "queue", help="Pause, resume, rate-limit or list queues.", parents=[common],
        description="Pause, resume, rate-limit or list queues. A pause and a rate limit "
        "are stored in the database: every worker obeys them.",
    )  # fmt: skip
    actions = p.add_subparsers(title="actions", metavar="ACTION", required=True)
    summary, description = command_help(queue_limit)
    sub = actions.add_parser("limit", help=summary, description=description, parents=[common])
    sub.set_defaults(command=queue_limit)
    sub.add_argument("name", metavar="QUEUE", help="the queue's name")
    sub.add_argument(
        "--max", dest="max_starts", type=int, required=True, metavar="N",
        help="at most N job starts per period, per rate key (>= 1)",
    )  # fmt: skip
    sub.add_argument(
        "--per", dest="per_seconds", type=int, required=True, metavar="SECONDS",
        help="the period, in whole seconds (>= 1)",
    )  # fmt: skip
    for action, control in (
        ("pause", queue_pause), ("resume", queue_resume), ("unlimit", queue_unlimit),
    ):  # fmt: skip
        summary, description = command_help(control)
        sub = actions.add_parser(action, help=summary, description=description, parents=[common])
        sub.set_defaults(command=control)
        sub.add_argument("name", metavar="QUEUE", help="the queue's name")
    summary, description = command_help(queue_list)
    sub = actions.add_parser("list", help=summary, description=description, parents=[common])
    sub.set_defaults(command=queue_list)
    add_output(sub)

    p = commands.add_parser(
        "jobs", help="Cancel, retry or discard one job, or every job a filter matches.",
        parents=[common],
        description="Cancel, retry or discard one job (JOB_ID) or every job a filter "
        "matches. With a filter it is a dry run (it counts) unless --yes is given.",
    )  # fmt: skip
    job_actions = p.add_subparsers(title="actions", metavar="ACTION", required=True)
    for action, bulk in (("cancel", jobs_cancel), ("retry", jobs_retry), ("discard", jobs_discard)):
        summary, description = command_help(bulk)
        sub = job_actions.add_parser(
            action, help=summary, description=description, parents=[common]
        )
        sub.set_defaults(command=bulk)
        sub.add_argument("job_id", type=job_id, nargs="?", metavar="JOB_ID", help="one job")
        sub.add_argument("--queue", help="only jobs of this queue")
        sub.add_argument("--type", dest="job_type", metavar="TYPE", help="only jobs of this type")
        sub.add_argument("--status", help="only jobs in this status")
        sub.add_argument("--error-code", metavar="CODE", help="only jobs with this error_code")
        sub.add_argument(
            "--args", dest="args_contain", metavar="JSON",
            help='only jobs whose payload has these members, e.g. \'{"tenant": "acme"}\'',
        )  # fmt: skip
        sub.add_argument(
            "--concurrency-key", metavar="KEY", help="only jobs with this concurrency key",
        )  # fmt: skip
        sub.add_argument(
            "--columns", metavar="JSON",
            help='only jobs whose app columns (with --models) hold these values, e.g. '
            '\'{"tenant_id": 7}\'',
        )  # fmt: skip
        sub.add_argument("--yes", action="store_true", help="act (default: a dry run)")
        sub.add_argument(
            "--batch", type=whole_number(1, 100_000), default=500, metavar="N",
            help="jobs per batch (500)",
        )  # fmt: skip
        sub.add_argument(
            "--max-batches", type=whole_number(1), metavar="N",
            help="stop after N batches (run again to continue)",
        )  # fmt: skip
        if action == "cancel":
            sub.add_argument("--reason", help="recorded on each CANCELLED event")
        add_output(sub)

    p = add("prune", prune)
    p.add_argument("--dry-run", action="store_true", help="count what is due; delete nothing")
    p.add_argument(
        "--batch",
        type=whole_number(1, 1_000_000),
        default=5000,
        metavar="N",
        help="jobs per transaction (5000)",
    )
    p.add_argument(
        "--max-batches", type=whole_number(1), metavar="N",
        help="stop after N delete transactions (run again to continue)",
    )  # fmt: skip
    for option, default in (
        ("succeeded", 30), ("failed", 90), ("cancelled", 30), ("heartbeat", -1), ("worker", 7),
    ):  # fmt: skip
        what = {"heartbeat": "HEARTBEAT events", "worker": "workers not seen"}.get(
            option, f"{option.upper()} jobs"
        )
        p.add_argument(
            f"--{option}-days", type=whole_number(-1, 1_000_000), metavar="N",
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

    p = add("dashboard", dashboard)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=whole_number(1, 65535), default=8765, help="port (default 8765)")
    p.add_argument(
        "--enable-actions", action="store_true",
        help="allow retry and cancel from the browser (default: read-only)",
    )  # fmt: skip
    p.add_argument(
        "--authorize", metavar="MODULE:FUNCTION",
        help="function(request) -> bool asked on every request; required off loopback",
    )  # fmt: skip
    p.add_argument(
        "--refresh", type=whole_number(0, 86_400), default=5, metavar="SECONDS",
        help="pages refresh themselves this often; 0: never (default 5)",
    )  # fmt: skip
    p.add_argument(
        "--allowed-host", action="append", dest="allowed_hosts", metavar="NAME",
        help="a Host name the dashboard answers besides localhost, 127.0.0.1, ::1 and "
        "the --host address (repeatable; '.example.com' for a domain and its subdomains)",
    )  # fmt: skip

    p = add("demo", demo)
    p.add_argument("--path", metavar="DIR", help="directory for the demo database (default: temp)")
    p.add_argument(
        "--jobs", type=whole_number(2, 1_000_000), default=300, help="how many jobs (default 300)"
    )
    p.add_argument(
        "--workers", type=whole_number(1, 64), default=3, help="worker processes (default 3)"
    )
    return parser


def call_command(function: Callable[..., int], args: argparse.Namespace) -> int:
    """Call a command function with the parsed arguments named like its parameters."""
    values = vars(args)
    values.setdefault("db", None)  # --db is optional everywhere
    wanted = inspect.signature(function).parameters
    return function(**{name: values[name] for name in wanted if name in values})
