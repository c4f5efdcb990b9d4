"""Run the benchmarks: ``python -m bench [--quick] [--only NAME] [--json PATH] [--pg URL]``.

Prints an aligned table (each figure beside the baseline it was measured with, and
their ratio) and writes every sample to JSON (default ``bench/results/latest.json``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sqlite3
import sys
import time
import traceback
from pathlib import Path

import sqlalchemy

from bench.core import Config, Result, format_table

BENCHES = (
    "lifecycle", "workers", "bulk", "scaling", "contention", "peers", "latency", "dashboard",
    "scheduler", "concurrency", "pgbouncer", "pg_cost", "pause", "wait", "rate_limit",
    "ratios", "startup", "pools",
)  # fmt: skip
"""Every bench module, in the order they run."""

DEFAULT_JSON = Path("bench/results/latest.json")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    size.add_argument("--smoke", action="store_true", help="tiny sizes (correctness only, for CI)")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help=f"run only these benches (repeat or comma-separate): {', '.join(BENCHES)}",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument(
        "--pg",
        metavar="URL",
        default=os.environ.get("SQLQ_BENCH_POSTGRES_URL"),
        help="PostgreSQL server for the PostgreSQL cases (a throw-away database is created"
        " there); default $SQLQ_BENCH_POSTGRES_URL; without it those cases are skipped",
    )
    parser.add_argument(
        "--mariadb",
        metavar="URL",
        default=os.environ.get("SQLQ_BENCH_MARIADB_URL"),
        help="MariaDB server for the MariaDB cases (a throw-away database is created there,"
        " e.g. mysql+pymysql://root@127.0.0.1:3306/test); default $SQLQ_BENCH_MARIADB_URL",
    )
    parser.add_argument("--repeats", type=int, help="repetitions per measurement (medians)")
    parser.add_argument(
        "--workdir", type=Path, default=Path("bench/results/work"), help="SQLite files go here"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for item in args.only or [] for n in item.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        parser.error(f"unknown bench {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    args.names = [name for name in BENCHES if name in names] if names else list(BENCHES)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    config = Config(
        mode=mode,
        workdir=args.workdir,
        pg_url=args.pg,
        mariadb_url=args.mariadb,
        repeats=args.repeats,
    )
    results: list[Result] = []
    failures: dict[str, str] = {}
    started = time.time()
    for name in args.names:
        print(f"== {name} ({mode})", flush=True)
        began = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{name}")
            found = module.run(config)
        except Exception as exc:  # noqa: BLE001 - one broken bench must not hide the rest
            traceback.print_exc()
            failures[name] = f"{type(exc).__name__}: {exc}"
            continue
        results += found
        print(format_table(found), flush=True)
        print(f"   ({time.perf_counter() - began:.0f} s)\n", flush=True)

    print("== all results")
    print(format_table(results))
    for name, why in failures.items():
        print(f"!! {name} failed: {why}")
    document = {
        "meta": {
            "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "mode": mode,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "seconds": round(time.time() - started, 1),
            "python": sys.version.split()[0],
            "sqlalchemy": sqlalchemy.__version__,
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "postgres": bool(args.pg),
            "mariadb": bool(args.mariadb),
        },
        "results": [result.as_dict() for result in results],
        "failures": failures,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"\nwrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
