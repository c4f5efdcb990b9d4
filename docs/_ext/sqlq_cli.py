"""``{sqlq-cli}``: every ``sqlq`` command and option, generated from the real parser.

The page text comes from :func:`sqlq_orm.cli.parser.build_parser` (each command's
description and its ``--help``), never restated by hand, so a new option appears in the
docs the moment it is added to the parser.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

HELP_WIDTH = "88"


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser's sub-commands, in the order ``--help`` lists them."""
    for action in parser._actions:  # argparse has no public accessor for these
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield choice.dest, action.choices[choice.dest]


class SqlqCliDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from sqlq_orm.cli.parser import build_parser

        previous = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps its help to the terminal
        try:
            parser = build_parser()
            top = nodes.section(ids=["sqlq"], names=["sqlq"])
            top += nodes.title(text="sqlq")
            top += nodes.literal_block(text=parser.format_help(), language="text")
            sections = [top]
            sections += [self.section(f"sqlq {name}", sub) for name, sub in subcommands(parser)]
        finally:
            if previous is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = previous
        return sections

    def section(self, title: str, parser: argparse.ArgumentParser) -> nodes.section:
        ident = nodes.make_id(title)
        section = nodes.section(ids=[ident], names=[nodes.fully_normalize_name(title)])
        section += nodes.title(text=title)
        if parser.description:
            section += nodes.paragraph(text=parser.description)
        section += nodes.literal_block(text=parser.format_help(), language="text")
        for name, sub in subcommands(parser):
            section += self.section(f"{title} {name}", sub)
        return section


def setup(app: Sphinx) -> dict[str, object]:
    app.add_directive("sqlq-cli", SqlqCliDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
