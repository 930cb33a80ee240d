"""Broker metrics with Pulsar's names, exported on the admin server's ``/metrics``.

* Per-topic values (``pulsar_in_messages_total``, ``pulsar_msg_backlog``, ``pulsar_storage_size``,
  ...) are computed at scrape time by a custom collector over the loaded topics, labelled
  ``cluster``, ``namespace`` (``tenant/ns``) and ``topic`` as Pulsar labels them: the hot path
  only bumps plain integers the topic keeps anyway. Per-topic counters restart when a topic is
  loaded again (as in Pulsar).
* ``pulsar_broker_publish_latency`` is a histogram in milliseconds (Pulsar's unit for publish
  latency; buckets are the bounds of Pulsar's ``pulsar_storage_write_latency_le_*``), observed
  once per SEND (a batch is one observation).
* The retention service's ``magnetar_retention_*`` / ``magnetar_backlog_quota_*`` metrics live in
  the same registry; ``magnetar_retention_bytes_awaiting_gc`` appears when a hook reports what
  the bookies still have to reclaim.

One `BrokerMetrics` per broker service, each with its own registry unless given one, so tests can
run several brokers in one process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from retention import RetentionMetrics

from ._stats import storage_numbers

if TYPE_CHECKING:
    from ._service import BrokerService
    from ._topic import Topic

__all__ = ["BrokerMetrics", "PUBLISH_LATENCY_BUCKETS_MS", "TOPIC_METRIC_NAMES"]

PUBLISH_LATENCY_BUCKETS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
"""Bucket bounds (ms) of ``pulsar_broker_publish_latency``: Pulsar's write-latency buckets."""

TOPIC_METRIC_NAMES = (
    "pulsar_in_messages_total", "pulsar_in_bytes_total", "pulsar_out_messages_total", "pulsar_out_bytes_total",
    "pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
    "pulsar_msg_backlog", "pulsar_storage_size", "pulsar_storage_backlog_size",
    "pulsar_storage_backlog_age_seconds", "pulsar_producers_count", "pulsar_consumers_count",
    "pulsar_subscriptions_count", "magnetar_storage_retained_size",
)
"""The per-topic series the collector exports (as they appear in the text format)."""


