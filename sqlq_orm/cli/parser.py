"""The ``sqlq`` argument parser: it only maps the command line onto the command functions.

Each sub-command's ``command`` default is a :class:`Command`: its function named, not
imported, with its help text; every argument's ``dest`` names one of that function's
parameters. :func:`call_command` imports the one command chosen and passes along
exactly the parameters its function takes. So ``sqlq --help`` and each command load
only what they use (``tests/unit/test_startup_imports.py`` checks).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

from sqlq_orm.cli.connect import DB_ENV_VAR, DEFAULT_DB_URL
from sqlq_orm.core import validation
from sqlq_orm.core.timing import MIN_LEASE_SECONDS

INT32_MAX = validation.INT32_MAX


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, like every other error."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse drops OSError here; a reader gone away (``sqlq --help | head``) must
        # reach sqlq_orm.cli.main, which ends the command quietly.
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        from sqlq_orm.ops.render.text import printable

        self.exit(2, f"sqlq: error: {printable(message)} (see `{self.prog} --help`)\n")


@dataclass(frozen=True)
class Command:
    """A command function by name, with its help: building the parser imports no command.

    ``doc`` is the function's docstring, word for word (a unit test keeps the two
    equal): its first paragraph is the summary in the list of commands, all of it the
    command's own ``--help``. :meth:`load` imports the function when the command runs.
    """

    module: str
    function: str
    doc: str

    def load(self) -> Callable[..., int]:
        """The command's function (its module imported now)."""
        found: Callable[..., int] = getattr(importlib.import_module(self.module), self.function)
        return found


def _command(function: str, doc: str, module: str = "sqlq_orm.cli.commands") -> Command:
    return Command(module, function, inspect.cleandoc(doc))


def _control(function: str, doc: str) -> Command:
    return _command(function, doc, "sqlq_orm.cli.controls")


COMMANDS: dict[str, Command] = {
    "migrate": _command("migrate", "Create or upgrade the sqlq tables."),
    "enqueue": _command(
        "enqueue",
        """Add one job; print its id. With ``--handlers``, the type must be one the registry
        runs, and a task's payload (its arguments by name) must bind to its signature.""",
    ),
    "worker": _command(
        "worker",
        """Run a worker until SIGTERM/SIGINT (or, with --burst, until the queue is empty).

        Exits with status 3 (:data:`EXIT_HANDLERS_STUCK`) when handlers stuck past their
        deadline used up the worker's budget of abandoned ones: restart it then.""",
    ),
    "sweep": _command(
        "sweep",
        "Recover expired leases and end jobs past their max runtime (once, or --loop).",
    ),
    "stats": _command(
        "stats",
        "Answer the five questions: states, stuck jobs, retries, failure reasons, retention.",
    ),
    "show": _command(
        "show",
        """Show one job: its state, its attempts and its event timeline. With
        ``--handlers``, a task's job also shows its arguments as named parameters (in the
        task's signature order, defaults marked).""",
    ),
    "cancel": _command("cancel", "Cancel an unfinished job (a worker holding it loses its lease)."),
    "retry": _command(
        "retry",
        """Requeue a FAILED or CANCELLED job now, with a fresh retry budget (WAITING if it
        still waits for parents); ``--with-dependents`` brings back the jobs cancelled
        because it failed.""",
    ),
    "check": _command(
        "check",
        """Check every queue invariant (read-only); exit 1 if any row breaks one. With
        ``--handlers``, also the unfinished jobs that registry cannot run as stored.""",
    ),
    "schedules": _command(
        "schedules",
        "List recurring schedules with their last and next run (or --remove one).",
    ),
    "prune": _command(
        "prune",
        "Delete finished jobs past their retention (with attempts and events), in batches.",
    ),
    "maintenance": _command(
        "maintenance",
        "SQLite: checkpoint the WAL and/or VACUUM (off-peak); PostgreSQL: VACUUM (ANALYZE).",
    ),
    "dashboard": _command(
        "dashboard",
        "Serve the web dashboard (overview, jobs, workers, /metrics) until Ctrl-C.",
    ),
    "demo": _command(
        "demo",
        """Run the self-contained demo (a fresh SQLite file, or ``--db`` with an empty
        queue); print its report.""",
    ),
    "schedules run": _control(
        "schedules_run",
        """Enqueue one job of a schedule now, outside its slots (its payload comes from the
        code: --handlers names the registry that declares it).""",
    ),
    "schedules pause": _control(
        "schedules_pause",
        "Pause a recurring schedule: no scheduler fires it until it is resumed.",
    ),
    "schedules resume": _control(
        "schedules_resume",
        "Resume a paused schedule from its first slot after now (the paused slots are skipped).",
    ),
    "queue limit": _control(
        "queue_limit",
        "Rate-limit a queue: at most MAX job starts per SECONDS, per rate key, on every worker.",
    ),
    "queue pause": _control(
        "queue_pause",
        "Pause a queue: no worker starts its jobs until it is resumed (running jobs finish).",
    ),
    "queue resume": _control(
        "queue_resume", "Resume a paused queue: its idle workers are woken at once."
    ),
    "queue unlimit": _control(
        "queue_unlimit", "Remove a queue's rate limit: its waiting jobs start as workers have room."
    ),
    "queue list": _control(
        "queue_list",
        """List the queues (those with jobs, and those ever paused or rate-limited): paused
        or running, their rate limit, and their jobs waiting and in progress.""",
    ),
    "jobs cancel": _control(
        "jobs_cancel",
        "Cancel one job, or every unfinished job a filter matches (a dry run without --yes).",
    ),
    "jobs retry": _control(
        "jobs_retry",
        "Requeue one job, or every FAILED/CANCELLED job a filter matches (dry run without --yes).",
    ),
    "jobs discard": _control(
        "jobs_discard",
        """Delete one job, or every job a filter matches that no worker holds, with their
        attempts and events (a dry run without --yes).""",
    ),
}
"""Every command by its words on the command line (``"queue pause"``)."""


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


