"""OpenTelemetry tracing of tasks (issue 24, item 6) on every backend: a span per
enqueue (a child of the request's span) and per run, the run linked to the enqueue
through the trace context the job carries; a failing run records its exception.
Spans land in the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import sqlq_orm
from sqlq_orm.tasks.drift import find_drift
from sqlq_orm.tasks.tracing import TracingMiddleware


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_a_run_span_links_to_the_enqueue_span_of_the_request(engine, spans):
    provider, exporter = spans
    queue = sqlq_orm.Queue(engine)
    registry = sqlq_orm.TaskRegistry(queue)
    registry.add_middleware(TracingMiddleware(provider))

    @registry.task(max_retries=0)
    def charge(order: int) -> int:
        if order < 0:
            raise ValueError("no such order")
        return order

    with provider.get_tracer("app").start_as_current_span("POST /orders") as request:
        good = charge.enqueue(7)
        bad = charge.enqueue(-1)
    assert find_drift(queue, registry) == []  # the carried context is not an argument
    sqlq_orm.Worker(queue, registry, burst=True, install_signal_handlers=False,
                    sweep_interval=None).run()  # fmt: skip

    assert charge.result(good.id) == 7
    by_name: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        by_name.setdefault(span.name, []).append(span)
    enqueues = by_name[f"sqlq.enqueue {charge.name}"]
    runs = sorted(by_name[f"sqlq.run {charge.name}"], key=lambda s: s.attributes["sqlq.job_id"])
    assert [s.kind for s in enqueues] == [SpanKind.PRODUCER] * 2
    assert all(s.parent.span_id == request.get_span_context().span_id for s in enqueues)
    assert [s.attributes["sqlq.job_id"] for s in runs] == [good.id, bad.id]
    for run, enqueue in zip(runs, sorted(enqueues, key=lambda s: s.start_time), strict=True):
        assert run.kind is SpanKind.CONSUMER
        assert [link.context.span_id for link in run.links] == [enqueue.context.span_id]
    assert runs[0].status.status_code is StatusCode.UNSET
    assert runs[1].status.status_code is StatusCode.ERROR
    assert [event.name for event in runs[1].events] == ["exception"]