class _TopicCollector(Collector):
    """Reads the loaded topics of one service at scrape time."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return []  # computed at scrape time: nothing to check for duplicates up front

    def collect(self) -> Iterator[Metric]:
        service = self._metrics.service
        labels = ["cluster", "namespace", "topic"]

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=labels)

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "in_msgs": counter("pulsar_in_messages", "Messages published to the topic since it was loaded"),
            "in_bytes": counter("pulsar_in_bytes", "Bytes published to the topic since it was loaded"),
            "out_msgs": counter("pulsar_out_messages", "Messages dispatched to consumers since the topic was loaded"),
            "out_bytes": counter("pulsar_out_bytes", "Bytes dispatched to consumers since the topic was loaded"),
            "rate_in": gauge("pulsar_rate_in", "Messages published per second"),
            "rate_out": gauge("pulsar_rate_out", "Messages dispatched per second"),
            "thr_in": gauge("pulsar_throughput_in", "Bytes published per second"),
            "thr_out": gauge("pulsar_throughput_out", "Bytes dispatched per second"),
            "backlog": gauge("pulsar_msg_backlog", "Unacknowledged messages summed over the subscriptions"),
            "storage": gauge("pulsar_storage_size", "Bytes of the topic's ledgers (before replication)"),
            "backlog_size": gauge("pulsar_storage_backlog_size", "Bytes of the slowest subscription's backlog"),
            "backlog_age": gauge("pulsar_storage_backlog_age_seconds",
                                 "Age of the oldest unacknowledged message of the slowest subscription"),
            "producers": gauge("pulsar_producers_count", "Producers connected to the topic"),
            "consumers": gauge("pulsar_consumers_count", "Consumers connected to the topic"),
            "subscriptions": gauge("pulsar_subscriptions_count", "Subscriptions of the topic"),
            "retained": gauge("magnetar_storage_retained_size",
                              "Bytes stored but consumed by every subscription (kept by retention)"),
            "compact_removed": counter("pulsar_compaction_removed_event_count",
                                       "Messages compaction left out of the compacted view"),
            "compact_ok": counter("pulsar_compaction_succeed_count", "Compaction runs that succeeded"),
            "compact_failed": counter("pulsar_compaction_failed_count", "Compaction runs that failed"),
            "compact_duration": gauge("pulsar_compaction_duration_time_in_mills",
                                      "Duration of the last compaction run in milliseconds"),
            "compact_entries": gauge("pulsar_compaction_compacted_entries_count",
                                     "Entries in the compacted view"),
            "compact_size": gauge("pulsar_compaction_compacted_entries_size", "Bytes of the compacted view"),
        }
        topics_per_ns: dict[str, int] = {}
        if service is not None:
            cluster = service.config.cluster_name
            for topic in list(service.topics.values()):
                if topic.closed:
                    continue
                ns = str(topic.name.namespace_name)
                topics_per_ns[ns] = topics_per_ns.get(ns, 0) + 1
                values = [cluster, ns, str(topic.name)]
                state = topic.stats_state
                msg_out, bytes_out = state.out_totals(topic)
                rate_in, thr_in = state.in_rates.update(topic.msg_in_counter, topic.bytes_in_counter)
                rate_out, thr_out = state.out_rates.update(msg_out, bytes_out)
                storage = storage_numbers(topic)
                consumers = sum(len(s.consumers) for s in topic.subscriptions.values())
                for key, value in (
                    ("in_msgs", topic.msg_in_counter), ("in_bytes", topic.bytes_in_counter),
                    ("out_msgs", msg_out), ("out_bytes", bytes_out), ("rate_in", rate_in),
                    ("rate_out", rate_out), ("thr_in", thr_in), ("thr_out", thr_out),
                    ("backlog", storage["msgBacklog"]), ("storage", storage["storageSize"]),
                    ("backlog_size", storage["backlogSize"]), ("backlog_age", state.backlog_age_s),
                    ("producers", len(topic.producers)), ("consumers", consumers),
                    ("subscriptions", len(topic.subscriptions)),
                    ("retained", max(0, storage["storageSize"] - storage["backlogSize"])),
                    *compaction_values(topic),
                ):
                    fams[key].add_metric(values, float(value))
        yield from fams.values()
        count = GaugeMetricFamily("pulsar_topics_count", "Topics loaded on this broker, per namespace",
                                  labels=["cluster", "namespace"])
        if service is not None:
            for ns, n in sorted(topics_per_ns.items()):
                count.add_metric([service.config.cluster_name, ns], n)
        yield count
        awaiting = self._metrics.bytes_awaiting_gc()
        if awaiting is not None:
            g = GaugeMetricFamily("magnetar_retention_bytes_awaiting_gc",
                                  "Bytes of trimmed ledgers the bookies have not reclaimed yet")
            g.add_metric([], float(awaiting))
            yield g


def compaction_values(topic: Topic) -> list[tuple[str, float]]:
    """The compaction metrics of a topic (Pulsar's names, see `_compaction`)."""
    c = topic.compactor
    view = c.view
    return [("compact_removed", c.removed_events), ("compact_ok", c.succeeded), ("compact_failed", c.failed),
            ("compact_duration", c.last_duration_ms), ("compact_entries", view.entries if view else 0),
            ("compact_size", view.reader.size if view else 0)]


class BrokerMetrics:
    """The broker's registry: publish latency, per-topic collector and retention metrics.

    ``bind(service)`` attaches the service whose topics are reported (done by `BrokerService`).
    ``extra_registries`` (for example the managed-ledger factory's) are appended by `render`.
    """

    def __init__(self, cluster: str = "standalone", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.cluster = cluster
        self.service: BrokerService | None = None
        self._publish_latency = Histogram(
            "pulsar_broker_publish_latency", "Time from SEND arrival to its receipt, in milliseconds",
            ["cluster"], buckets=PUBLISH_LATENCY_BUCKETS_MS, registry=self.registry).labels(cluster=cluster)
        self.retention = RetentionMetrics(self.registry)
        self.extra_registries: list[CollectorRegistry] = []
        self.gc_pending_hook: Callable[[], int | None] | None = None
        """Returns the bytes of trimmed ledgers the bookies still hold (None: unknown)."""
        self.registry.register(_TopicCollector(self))

    def bind(self, service: BrokerService) -> None:
        """Report the topics of ``service``."""
        self.service = service

    def observe_publish(self, seconds: float) -> None:
        """Record one SEND's publish latency."""
        self._publish_latency.observe(seconds * 1000.0)

    def bytes_awaiting_gc(self) -> int | None:
        """What the GC hook says, None when there is no hook or it fails."""
        hook = self.gc_pending_hook
        if hook is None:
            return None
        try:
            return hook()
        except Exception:
            return None

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry and the extra ones."""
        out = [generate_latest(self.registry)]
        out.extend(generate_latest(r) for r in self.extra_registries)
        return b"".join(out)

    def snapshot(self) -> dict[str, Any]:
        """Label-free totals for tests and logs: topics, producers, consumers."""
        s = self.service
        topics = [] if s is None else [t for t in s.topics.values() if not t.closed]
        return {"topics": len(topics), "producers": sum(len(t.producers) for t in topics),
                "consumers": sum(len(sub.consumers) for t in topics for sub in t.subscriptions.values())}
