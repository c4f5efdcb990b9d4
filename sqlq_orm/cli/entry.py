"""``sqlq``'s entry point: parse, set up logging, run the command, report errors.

Any error prints one line to stderr (``sqlq: error: ...``) and exits 1 (2 for a usage
error, from argparse); ``-vv`` logs the full error too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from sqlalchemy.exc import OperationalError, SQLAlchemyError

from sqlq_orm.cli.commands import worker
from sqlq_orm.cli.connect import database_url, shown_url
from sqlq_orm.cli.parser import build_parser, call_command
from sqlq_orm.errors import SqlqError

log = logging.getLogger("sqlq_orm.cli")


def _describe(exc: BaseException, db: str | None) -> str:
    if isinstance(exc, SqlqError):
        return str(exc)
    first_line = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]
    if isinstance(exc, OperationalError):
        return f"cannot use the database {shown_url(database_url(db))}: {first_line}"
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
        return call_command(args.command, args)
    except (SqlqError, SQLAlchemyError) as exc:
        log.debug("the full error", exc_info=exc)  # shown with -vv
        print(f"sqlq: error: {_describe(exc, db)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
