"""``sqlq``'s entry point: parse, set up logging, run the command, report errors.

Any error prints one line to stderr (``sqlq: error: ...``), never a traceback, and
exits 1 (2 for a usage error: a bad option, or an argument that is not UTF-8); ``-vv``
logs the full error too. A reader that goes away (``sqlq show 1 | head``) ends the
command quietly with status 141, as SIGPIPE would.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from sqlq_orm.cli.parser import build_parser, call_command
from sqlq_orm.core.docs import ERROR_CODES_PAGE
from sqlq_orm.errors import (
    DedupeConflict,
    HandlersStuck,
    InvalidTransition,
    LeaseLost,
    SchemaBehindCode,
    SchemaNewerThanCode,
    SqlqError,
    TransactionRolledBack,
)

log = logging.getLogger("sqlq_orm.cli")


INPUT_ERRORS = (OverflowError, RecursionError, UnicodeError)
"""What an argument out of the ordinary can still raise past the checks (a value too
large for the driver, nesting too deep, text that cannot be encoded)."""

REFUSALS = (
    InvalidTransition,
    DedupeConflict,
    LeaseLost,
    SchemaBehindCode,
    SchemaNewerThanCode,
    TransactionRolledBack,
    HandlersStuck,
)
"""Refusals whose error line names the page that explains them (the rest name their fix)."""


def _first_line(exc: BaseException) -> str:
    return (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]


def _describe(exc: BaseException, db: str | None) -> str:
    from sqlalchemy.exc import OperationalError

    from sqlq_orm.cli.connect import database_url, shown_url

    if isinstance(exc, REFUSALS):
        return f"{exc} (see {ERROR_CODES_PAGE})"
    if isinstance(exc, SqlqError):
        return str(exc)
    if isinstance(exc, OperationalError):
        return f"cannot use the database {shown_url(database_url(db))}: {_first_line(exc)}"
    if isinstance(exc, _alembic_errors()):
        return f"migration failed: {_first_line(exc)}"
    if isinstance(exc, INPUT_ERRORS):
        return f"cannot use this input ({type(exc).__name__}): {_first_line(exc)}"
    return f"database error: {_first_line(exc)}"


def _alembic_errors() -> tuple[type[BaseException], ...]:
    """Alembic's ``CommandError``, if Alembic is loaded: only the commands that migrate
    or check a revision import it, and no other command can have raised it."""
    util = sys.modules.get("alembic.util")
    return () if util is None else (util.CommandError,)


def _caught() -> tuple[type[BaseException], ...]:
    """What a command may raise that is shown as one line: ours, the database's,
    Alembic's, and input out of the ordinary."""
    from sqlalchemy.exc import SQLAlchemyError

    return (SqlqError, SQLAlchemyError, *_alembic_errors(), *INPUT_ERRORS)


def _printable(argument: str) -> str:
    """An argument as the user typed it, undecodable bytes shown as ``\\xff``."""
    try:
        raw = argument.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = argument.encode("utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace")


def _not_utf8(argv: Sequence[str]) -> str | None:
    """The first argument that is not valid UTF-8 (Python keeps its bytes as surrogates)."""
    for argument in argv:
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            return argument
    return None


class TerminalSafeFormatter(logging.Formatter):
    """Log lines whose message is escaped for the terminal (job types, worker ids, error
    details end up in log messages); a traceback after it keeps its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        from sqlq_orm.ops.render.text import printable

        record.message = printable(record.message)
        return super().formatMessage(record)


EXIT_BROKEN_PIPE = 128 + 13
"""What a command whose reader went away returns (``sqlq show 1 | head``): the status of
a process ended by SIGPIPE, as ``cat`` or ``git`` would have, and no traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sqlq``; returns the exit status.

    A reader that stops early (``| head``) ends the command quietly: the rest of the
    output goes nowhere and the status is :data:`EXIT_BROKEN_PIPE`.
    """
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # inside the guard: the output may still be buffered here
    except BrokenPipeError:
        # Python flushes stdout once more at exit; point it at /dev/null so that
        # flush cannot raise (and print "Exception ignored ...") either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    bad = _not_utf8(argv)
    if bad is not None:
        print(f"sqlq: error: argument '{_printable(bad)}' is not valid UTF-8", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    verbosity = getattr(args, "verbose", 0) or 0
    level = logging.WARNING
    if verbosity or args.command.function == "worker":  # a worker's log is its activity
        level = logging.DEBUG if verbosity > 1 else logging.INFO
    handler = logging.StreamHandler()
    handler.setFormatter(TerminalSafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if verbosity < 2:  # Alembic says which dialect it uses each time it reads a revision
        logging.getLogger("alembic").setLevel(logging.WARNING)
    db = getattr(args, "db", None)
    try:
        return call_command(args.command, args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not isinstance(exc, _caught()):
            raise
        from sqlq_orm.ops.render.text import printable

        log.debug("the full error", exc_info=exc)  # shown with -vv
        print(f"sqlq: error: {printable(_describe(exc, db))}", file=sys.stderr)
        return 1
