"""Where a worker's jobs run: threads or child processes, behind one interface
(:mod:`~sqlq_orm.worker.executors.base`), chosen once when the worker starts."""

from __future__ import annotations

from collections.abc import Callable

from sqlq_orm.errors import InvalidInput
from sqlq_orm.worker.executors.base import Executor, PoolLimits, RunServices
from sqlq_orm.worker.executors.processes import ProcessExecutor
from sqlq_orm.worker.executors.threads import ThreadExecutor

__all__ = ["POOLS", "Executor", "PoolLimits", "RunServices", "require_pool", "start_executor"]

POOLS: dict[str, Callable[[RunServices], Executor]] = {
    "thread": ThreadExecutor,
    "process": ProcessExecutor,
}
"""Each pool a worker can run its jobs on, by the name ``--pool`` takes."""


def require_pool(pool: str) -> str:
    """``pool`` if it names a pool; else :class:`~sqlq_orm.errors.InvalidInput`."""
    if pool not in POOLS:
        raise InvalidInput(f"pool must be one of {', '.join(sorted(POOLS))}, got {pool!r}")
    return pool


def start_executor(pool: str, services: RunServices) -> Executor:
    """Start the executor of the pool named ``pool`` (validated by :func:`require_pool`)."""
    return POOLS[require_pool(pool)](services)
