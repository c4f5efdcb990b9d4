"""The payload-key check's cost (issue 23 item 10), side by side in one process.

``python -m bench.payload_check``: ``encode_payload`` and ``Queue.enqueue`` on a SQLite
file, with the check and with it switched off, in interleaved rounds; CPU time of this
process (less disturbed by other load than wall time), best of repeats for the encoder,
medians for enqueue. Prints each pair, their ratio and the load average.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable
from typing import Any

import sqlq_orm
from sqlq_orm.core import validation
from sqlq_orm.schema.models import Base

CHECK = validation._require_string_keys

SMALL = {"to": "a@example.com", "order": 42, "template": "receipt", "lang": "en"}
NESTED = {
    "order": {
        "id": 42,
        "lines": [{"sku": f"S{i}", "qty": i, "meta": {"gift": False}} for i in range(20)],
    }
}
BIG = {"rows": [{"k": i, "v": "x" * 40, "tags": ["a", "b"], "m": {"n": i}} for i in range(600)]}
ROUNDS = 21


def _off(payload: object) -> None:
    return None


def _switch(check: Callable[[object], None]) -> None:
    validation._require_string_keys = check  # type: ignore[assignment]


def encode_cost(payload: Any, number: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for label, check in (("without", _off), ("with", CHECK)) * 3:
        _switch(check)
        runs = timeit.repeat(
            lambda: validation.encode_payload(payload, 10**9),
            number=number,
            repeat=7,
            timer=time.process_time,
        )
        best[label] = min(best.get(label, float("inf")), min(runs) / number)
    _switch(CHECK)
    return best


def enqueue_rate(queue: sqlq_orm.Queue, payload: Any, jobs: int) -> float:
    started = time.process_time()
    for _ in range(jobs):
        queue.enqueue("bench", payload)
    return jobs / (time.process_time() - started)


def main() -> None:
    for name, payload, number in (("small", SMALL, 20000), ("nested", NESTED, 5000)):
        cost = encode_cost(payload, number)
        print(
            f"encode_payload {name:6} ({len(validation.encode_payload(payload, 10**9))} B): "
            f"without {cost['without'] * 1e6:8.2f} us  with {cost['with'] * 1e6:8.2f} us  "
            f"ratio {cost['with'] / cost['without']:.3f}"
        )
    cost = encode_cost(BIG, 200)
    print(
        f"encode_payload big    ({len(validation.encode_payload(BIG, 10**9))} B): "
        f"without {cost['without'] * 1e6:8.2f} us  with {cost['with'] * 1e6:8.2f} us  "
        f"ratio {cost['with'] / cost['without']:.3f}"
    )
    with tempfile.TemporaryDirectory() as directory:
        engine = sqlq_orm.create_engine(f"sqlite:///{directory}/bench.db")
        Base.metadata.create_all(engine)
        queue = sqlq_orm.Queue(engine)
        for name, payload in (("small", SMALL), ("nested", NESTED)):
            rates: dict[str, list[float]] = {"without": [], "with": []}
            enqueue_rate(queue, payload, 200)  # warm up
            for _ in range(ROUNDS):
                for label, check in (("without", _off), ("with", CHECK)):
                    _switch(check)
                    rates[label].append(enqueue_rate(queue, payload, 400))
            _switch(CHECK)
            without, with_ = statistics.median(rates["without"]), statistics.median(rates["with"])
            print(
                f"enqueue on a SQLite file, {name:6}: without {without:7.0f}/s  "
                f"with {with_:7.0f}/s  ratio {with_ / without:.3f}"
            )
        engine.dispose()
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
