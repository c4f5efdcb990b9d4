#!/usr/bin/env python3
"""Set-up and run in one command, with nothing but Python 3.11+ on the machine.

    python3 tasks.py demo    # make .venv, install sqlq_orm[postgres,dashboard], run the demo
    python3 tasks.py test    # make .venv, install sqlq_orm[test,dashboard-test], run the tests
    python3 tasks.py bench   # make .venv, install sqlq_orm[test,bench], run the benchmarks
    python3 tasks.py lint    # make .venv, install sqlq_orm[dev], run ruff and mypy
    python3 tasks.py docs    # make .venv, install sqlq_orm[docs], build the docs site (HTML)

Extra arguments after the task go to the program it runs (e.g. ``test -k sweep``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("SQLQ_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"

EXTRAS = {
    "demo": "postgres,mysql,dashboard",
    "test": "test,dashboard-test",
    "bench": "test,bench",
    "lint": "dev",
    "docs": "docs",
}

# Warnings are errors: a broken reference, a docstring Sphinx cannot read or a page left
# out of every toctree fails the build (and CI).
DOCS_BUILD = ["-m", "sphinx", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html"]


def ensure_env(extra: str) -> None:
    """Create the virtual environment if needed and install the package into it."""
    if sys.version_info < (3, 11):  # noqa: UP036 - tasks.py runs on any python3 a user has
        sys.exit(f"sqlq_orm needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[{extra}]"], check=True)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__)
        return 2
    task, rest = argv[0], argv[1:]
    ensure_env(EXTRAS[task])
    if task == "demo":
        command = [str(BIN / "sqlq"), "demo", *rest]
    elif task == "test":
        command = [str(PYTHON), "-m", "pytest", *rest]
    elif task == "lint":
        return lint(rest)
    elif task == "docs":
        command = [str(PYTHON), *DOCS_BUILD, *rest]
    else:
        command = [str(PYTHON), "-m", "bench", *rest]
    print("+ " + " ".join(command), flush=True)
    return run(command)


def run(command: list[str]) -> int:
    """Run ``command`` to its end and return its status, passing on Ctrl-C and SIGTERM.

    pytest stops at a Ctrl-C, runs its teardown (which drops the throw-away PostgreSQL
    and MariaDB databases) and prints its summary; this waits for all of that
    (``subprocess.call`` would SIGKILL it 0.25 s after the Ctrl-C). From a terminal,
    the child stays in the terminal's foreground group (it may read the terminal:
    ``--pdb``), so a Ctrl-C reaches it directly and is not sent twice; otherwise (a
    script, CI, ``kill -INT``) the child has a process group of its own and each
    SIGINT or SIGTERM sent here is passed on once. A second Ctrl-C cuts pytest's
    teardown short, as it would without this script in between.
    """
    children: list[subprocess.Popen[bytes]] = []
    interactive = _in_terminal_foreground()

    def forward(signum: int, frame: object) -> None:
        if signum == signal.SIGINT and interactive:
            return  # the terminal sent it to the child as well
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # Before the child starts, so it inherits SIGINT's default action, not an "ignored"
    # this process may have been started with (``nohup``, ``&`` in a script).
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    if os.name == "posix" and not interactive:
        children.append(subprocess.Popen(command, cwd=ROOT, process_group=0))
    else:
        children.append(subprocess.Popen(command, cwd=ROOT))
    return children[0].wait()


def _in_terminal_foreground() -> bool:
    """Whether this process runs in the foreground of a terminal (Ctrl-C reaches its
    whole process group from there)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def lint(rest: list[str]) -> int:
    """Ruff (lint and format) over the project, mypy (strict) over the package."""
    commands = [
        [str(PYTHON), "-m", "ruff", "check", "sqlq_orm", "tests", "bench", "tasks.py", *rest],
        [str(PYTHON), "-m", "ruff", "format", "--check", "sqlq_orm"],
        [str(PYTHON), "-m", "mypy", "sqlq_orm"],
    ]
    failed = 0
    for command in commands:
        print("+ " + " ".join(command), flush=True)
        failed |= subprocess.call(command, cwd=ROOT) != 0
    return int(failed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
