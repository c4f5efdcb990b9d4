"""The ``sqlq`` command line (also ``python -m sqlq_orm``): a thin layer over the library.

- :mod:`~sqlq_orm.cli.connect`: which database (``--db``, ``$SQLQ_DATABASE_URL``, else
  ``sqlq.db``), its engine, its schema, the :class:`~sqlq_orm.Queue` on it;
- :mod:`~sqlq_orm.cli.commands`: one plain function per command;
- :mod:`~sqlq_orm.cli.parser`: the argument parser, which only maps arguments onto them;
- :mod:`~sqlq_orm.cli.entry`: :func:`main`, the entry point (one-line errors, exit codes);
- :mod:`~sqlq_orm.cli.demo` and :mod:`~sqlq_orm.cli.demo_handlers`: ``sqlq demo``.

The top layer: it may import anything in :mod:`sqlq_orm`; nothing in the library
imports it. Inside it, imports point one way: entry -> parser -> commands -> demo ->
connect. The CLI never writes SQL; the queue and :mod:`sqlq_orm.ops` own every statement.
"""

from sqlq_orm.cli.entry import main

__all__ = ["main"]
