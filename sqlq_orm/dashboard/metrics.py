"""The dashboard's ``/metrics``: the queue's stats as Prometheus gauges.

The gauges are the ones ``sqlq stats --format prometheus`` prints
(:func:`~sqlq_orm.ops.render.prometheus.stats_gauges`); ``prometheus_client`` writes
them, which brings content negotiation (OpenMetrics for scrapers that ask for it) and
the well-tested escaping of the reference library. Stats are read on each scrape, in
one snapshot, so a scrape never sees numbers from two instants.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from sqlq_orm.ops.render.prometheus import stats_gauges
from sqlq_orm.ops.stats import QueueStats


class StatsCollector(Collector):
    """A collector that reads fresh stats (``read_stats()``) on every scrape."""

    def __init__(self, read_stats: Callable[[], QueueStats]) -> None:
        self._read_stats = read_stats

    def collect(self) -> Iterator[Metric]:
        for family in stats_gauges(self._read_stats()):
            labels = sorted({name for sample, _ in family.samples for name in sample})
            gauge = GaugeMetricFamily(family.name, family.help, labels=labels)
            for sample, value in family.samples:
                gauge.add_metric([sample.get(name, "") for name in labels], float(value))
            yield gauge


def metrics_registry(read_stats: Callable[[], QueueStats]) -> CollectorRegistry:
    """A registry of its own (not the process-wide default) holding only the stats."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(read_stats))
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The scrape's body and content type, in the format the scraper accepts."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
