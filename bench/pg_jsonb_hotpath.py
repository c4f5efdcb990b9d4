"""A/B on PostgreSQL: the hot paths with the payload column as JSONB (sqlq_0010) and
altered back to TEXT, the same code otherwise.

Per run, on a throw-away database: ``enqueue_many`` of ``--jobs`` jobs (500 per call,
a small object payload), then ``claim(limit=100, start=True)`` (payloads returned and
decoded) + ``succeed_many`` until empty. Prints jobs/s of both phases per run, the two
column types interleaved for ``--repeats`` rounds, then the medians and their ratio.

    python -m bench.pg_jsonb_hotpath --pg postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import statistics
import time

import sqlq_orm
from bench.core import postgres_database
from sqlq_orm.schema.models import Base

PAYLOAD = {"tenant": "acme", "user_id": 12345, "items": [1, 2, 3], "note": "hello world"}


def run_once(url: str, jobs: int, column: str) -> tuple[float, float]:
    """(enqueue_many jobs/s, claim + succeed_many jobs/s) with the column as ``column``."""
    engine = sqlq_orm.create_engine(url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    if column == "text":  # as before sqlq_0010
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "ALTER TABLE sqlq_jobs ALTER payload TYPE TEXT, ALTER result TYPE TEXT"
            )
    queue = sqlq_orm.Queue(engine)
    started = time.perf_counter()
    for _ in range(0, jobs, 500):
        queue.enqueue_many([{"type": "t", "payload": PAYLOAD} for _ in range(500)])
    enqueued = jobs / (time.perf_counter() - started)
    started = time.perf_counter()
    done = 0
    while leases := queue.claim("w", limit=100, start=True):
        assert leases[0].payload == PAYLOAD
        queue.succeed_many(leases)
        done += len(leases)
    finished = jobs / (time.perf_counter() - started)
    engine.dispose()
    assert done == jobs - jobs % 500
    return enqueued, finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", required=True, help="admin URL of the PostgreSQL server")
    parser.add_argument("--jobs", type=int, default=3000, help="a multiple of 500")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"jsonb": [], "text": []}
    with postgres_database(args.pg) as url:
        for _ in range(args.repeats):
            for column in ("jsonb", "text"):
                enqueued, finished = run_once(url, args.jobs, column)
                results[column].append((enqueued, finished))
                print(
                    f"{column:5s} enqueue_many {enqueued:6.0f}/s  claim+succeed {finished:6.0f}/s"
                )
    medians = {
        column: (statistics.median(e for e, _ in rows), statistics.median(f for _, f in rows))
        for column, rows in results.items()
    }
    (je, jf), (te, tf) = medians["jsonb"], medians["text"]
    print(
        f"medians: enqueue_many {je:.0f} vs {te:.0f} ({je / te:.2f}x), "
        f"claim+succeed {jf:.0f} vs {tf:.0f} ({jf / tf:.2f}x)  [jsonb vs text]"
    )


if __name__ == "__main__":
    main()
