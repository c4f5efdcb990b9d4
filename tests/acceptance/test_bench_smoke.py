"""The benchmark harness runs end to end at tiny sizes, and its baseline is honest.

Correctness only: every bench completes, its counts add up, the JSON is written.
No timing is asserted here (speed belongs in ``python -m bench``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy

import sqlq_orm
from bench.core import create_schema
from bench.raw_sqlite_baseline import RawSqliteQueue

ROOT = Path(__file__).resolve().parents[2]


def _run_bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "results.json"
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out),
         "--workdir", str(tmp_path / "work"), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return json.loads(out.read_text())


def _measured(result: dict) -> bool:
    return result["value"] is not None and math.isfinite(result["value"])


def test_every_bench_completes_on_sqlite_and_writes_its_figures_to_json(tmp_path: Path) -> None:
    document = _run_bench(tmp_path, "--pg", "")

    results = document["results"]
    assert document["failures"] == {}
    assert {r["bench"] for r in results} == {
        "lifecycle", "workers", "bulk", "scaling", "contention", "peers", "latency", "dashboard",
        "scheduler", "concurrency", "pause", "wait", "rate_limit", "ratios", "startup", "pools",
    }  # fmt: skip
    for result in results:
        peers_missing = "skipped" in result["note"]
        if result["bench"] in ("peers", "ratios", "startup", "pools") and peers_missing:
            continue
        assert _measured(result), result
        if result["baseline"]:
            assert result["baseline_value"] > 0 and result["ratio"] > 0, result
    contention_errors = next(
        r for r in results if r["bench"] == "contention" and r["unit"] == "errors"
    )
    assert contention_errors["value"] == 0 and contention_errors["met"], contention_errors
    assert not any("PROBLEMS" in r["note"] for r in results if r["bench"] == "workers")


@pytest.mark.postgres
def test_postgres_cases_run_against_a_throw_away_database(
    tmp_path: Path, postgres_url: str
) -> None:
    document = _run_bench(tmp_path, "--only", "workers,scaling", "--pg", postgres_url)

    cases = [r["case"] for r in document["results"]]
    assert document["failures"] == {}
    assert any("(postgresql)" in case and "Worker x2" in case for case in cases), cases
    assert any("(postgresql)" in case and "claim+finish" in case for case in cases), cases
    assert not any("PROBLEMS" in r["note"] for r in document["results"])


def _queue_statements(engine: sqlalchemy.engine.Engine) -> list[str]:
    seen: list[str] = []
    queue = sqlq_orm.Queue(engine)
    queue.check_schema()  # before listening: its one read of the schema, at first use

    # BEGIN is recorded from the engine's begin event, however the hook sends it.
    @sqlalchemy.event.listens_for(engine, "begin")
    def record_begin(conn) -> None:  # noqa: ANN001
        seen.append("BEGIN IMMEDIATE")

    @sqlalchemy.event.listens_for(engine, "before_cursor_execute")
    def record(conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        if not statement.startswith("BEGIN"):
            seen.append(statement)

    @sqlalchemy.event.listens_for(engine, "commit")
    def record_commit(conn) -> None:  # noqa: ANN001
        seen.append("COMMIT")

    queue.enqueue("noop", {"n": 1})
    (lease,) = queue.claim("w")
    queue.start(lease)
    queue.succeed(lease)
    (lease,) = queue.claim("w", start=True) or [None]
    return seen


def test_raw_baseline_sends_sqlite_the_same_statements_as_the_queue(tmp_path: Path) -> None:
    engine = create_schema(f"sqlite:///{tmp_path / 'queue.db'}")
    raw_path = tmp_path / "raw.db"
    create_schema(f"sqlite:///{raw_path}").dispose()
    raw = RawSqliteQueue(raw_path)
    raw.record = True

    raw.enqueue("noop", {"n": 1})
    (lease,) = raw.claim("w")
    raw.start(lease, "w")
    raw.succeed(lease, "w")
    raw.claim("w", start=True)
    by_queue = _queue_statements(engine)

    normalise = " ".join
    assert [normalise(s.split()) for s in raw.statements] == [
        normalise(s.split()) for s in by_queue
    ], "bench/raw_sqlite_baseline.py no longer mirrors the service's statements: update it"
    engine.dispose()
    raw.close()
