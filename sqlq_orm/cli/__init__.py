"""The ``sqlq`` command line."""

from sqlq_orm.cli.commands import main

__all__ = ["main"]
