"""Handlers and peer apps for ``bench/pools.py`` (imported by the worker processes).

``--handlers bench.pool_handlers:registry`` for ``sqlq worker``; ``celery_app`` for
``celery -A bench.pool_handlers worker``; ``huey`` for ``huey_consumer``. Every no-op
of the three adds one to the Redis counter named in its argument, so each run knows
when its jobs are done the same way.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

from sqlq_orm import HandlerRegistry, JobContext

REDIS_URL = os.environ.get("SQLQ_BENCH_REDIS", "redis://127.0.0.1:6379/0")
registry = HandlerRegistry()
_redis: Any = None


def count(key: str) -> None:
    """INCR ``key`` on the bench's Redis (one connection per process)."""
    global _redis
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(REDIS_URL)
    _redis.incr(key)


@registry.handler("noop")
def noop(ctx: JobContext) -> None:
    count(ctx.payload["key"])


@registry.handler("light")
def light(ctx: JobContext) -> None:
    """A CPU-light job: mostly waiting (an API call, a query)."""
    time.sleep(ctx.payload.get("seconds", 0.04))


@registry.handler("short")
def short(ctx: JobContext) -> None:
    time.sleep(0.01)


@registry.handler("segfault")
def segfault(ctx: JobContext) -> None:
    ctypes.string_at(0)


@registry.handler("spin")
def spin(ctx: JobContext) -> None:
    while True:
        pass


@registry.handler("cpu")
def cpu(ctx: JobContext) -> None:
    total = 0
    for n in range(ctx.payload["n"]):
        total += n * n


@registry.handler("allocate")
def allocate(ctx: JobContext) -> None:
    held = b"x" * (ctx.payload["mb"] << 20)  # written: resident, not just reserved
    del held


try:
    from celery import Celery

    celery_app = Celery("bench_pool", broker=REDIS_URL)
    celery_app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False)

    @celery_app.task(name="bench_pool.noop")
    def celery_noop(key: str) -> None:
        count(key)

except ImportError:  # the peers are optional (pip install celery[redis])
    pass

try:
    from huey import SqliteHuey

    HUEY_DB = Path(__file__).resolve().parent / "results" / "work" / "pools_huey.db"
    HUEY_DB.parent.mkdir(parents=True, exist_ok=True)
    huey = SqliteHuey("bench_pool", filename=str(HUEY_DB))

    @huey.task()
    def huey_noop(key: str) -> None:
        count(key)

except ImportError:
    pass
