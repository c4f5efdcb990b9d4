"""AsyncQueue is Queue, awaited (issue 22, item 11, and the architecture review's point 2):
every public ``Queue`` operation but the synchronous-only ones is on ``AsyncQueue``, with
the same signature, as a coroutine function. A method added to ``Queue`` without its
one line in ``AsyncQueue`` (or a place in ``SYNC_ONLY``) fails here."""

from __future__ import annotations

import inspect

import pytest

import sqlq_orm
from sqlq_orm import AsyncQueue, Queue
from sqlq_orm.queue.aio.queue import SYNC_ONLY, awaited


def operations(cls: type) -> set[str]:
    """Public methods: plain functions, or (on AsyncQueue) ``awaited`` descriptors."""
    return {
        name
        for name in dir(cls)
        if not name.startswith("_")
        and (
            inspect.isfunction(inspect.getattr_static(cls, name))
            or isinstance(inspect.getattr_static(cls, name), awaited)
        )
    }


def test_asyncqueue_has_every_queue_operation_but_the_synchronous_only_ones():
    assert operations(Queue) >= SYNC_ONLY
    assert operations(AsyncQueue) == operations(Queue) - SYNC_ONLY


@pytest.fixture
def async_queue(tmp_path) -> AsyncQueue:
    return AsyncQueue(sqlq_orm.create_async_engine(f"sqlite:///{tmp_path / 'surface.db'}"))


@pytest.mark.parametrize("name", sorted(operations(Queue) - SYNC_ONLY))
def test_each_operation_has_queues_signature_and_is_awaitable(async_queue, name):
    operation = getattr(async_queue, name)
    synchronous = getattr(async_queue.sync_queue, name)

    assert inspect.iscoroutinefunction(operation)
    assert inspect.signature(operation) == inspect.signature(synchronous)
    assert operation.__doc__ == synchronous.__doc__ and operation.__name__ == name
    assert getattr(async_queue, name) is operation  # built once per instance
