"""Tasks: typed functions as jobs, the way most Python job libraries work.

A task is a plain (or ``async def``) function with typed parameters, registered with
a :class:`TaskRegistry` bound to the queue it enqueues into::

    registry = TaskRegistry(queue)

    @registry.task(queue="mail")
    def send_email(to: str, subject: str = "Hello") -> None: ...

    send_email.enqueue(to="a@example.com")

The layer sits above :mod:`sqlq_orm.queue` (it enqueues through ``Queue``) and beside
:mod:`sqlq_orm.worker` (a task is a handler to the worker); neither knows tasks exist.

- :mod:`~sqlq_orm.tasks.registry`: :class:`TaskRegistry` and its ``task`` decorator;
- :mod:`~sqlq_orm.tasks.task`: :class:`Task` (``enqueue``, ``options``,
  ``enqueue_many``, ``enqueue_async``, ``spec``);
- :mod:`~sqlq_orm.tasks.signature`: binding a call to a payload and back;
- :mod:`~sqlq_orm.tasks.codec`: dataclass, TypedDict and pydantic arguments to JSON
  and back;
- :mod:`~sqlq_orm.tasks.conformity`: values checked against their annotations;
- :mod:`~sqlq_orm.tasks.runner`: the handler the worker calls for a task;
- :mod:`~sqlq_orm.tasks.failures`: ``retry_on``/``no_retry_on`` and error codes;
- :mod:`~sqlq_orm.tasks.middleware`: hooks around every enqueue and run;
- :mod:`~sqlq_orm.tasks.drift`: stored jobs the registry cannot run as stored.
"""

from sqlq_orm.tasks.middleware import TaskMiddleware
from sqlq_orm.tasks.registry import TaskDecorator, TaskRegistry, default_task_name
from sqlq_orm.tasks.runner import RESULT_DOES_NOT_MATCH
from sqlq_orm.tasks.signature import ARGUMENTS_DO_NOT_BIND, ArgumentsDoNotBind, TaskSignature
from sqlq_orm.tasks.task import Task, TaskOptions

__all__ = [
    "ARGUMENTS_DO_NOT_BIND",
    "RESULT_DOES_NOT_MATCH",
    "ArgumentsDoNotBind",
    "Task",
    "TaskDecorator",
    "TaskMiddleware",
    "TaskOptions",
    "TaskRegistry",
    "TaskSignature",
    "default_task_name",
]
