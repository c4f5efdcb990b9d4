"""What a process that starts with sqlq_orm imports, and what it leaves out (issue 41).

Every web process, operator command and worker starts by importing the package, so
each piece is imported where it is used: Alembic only to migrate or check a revision,
the worker only by a worker, the dashboard (Starlette, Jinja2) only by ``sqlq
dashboard``, OpenTelemetry only by tracing, a database driver only for its URL, and
SQLAlchemy's PostgreSQL and MySQL dialects only when the models (or an engine) need
them. These are import-graph tests, each in a fresh interpreter; speed lives in
``bench/startup.py``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sqlq_orm
from tests.support.worker_helpers import subprocess_env

NEVER_AT_IMPORT = (
    "alembic",
    "starlette",
    "jinja2",
    "uvicorn",
    "opentelemetry",
    "psycopg",
    "psycopg2",
    "pymysql",
    "asyncpg",
    "aiomysql",
    "aiosqlite",
    "greenlet",
    "sqlalchemy.ext.asyncio",
    "sqlq_orm.migrate",
    "sqlq_orm.migrations",
    "sqlq_orm.worker",
    "sqlq_orm.tasks",
    "sqlq_orm.scheduler",
    "sqlq_orm.cli",
    "sqlq_orm.dashboard",
)
"""Loaded by nothing a plain ``import sqlq_orm`` or an enqueueing web app does."""

NEVER_IN_A_COMMAND = tuple(name for name in NEVER_AT_IMPORT if name != "sqlq_orm.cli")
"""What ``sqlq --help`` and ``sqlq show`` leave out: all of the above but the CLI."""

OTHER_DATABASES = ("sqlalchemy.dialects.postgresql", "sqlalchemy.dialects.mysql")

REPORT = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"


def modules_after(code: str, *argv: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (argv: ``argv``)."""
    done = subprocess.run(
        [sys.executable, "-c", code + REPORT, *argv],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (a package counts with any of its submodules) were loaded."""
    return [name for name in names if any(m == name or m.startswith(name + ".") for m in modules)]


def cli(*arguments: str) -> str:
    """Code that runs ``sqlq`` with ``arguments``, its output dropped, as the script does."""
    return (
        "import contextlib, io, sys\n"
        "from sqlq_orm.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        status = main({list(arguments)!r})\n"
        "    except SystemExit as exit:\n"
        "        status = exit.code\n"
        "assert status == 0, status\n"
    )


def test_import_sqlq_orm_loads_only_its_exceptions():
    modules = modules_after("import sqlq_orm")

    assert loaded(modules, NEVER_AT_IMPORT + OTHER_DATABASES) == []
    assert "sqlq_orm.queue" not in modules and "sqlalchemy.orm" not in modules


def test_an_app_that_enqueues_on_sqlite_loads_no_alembic_worker_or_other_driver(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    sqlq_orm.migrate.upgrade(url)

    modules = modules_after(
        "import sys, sqlq_orm\n"
        "queue = sqlq_orm.Queue(sqlq_orm.create_engine(sys.argv[1]))\n"
        "queue.enqueue('t', {'n': 1})\n"
        "assert queue.counts_by_status()['QUEUED'] == 1\n",
        url,
    )

    assert loaded(modules, NEVER_AT_IMPORT) == []


def test_the_queue_class_alone_maps_no_models_and_loads_no_other_dialect():
    modules = modules_after("import sqlq_orm\nsqlq_orm.Queue, sqlq_orm.create_engine")

    assert loaded(modules, NEVER_AT_IMPORT + OTHER_DATABASES) == []
    assert "sqlq_orm.schema.models" not in modules


def test_sqlq_help_imports_no_command_queue_sqlalchemy_or_alembic():
    modules = modules_after(cli("--help"))

    assert loaded(modules, NEVER_IN_A_COMMAND + OTHER_DATABASES) == []
    assert loaded(modules, ("sqlq_orm.queue", "sqlq_orm.ops", "sqlalchemy.orm")) == []
    assert "sqlq_orm.cli.commands" not in modules and "sqlq_orm.cli.controls" not in modules


def test_sqlq_show_loads_no_alembic_worker_or_dashboard(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    sqlq_orm.migrate.upgrade(url)
    sqlq_orm.Queue(sqlq_orm.create_engine(url)).enqueue("t")

    modules = modules_after(cli("--db", url, "show", "1"))

    assert loaded(modules, NEVER_IN_A_COMMAND) == []
    assert "sqlq_orm.cli.commands" in modules  # it did run the command


def test_sqlq_migrate_does_load_alembic(tmp_path):
    # The other side of the checks above: they would pass vacuously if the wrapper
    # reported modules before the command ran.
    modules = modules_after(cli("--db", f"sqlite:///{tmp_path / 'q.db'}", "migrate"))

    assert "alembic" in modules


@pytest.mark.parametrize("name", sqlq_orm.__all__)
def test_every_public_name_is_there_on_first_use(name):
    value = getattr(sqlq_orm, name)

    module_name, attribute = sqlq_orm._LAZY.get(name, ("sqlq_orm.errors", name))
    module = importlib.import_module(module_name)
    assert value is (module if attribute is None else getattr(module, attribute))
    assert name in dir(sqlq_orm)


def test_every_lazy_name_is_public_and_an_unknown_name_is_an_attribute_error():
    assert set(sqlq_orm._LAZY) <= set(sqlq_orm.__all__)
    with pytest.raises(AttributeError, match="no_such_thing"):
        sqlq_orm.no_such_thing  # noqa: B018


def test_from_sqlq_orm_import_migrate_gives_the_module():
    from sqlq_orm import migrate

    assert migrate is importlib.import_module("sqlq_orm.migrate")
    assert callable(migrate.upgrade) and callable(migrate.check_schema_revision)


def test_every_command_the_parser_names_exists_and_its_help_is_its_docstring():
    from sqlq_orm.cli.parser import COMMANDS

    for words, command in COMMANDS.items():
        function = command.load()
        assert inspect.getdoc(function) == command.doc, words
        assert Path(inspect.getfile(function)).stem == command.module.rsplit(".", 1)[-1]
