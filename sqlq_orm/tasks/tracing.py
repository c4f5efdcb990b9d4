"""OpenTelemetry tracing for tasks: a span per enqueue and per run, linked.

``pip install 'sqlq_orm[tracing]'`` (``opentelemetry-api``; the app brings its SDK and
exporter), then::

    registry.add_middleware(TracingMiddleware())

Each enqueue runs in a ``sqlq.enqueue <task>`` span (PRODUCER) and writes that span's
trace context (W3C ``traceparent``) into the job, under the payload's reserved key
``__sqlq__``; each run is a ``sqlq.run <task>`` span (CONSUMER) linked to it, so a
trace viewer leads from the request that enqueued a job to every run of it. A run
that raises records the exception and an error status. Jobs enqueued without the
middleware run untraced-linked (a span with no link).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from sqlq_orm.queue.types import JobSpec
from sqlq_orm.tasks.middleware import Task, TaskMiddleware
from sqlq_orm.tasks.signature import META_KEY
from sqlq_orm.worker.handlers import JobContext


class TracingMiddleware(TaskMiddleware):
    """Spans around task enqueues and runs, the run linked to its enqueue."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("sqlq_orm", tracer_provider=tracer_provider)

    def around_enqueue(self, task: Task, spec: JobSpec, proceed: Callable[[JobSpec], Any]) -> Any:
        attributes = {"messaging.system": "sqlq", "messaging.destination.name": spec.queue,
                      "sqlq.task": task.name}  # fmt: skip
        with self.tracer.start_as_current_span(
            f"sqlq.enqueue {task.name}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            payload = dict(spec.payload or {})
            payload[META_KEY] = {**payload.get(META_KEY, {}), **carrier}
            return proceed(dataclasses.replace(spec, payload=payload))

    @contextmanager
    def _run_span(self, task: Task, ctx: JobContext) -> Iterator[trace.Span]:
        meta = ctx.payload.get(META_KEY) if isinstance(ctx.payload, dict) else None
        links = []
        if isinstance(meta, dict):
            enqueued = trace.get_current_span(propagate.extract(meta)).get_span_context()
            if enqueued.is_valid:
                links.append(Link(enqueued))
        attributes: dict[str, str | int] = {
                      "messaging.system": "sqlq", "messaging.destination.name": ctx.queue,
                      "sqlq.task": task.name, "sqlq.job_id": ctx.job_id,
                      "sqlq.attempt": ctx.attempt}  # fmt: skip
        with self.tracer.start_as_current_span(
            f"sqlq.run {task.name}", kind=SpanKind.CONSUMER, links=links,
            attributes=attributes, record_exception=False, set_status_on_exception=False,
        ) as span:  # fmt: skip
            try:
                yield span
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise

    def around_run(self, task: Task, ctx: JobContext, proceed: Callable[[], Any]) -> Any:
        with self._run_span(task, ctx):
            return proceed()

    async def around_run_async(
        self, task: Task, ctx: JobContext, proceed: Callable[[], Awaitable[Any]]
    ) -> Any:
        with self._run_span(task, ctx):
            return await proceed()