def command_help(command: Command) -> tuple[str, str]:
    """``(summary, description)`` from a command's docstring: its first paragraph for
    the list of commands, all of it for the command's own ``--help``."""
    paragraphs = [_plain(p) for p in command.doc.split("\n\n")]
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

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        command = COMMANDS[name]
        summary, description = command_help(command)
        sub = commands.add_parser(
            name, help=summary, description=description, parents=[common], **kwargs
        )
        sub.set_defaults(command=command)
        return sub

    add("migrate")

    p = add("enqueue")
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

    p = add("worker")
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
    p.add_argument(
        "--pool", choices=["thread", "process"], default="thread",
        help="run jobs on threads (default) or in child processes, one job each: a job "
        "that crashes, spins past its max runtime or eats memory harms only itself",
    )  # fmt: skip
    p.add_argument(
        "--max-jobs-per-child", type=whole_number(1), metavar="N",
        help="with --pool process: replace a child after N jobs",
    )  # fmt: skip
    p.add_argument(
        "--max-memory-per-child", type=whole_number(1), metavar="MB",
        help="with --pool process: replace a child once a job leaves it above MB of memory",
    )  # fmt: skip

    p = add("sweep")
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

    p = add("stats")
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

    for name in ("show", "cancel", "retry"):
        p = add(name)
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

    p = add("check")
    p.add_argument(
        "--handlers", metavar="MODULE:REGISTRY",
        help="also list unfinished jobs this registry cannot run as stored: types with no "
        "handler or task, and task jobs whose arguments no longer bind to its signature",
    )  # fmt: skip
    add_output(p)

    p = add("schedules")
    p.add_argument(
        "--handlers", metavar="MODULE:REGISTRY",
        help="also show what this HandlerRegistry declares (registry.periodic)",
    )  # fmt: skip
    p.add_argument("--remove", metavar="NAME", help="delete a schedule no code declares any more")
    add_output(p)
    schedule_actions = p.add_subparsers(title="actions (default: list)", metavar="ACTION")
    for action in ("run", "pause", "resume"):
        control = COMMANDS[f"schedules {action}"]
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
    summary, description = command_help(COMMANDS["queue limit"])
    sub = actions.add_parser("limit", help=summary, description=description, parents=[common])
    sub.set_defaults(command=COMMANDS["queue limit"])
    sub.add_argument("name", metavar="QUEUE", help="the queue's name")
    sub.add_argument(
        "--max", dest="max_starts", type=int, required=True, metavar="N",
        help="at most N job starts per period, per rate key (>= 1)",
    )  # fmt: skip
    sub.add_argument(
        "--per", dest="per_seconds", type=int, required=True, metavar="SECONDS",
        help="the period, in whole seconds (>= 1)",
    )  # fmt: skip
    for action in ("pause", "resume", "unlimit"):
        control = COMMANDS[f"queue {action}"]
        summary, description = command_help(control)
        sub = actions.add_parser(action, help=summary, description=description, parents=[common])
        sub.set_defaults(command=control)
        sub.add_argument("name", metavar="QUEUE", help="the queue's name")
    summary, description = command_help(COMMANDS["queue list"])
    sub = actions.add_parser("list", help=summary, description=description, parents=[common])
    sub.set_defaults(command=COMMANDS["queue list"])
    add_output(sub)

    p = commands.add_parser(
        "jobs", help="Cancel, retry or discard one job, or every job a filter matches.",
        parents=[common],
        description="Cancel, retry or discard one job (JOB_ID) or every job a filter "
        "matches. With a filter it is a dry run (it counts) unless --yes is given.",
    )  # fmt: skip
    job_actions = p.add_subparsers(title="actions", metavar="ACTION", required=True)
    for action in ("cancel", "retry", "discard"):
        bulk = COMMANDS[f"jobs {action}"]
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

    p = add("prune")
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

    p = add("maintenance")
    p.add_argument(
        "--checkpoint", action="store_true",
        help="SQLite: PRAGMA wal_checkpoint(TRUNCATE) (copy the WAL back, truncate it)",
    )  # fmt: skip
    p.add_argument(
        "--vacuum", action="store_true",
        help="SQLite: VACUUM, rewrites the file (exclusive lock: off-peak only); "
        "PostgreSQL: VACUUM (ANALYZE) of the queue tables",
    )  # fmt: skip

    p = add("dashboard")
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

    p = add("demo")
    p.add_argument("--path", metavar="DIR", help="directory for the demo database (default: temp)")
    p.add_argument(
        "--jobs", type=whole_number(2, 1_000_000), default=300, help="how many jobs (default 300)"
    )
    p.add_argument(
        "--workers", type=whole_number(1, 64), default=3, help="worker processes (default 3)"
    )
    return parser


def call_command(command: Command, args: argparse.Namespace) -> int:
    """Import the command's function and call it with the parsed arguments named like
    its parameters."""
    function = command.load()
    values = vars(args)
    values.setdefault("db", None)  # --db is optional everywhere
    wanted = inspect.signature(function).parameters
    return function(**{name: values[name] for name in wanted if name in values})
