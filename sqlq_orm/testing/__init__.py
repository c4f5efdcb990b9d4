"""Helpers for testing the code that enqueues jobs, and the jobs themselves.

- :func:`assert_enqueued`, :func:`assert_not_enqueued`, :func:`enqueued_jobs`: read
  the jobs an app enqueued from the real tables (the caller's uncommitted ones too,
  with ``session=``);
- :func:`drain`: run every ready job in this process through the worker's own path,
  optionally moving a pinned clock to the jobs due later (``with_scheduled=True``);
- :func:`perform`: run one task's function now, without a queue, after the same
  argument check and JSON round trip as ``enqueue``;
- :func:`queue_in_transaction`: a queue that works inside a test's rolled-back
  transaction;
- :mod:`sqlq_orm.testing.pytest_plugin`: the ``sqlq_*`` fixtures (loaded by pytest
  through the ``pytest11`` entry point once sqlq_orm is installed).

Inline mode lives with the tasks: ``TaskRegistry(queue, inline=True)`` or
``registry.inline_mode()``. The user's guide is ``docs/howto/testing.md``.
"""

from sqlq_orm.testing.assertions import (
    EnqueuedCall,
    assert_enqueued,
    assert_not_enqueued,
    enqueued_jobs,
)
from sqlq_orm.testing.drain import DrainedRun, DrainResult, drain
from sqlq_orm.testing.perform import perform, perform_async, perform_call
from sqlq_orm.testing.transaction import queue_in_transaction

__all__ = [
    "DrainResult",
    "DrainedRun",
    "EnqueuedCall",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "enqueued_jobs",
    "perform",
    "perform_async",
    "perform_call",
    "queue_in_transaction",
]
