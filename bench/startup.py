"""Bench: start-up, what a process pays before it does anything (issue 41).

Every web process, operator command and worker starts by importing sqlq_orm. Each
case is a fresh interpreter, timed from start to exit (wall clock, bytecode caches
warm as in an installed package: one untimed run of each first), beside
``python -c "import sqlalchemy.orm"``, which an app on the queue imports anyway:

- ``import sqlq_orm`` (target: at most 1.3x);
- ``import sqlq_orm`` then ``sqlq_orm.Queue`` and ``sqlq_orm.create_engine`` (what an
  app that uses the queue pays; context, no target);
- ``sqlq --help`` (at most 1.5x) and ``sqlq show 1`` on a SQLite file (at most 2x);
- Celery's ``import celery.worker`` and huey's ``import huey.consumer``, when installed
  (context; skipped with a note otherwise).

The runs alternate (A, B, ..., then reversed) and the medians are reported; the ratio
is oriented as everywhere in ``bench/`` (baseline / sqlq_orm, above 1 favours
sqlq_orm), and the note gives the plain multiple (sqlq_orm / baseline) the targets
are written in.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import sqlq_orm
from bench.core import Config, Result, compare, fresh_sqlite_path, side_by_side, sqlite_url

NAME = "startup"
BASELINE = 'python -c "import sqlalchemy.orm"'


def _environment() -> dict[str, str]:
    # As an installed package runs: bytecode cached (a developer's shell or CI may set
    # PYTHONDONTWRITEBYTECODE, which would time compiling the sources instead).
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    root = str(Path(__file__).resolve().parents[1])
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return environment


def sqlq_command() -> list[str]:
    """The installed ``sqlq`` script beside this interpreter, else ``python -m sqlq_orm``."""
    script = Path(sys.executable).parent / "sqlq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sqlq_orm"]


def _timer(command: list[str], environment: dict[str, str]) -> float:
    """Milliseconds for one run of ``command`` (its output dropped; it must succeed)."""
    started = time.perf_counter()
    subprocess.run(command, env=environment, check=True, stdout=subprocess.DEVNULL, timeout=120)
    return (time.perf_counter() - started) * 1000


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run(config: Config) -> list[Result]:
    path = fresh_sqlite_path(config, "startup")
    url = sqlite_url(path)
    sqlq_orm.migrate.upgrade(url)
    engine = sqlq_orm.create_engine(url)
    job = sqlq_orm.Queue(engine).enqueue("noop", {"n": 1}).id
    engine.dispose()

    commands = {
        "base": _python("import sqlalchemy.orm"),
        "import": _python("import sqlq_orm"),
        "queue": _python("import sqlq_orm; sqlq_orm.Queue, sqlq_orm.create_engine"),
        "help": [*sqlq_command(), "--help"],
        "show": [*sqlq_command(), "--db", url, "show", str(job)],
    }
    skipped: list[Result] = []
    for peer, module in (("celery", "celery.worker"), ("huey", "huey.consumer")):
        if importlib.util.find_spec(peer) is None:
            skipped.append(
                Result(NAME, f"import {module}", float("nan"), "ms",
                       note=f"skipped: {peer} is not installed")
            )  # fmt: skip
        else:
            commands[peer] = _python(f"import {module}")

    environment = _environment()
    for command in commands.values():  # warm the bytecode caches; untimed
        subprocess.run(command, env=environment, check=True, stdout=subprocess.DEVNULL)
    runs = {name: (lambda c=command: _timer(c, environment)) for name, command in commands.items()}
    rounds = config.size(full=9, quick=5, smoke=1) if config.repeats is None else config.repeats
    samples = side_by_side(runs, rounds)

    def case(name: str, title: str, limit: float | None) -> Result:
        result = compare(
            NAME, title, samples[name], BASELINE, samples["base"], "ms",
            higher_is_better=False,
            target_ratio=None if limit is None else 1 / limit,
            target_text=None if limit is None else f"<= {limit}x {BASELINE}",
        )  # fmt: skip
        multiple = result.value / result.baseline_value if result.baseline_value else float("nan")
        result.note = f"{multiple:.2f}x {BASELINE}"
        return result

    results = [
        case("import", 'python -c "import sqlq_orm"', 1.3),
        case("queue", "import sqlq_orm; sqlq_orm.Queue, sqlq_orm.create_engine", None),
        case("help", "sqlq --help", 1.5),
        case("show", f"sqlq show {job} (SQLite)", 2.0),
    ]
    if "celery" in samples:
        results.append(case("celery", 'python -c "import celery.worker"', None))
    if "huey" in samples:
        results.append(case("huey", 'python -c "import huey.consumer"', None))
    return results + skipped
