"""Broker metrics with Pulsar's names, exported on the admin server's ``/metrics``.

* Per-topic values (``pulsar_in_messages_total``, ``pulsar_msg_backlog``, ``pulsar_storage_size``,
  ...) are computed at scrape time by a custom collector over the loaded topics, labelled
  ``cluster``, ``namespace`` (``tenant/ns``) and ``topic`` as Pulsar labels them: the hot path
  only bumps plain integers the topic keeps anyway. Per-topic counters restart when a topic is
  loaded again (as in Pulsar). Every rate is the stats updater's figure for the last
  ``statsUpdateFrequencyInSecs`` (`_stats` Rule 3), the same the topic stats report.
* Per subscription (``pulsar_subscription_back_log``, ``_msg_rate_out``, ``_unacked_messages``,
  ``_msg_rate_redeliver``, ``_msg_ack_rate``, ``_last_*_timestamp``, ...; labels plus
  ``subscription``), and per consumer / producer (``pulsar_consumer_*`` / ``pulsar_producer_*``)
  when ``exposeConsumerLevelMetricsInPrometheus`` / ``exposeProducerLevelMetricsInPrometheus``
  are on, as in Pulsar. ``pulsar_out_messages_total`` and ``pulsar_out_bytes_total`` are, as in
  Pulsar, per subscription (what every consumer it ever had received, `_stats` Rule 2) and per
  consumer. With ``exposeTopicLevelMetricsInPrometheus=false`` the topic series and the topics'
  out totals are summed per namespace (labels ``cluster``, ``namespace``) and nothing is exported
  per subscription. ``*_blocked_on_unacked_messages`` follow the unacked limits the dispatcher
  enforces: the topic's resolved ``maxUnackedMessagesPerConsumer`` / ``...PerSubscription``
  (`_stats` Rule 4). ``pulsar_publish_rate_limit_times`` counts the pauses of the publish rate
  (`_rate_limit` Rule 3) since the topic was loaded (as the stats' ``publishRateLimitedTimes``).
* Non-persistent topics (``non-persistent://`` in the topic label) export the same topic,
  subscription, consumer and producer series with the same labels (backlog and storage 0: nothing
  is stored; ``pulsar_out_messages_total`` counts what reached consumers), are summed into their
  namespace with the persistent ones, and add ``pulsar_subscription_msg_drop_rate`` per
  subscription (messages dropped per second: no permits, or over a dispatch rate), as in Pulsar.
  They have no managed ledger, so they are not in the ``pulsar_ml_*`` gauges.
* Geo-replication (``replicationMetricsEnabled``): ``pulsar_replication_rate_in`` / ``_rate_out`` /
  ``_throughput_in`` / ``_throughput_out`` / ``_backlog`` / ``_connected_count`` /
  ``_rate_expired`` / ``_delay_in_seconds`` per topic and ``remote_cluster`` (per namespace and
  remote cluster with topic-level metrics off), from each replicator's stats, as Pulsar names them.
* Per namespace always: ``pulsar_topics_count`` (persistent and non-persistent) and Pulsar's managed-ledger gauges
  ``pulsar_ml_AddEntryMessagesRate``, ``_AddEntryBytesRate``, ``_NumberOfMessagesInBacklog``,
  ``_StoredMessagesSize``; ``pulsar_active_connections``,
  ``pulsar_connection_created_total_count`` and ``pulsar_connection_closed_total_count`` per broker.
  The managed-ledger factory's and the BookKeeper client's own registries (``pulsar_ml_*``,
  ``bookkeeper_client_*``) are appended by `render`. ``process_*`` (CPU seconds, memory) as
  Pulsar's broker exposes them.
* Connection back-pressure (`_connection` Rules B1-B3), per broker: ``pulsar_broker_throttled_connections``
  (connections not read now because their publish window is full, Pulsar's per-connection
  throttling), ``magnetar_broker_unwritable_connections`` (over their write-buffer high water mark),
  ``magnetar_broker_outbound_queued_bytes`` (bytes queued for writing, summed over connections)
  and ``magnetar_broker_outbound_queued_bytes_max`` (the largest queue of one connection).
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

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.common.batch_histogram import BatchHistogram
from retention import RetentionMetrics

from .topics._nonpersistent import NonPersistentSubscription, NonPersistentTopic
from .topics._stats import INDIVIDUAL_ACK_TYPES, backlog_age_seconds, storage_numbers, topic_rates
from .topics._stats_json import DELAYED_INDEX_ENTRY_BYTES

if TYPE_CHECKING:
    from ._service import BrokerService
    from .topics._subscription import Subscription
    from .topics._topic import Topic

__all__ = ["BrokerMetrics", "PUBLISH_LATENCY_BUCKETS_MS", "SUBSCRIPTION_METRIC_NAMES", "TOPIC_METRIC_NAMES"]

# Pulsar and BookKeeper export no ``*_created`` series; prometheus-client adds one, an epoch time,
# to every counter, histogram and summary unless switched off, which it is process-wide.
disable_created_metrics()

PUBLISH_LATENCY_BUCKETS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
"""Bucket bounds (ms) of ``pulsar_broker_publish_latency``: Pulsar's write-latency buckets."""

_TOPIC_FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    # (key, counter/gauge, name as declared (counters get _total in the text format), help)
    ("in_msgs", "counter", "pulsar_in_messages", "Messages published to the topic since it was loaded"),
    ("in_bytes", "counter", "pulsar_in_bytes", "Bytes published to the topic since it was loaded"),
    ("rate_in", "gauge", "pulsar_rate_in", "Messages published per second over the last stats period"),
    ("rate_out", "gauge", "pulsar_rate_out", "Messages dispatched per second over the last stats period"),
    ("thr_in", "gauge", "pulsar_throughput_in", "Bytes published per second over the last stats period"),
    ("thr_out", "gauge", "pulsar_throughput_out", "Bytes dispatched per second over the last stats period"),
    (
        "avg_size",
        "gauge",
        "pulsar_average_msg_size",
        "Average size in bytes of the messages published over the last stats period",
    ),
    ("backlog", "gauge", "pulsar_msg_backlog", "Unacknowledged messages summed over the subscriptions"),
    ("storage", "gauge", "pulsar_storage_size", "Bytes of the topic's ledgers (before replication)"),
    ("backlog_size", "gauge", "pulsar_storage_backlog_size", "Bytes of the slowest subscription's backlog"),
    ("offloaded", "gauge", "pulsar_storage_offloaded_size", "Bytes of the topic's ledgers offloaded to tiered storage"),
    (
        "backlog_age",
        "gauge",
        "pulsar_storage_backlog_age_seconds",
        "Age of the oldest unacknowledged message of the slowest subscription (-1: none)",
    ),
    ("producers", "gauge", "pulsar_producers_count", "Producers connected to the topic"),
    ("txn_active", "gauge", "pulsar_txn_tb_active_total", "Transactions open on the topic (its transaction buffer)"),
    ("txn_committed", "counter", "pulsar_txn_tb_committed", "Transactions committed on the topic since it was loaded"),
    ("txn_aborted", "counter", "pulsar_txn_tb_aborted", "Transactions aborted on the topic since it was loaded"),
    (
        "publish_limited",
        "gauge",
        "pulsar_publish_rate_limit_times",
        "Times the publish rate paused reading from the topic's producers since the topic was loaded",
    ),
    ("consumers", "gauge", "pulsar_consumers_count", "Consumers connected to the topic"),
    ("subscriptions", "gauge", "pulsar_subscriptions_count", "Subscriptions of the topic"),
    (
        "delayed_index",
        "gauge",
        "pulsar_delayed_message_index_size_bytes",
        "Bytes of the topic's delayed-delivery indexes",
    ),
    (
        "retained",
        "gauge",
        "magnetar_storage_retained_size",
        "Bytes stored but consumed by every subscription (kept by retention)",
    ),
    # topic compaction (`_compaction`), Pulsar's names
    (
        "compact_removed",
        "gauge",
        "pulsar_compaction_removed_event_count",
        "Messages compaction left out of the compacted view",
    ),
    ("compact_ok", "gauge", "pulsar_compaction_succeed_count", "Compaction runs that succeeded"),
    ("compact_failed", "gauge", "pulsar_compaction_failed_count", "Compaction runs that failed"),
    (
        "compact_duration",
        "gauge",
        "pulsar_compaction_duration_time_in_mills",
        "Duration of the last compaction run in milliseconds",
    ),
    ("compact_entries", "gauge", "pulsar_compaction_compacted_entries_count", "Entries in the compacted view"),
    ("compact_size", "gauge", "pulsar_compaction_compacted_entries_size", "Bytes of the compacted view"),
    # the subscriptions' delayed-delivery indexes (`_delayed`), summed; Pulsar's names where it has one
    (
        "delayed_buckets",
        "gauge",
        "pulsar_delayed_message_index_bucket_total",
        "Delayed-delivery index buckets (stored ones, and the mutable one of each index)",
    ),
    ("delayed_loaded", "gauge", "pulsar_delayed_message_index_loaded", "Delayed-delivery index entries held in memory"),
    (
        "delayed_memory",
        "gauge",
        "magnetar_delayed_message_index_memory_bytes",
        "Bytes the delayed-delivery indexes hold in memory (bounded per subscription)",
    ),
)

_OUT_FAMILIES: tuple[tuple[str, str, str], ...] = (
    # Pulsar exports these per subscription (and per consumer), or per namespace without
    # topic-level metrics; they keep what departed consumers received (`_stats` Rule 2)
    ("out_msgs", "pulsar_out_messages", "Messages dispatched to consumers since the topic was loaded"),
    ("out_bytes", "pulsar_out_bytes", "Bytes dispatched to consumers since the topic was loaded"),
)

_ML_NAMESPACE_FAMILIES: tuple[tuple[str, str, str], ...] = (
    # Pulsar's per-namespace managed-ledger gauges, from the same per-topic numbers
    ("rate_in", "pulsar_ml_AddEntryMessagesRate", "Messages added per second to the namespace's managed ledgers"),
    ("thr_in", "pulsar_ml_AddEntryBytesRate", "Bytes added per second to the namespace's managed ledgers"),
    ("backlog", "pulsar_ml_NumberOfMessagesInBacklog", "Unacknowledged messages over the namespace's cursors"),
    ("storage", "pulsar_ml_StoredMessagesSize", "Bytes of the namespace's managed ledgers (before replication)"),
)

_SUBSCRIPTION_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("back_log", "pulsar_subscription_back_log", "Messages in the subscription's backlog"),
    (
        "back_log_no_delayed",
        "pulsar_subscription_back_log_no_delayed",
        "Backlog without the messages held for delayed delivery",
    ),
    ("delayed", "pulsar_subscription_delayed", "Messages held for delayed delivery"),
    ("in_replay", "pulsar_subscription_in_replay", "Messages waiting to be delivered again"),
    ("rate_out", "pulsar_subscription_msg_rate_out", "Messages dispatched per second"),
    ("ack_rate", "pulsar_subscription_msg_ack_rate", "Messages acknowledged per second"),
    ("thr_out", "pulsar_subscription_msg_throughput_out", "Bytes dispatched per second"),
    ("rate_redeliver", "pulsar_subscription_msg_rate_redeliver", "Messages redelivered per second"),
    ("unacked", "pulsar_subscription_unacked_messages", "Messages delivered and not acknowledged"),
    (
        "blocked",
        "pulsar_subscription_blocked_on_unacked_messages",
        "1 while the subscription has reached its maxUnackedMessagesPerSubscription",
    ),
    ("last_expire", "pulsar_subscription_last_expire_timestamp", "When message expiry last acted (epoch ms)"),
    ("last_acked", "pulsar_subscription_last_acked_timestamp", "When a consumer last acknowledged (epoch ms)"),
    (
        "last_flow",
        "pulsar_subscription_last_consumed_flow_timestamp",
        "When a consumer last asked for messages (epoch ms)",
    ),
    ("last_consumed", "pulsar_subscription_last_consumed_timestamp", "When messages were last dispatched (epoch ms)"),
    (
        "last_md",
        "pulsar_subscription_last_mark_delete_advanced_timestamp",
        "When the mark-delete position last advanced (epoch ms)",
    ),
    ("rate_expired", "pulsar_subscription_msg_rate_expired", "Messages expired per second"),
    ("total_expired", "pulsar_subscription_total_msg_expired", "Messages expired since the topic was loaded"),
    ("consumers", "pulsar_subscription_consumers_count", "Consumers attached to the subscription"),
    (
        "delayed_index",
        "pulsar_subscription_delayed_message_index_size_bytes",
        "Bytes of the subscription's delayed-delivery index",
    ),
)

_CONSUMER_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("rate_out", "pulsar_consumer_msg_rate_out", "Messages dispatched to the consumer per second"),
    ("ack_rate", "pulsar_consumer_msg_ack_rate", "Messages the consumer acknowledged per second"),
    ("thr_out", "pulsar_consumer_msg_throughput_out", "Bytes dispatched to the consumer per second"),
    ("rate_redeliver", "pulsar_consumer_msg_rate_redeliver", "Messages redelivered to the consumer per second"),
    ("unacked", "pulsar_consumer_unacked_messages", "Messages delivered to the consumer and not acknowledged"),
    (
        "blocked",
        "pulsar_consumer_blocked_on_unacked_messages",
        "1 while the consumer has reached its maxUnackedMessagesPerConsumer",
    ),
    ("permits", "pulsar_consumer_available_permits", "Flow permits the consumer has granted and not used"),
)

_PRODUCER_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("rate_in", "pulsar_producer_msg_rate_in", "Messages published by the producer per second"),
    ("thr_in", "pulsar_producer_msg_throughput_in", "Bytes published by the producer per second"),
    ("avg_size", "pulsar_producer_msg_average_Size", "Average size of the producer's messages in bytes"),
)

TOPIC_METRIC_NAMES = tuple(name + ("_total" if kind == "counter" else "") for _, kind, name, _ in _TOPIC_FAMILIES)
"""The per-topic series the collector exports (as they appear in the text format)."""

SUBSCRIPTION_METRIC_NAMES = (
    *(name for _, name, _ in _SUBSCRIPTION_FAMILIES),
    *(name + "_total" for _, name, _ in _OUT_FAMILIES),
)
"""The per-subscription series (topic-level metrics only), labelled cluster/namespace/topic/subscription."""


class _TopicCollector(Collector):
    """Reads the loaded topics of one service at scrape time; every rate is the one the stats
    updater computed for the last stats period (`_stats` Rule 3), as in the topic stats.

    Topic level (``exposeTopicLevelMetricsInPrometheus``, the default): the topic series labelled
    cluster/namespace/topic, per-subscription series (``pulsar_out_messages_total`` and
    ``pulsar_out_bytes_total`` among them, as Pulsar exports them), and per-consumer /
    per-producer series when their keys are on. Namespace level: the topic series and the
    topics' out totals summed per namespace (labels cluster/namespace) and nothing per
    subscription, as Pulsar does.
    """

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return []  # computed at scrape time: nothing to check for duplicates up front

    def collect(self) -> Iterator[Metric]:
        service = self._metrics.service
        config = None if service is None else service.config
        topic_level = config is None or config.expose_topic_level_metrics_in_prometheus
        labels = ["cluster", "namespace", "topic"] if topic_level else ["cluster", "namespace"]
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            key: (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, doc, labels=labels)
            for key, kind, name, doc in _TOPIC_FAMILIES
        }
        # labels vary by sample (subscription, consumer or namespace): declared without any
        out_fams = {key: CounterMetricFamily(name, doc) for key, name, doc in _OUT_FAMILIES}
        sub_labels = ["cluster", "namespace", "topic", "subscription"]
        sub_fams = {key: GaugeMetricFamily(name, doc, labels=sub_labels) for key, name, doc in _SUBSCRIPTION_FAMILIES}
        cons_fams = {
            key: GaugeMetricFamily(name, doc, labels=[*sub_labels, "consumer_name", "consumer_id"])
            for key, name, doc in _CONSUMER_FAMILIES
        }
        prod_fams = {
            key: GaugeMetricFamily(name, doc, labels=["cluster", "namespace", "topic", "producer_name", "producer_id"])
            for key, name, doc in _PRODUCER_FAMILIES
        }
        drop_fam = GaugeMetricFamily(
            "pulsar_subscription_msg_drop_rate",
            "Messages dropped per second (non-persistent topics)",
            labels=sub_labels,
        )
        per_ns: dict[str, dict[str, float]] = {}
        ml_per_ns: dict[str, dict[str, float]] = {}  # persistent topics only: they have managed ledgers
        out_per_ns: dict[str, list[int]] = {}
        topics_per_ns: dict[str, int] = {}
        cluster = self._metrics.cluster if config is None else config.cluster_name
        replication = _ReplicationSeries(cluster, topic_level)
        if service is not None and config is not None:
            topics: list[Topic | NonPersistentTopic] = [*service.topics.values(), *service.np_topics.values()]
            consumer_level = config.expose_consumer_level_metrics_in_prometheus
            for topic in topics:
                if topic.closed:
                    continue
                ns = str(topic.name.namespace_name)
                topics_per_ns[ns] = topics_per_ns.get(ns, 0) + 1
                persistent = not isinstance(topic, NonPersistentTopic)
                values = (
                    self._np_topic_values(topic) if isinstance(topic, NonPersistentTopic) else self._topic_values(topic)
                )
                for sums in (per_ns.setdefault(ns, {}), *((ml_per_ns.setdefault(ns, {}),) if persistent else ())):
                    for key, value in values.items():
                        # an age aggregates as the oldest; everything else adds up
                        sums[key] = (
                            max(sums.get(key, -1.0), value) if key == "backlog_age" else sums.get(key, 0.0) + value
                        )
                totals = out_per_ns.setdefault(ns, [0, 0])
                totals[0] += topic.stats_state.out.msgs
                totals[1] += topic.stats_state.out.bytes
                if persistent and config.replication_metrics_enabled:
                    replication.add(ns, str(topic.name), getattr(topic, "replicators", {}))
                if topic_level:
                    base = [cluster, ns, str(topic.name)]
                    for key, value in values.items():
                        fams[key].add_metric(base, value)
                    self._subscriptions(
                        topic, base, sub_fams, out_fams, cons_fams if consumer_level else None, drop_fam
                    )
                    if config.expose_producer_level_metrics_in_prometheus:
                        self._producers(topic, base, prod_fams)
        if not topic_level:
            for ns, sums in sorted(per_ns.items()):
                for key, value in sums.items():
                    fams[key].add_metric([cluster, ns], value)
            for ns, (msgs, size) in sorted(out_per_ns.items()):
                out_fams["out_msgs"].add_sample(
                    "pulsar_out_messages_total", {"cluster": cluster, "namespace": ns}, float(msgs)
                )
                out_fams["out_bytes"].add_sample(
                    "pulsar_out_bytes_total", {"cluster": cluster, "namespace": ns}, float(size)
                )
        yield from fams.values()
        yield from replication.families()
        yield from out_fams.values()
        yield from sub_fams.values()
        yield drop_fam
        if config is not None and config.expose_consumer_level_metrics_in_prometheus:
            yield from cons_fams.values()
        if config is not None and config.expose_producer_level_metrics_in_prometheus:
            yield from prod_fams.values()
        for key, name, doc in _ML_NAMESPACE_FAMILIES:
            g = GaugeMetricFamily(name, doc, labels=["cluster", "namespace"])
            for ns, sums in sorted(ml_per_ns.items()):
                g.add_metric([cluster, ns], sums.get(key, 0.0))
            yield g
        count = GaugeMetricFamily(
            "pulsar_topics_count", "Topics loaded on this broker, per namespace", labels=["cluster", "namespace"]
        )
        for ns, n in sorted(topics_per_ns.items()):
            count.add_metric([cluster, ns], n)
        yield count
        conns = GaugeMetricFamily(
            "pulsar_active_connections", "Client connections open on the broker", labels=["cluster"]
        )
        conns.add_metric([cluster], 0 if service is None else len(service.connections))
        yield conns
        yield from self._back_pressure(cluster, [] if service is None else list(service.connections))
        yield from self._connection_totals(cluster)
        awaiting = self._metrics.bytes_awaiting_gc()
        if awaiting is not None:
            g = GaugeMetricFamily(
                "magnetar_retention_bytes_awaiting_gc", "Bytes of trimmed ledgers the bookies have not reclaimed yet"
            )
            g.add_metric([], float(awaiting))
            yield g

    def _connection_totals(self, cluster: str) -> Iterator[Metric]:
        # Pulsar's names for these two totals end in _count (not a Prometheus counter's _total)
        for name, doc, value in (
            (
                "pulsar_connection_created_total_count",
                "Client connections accepted since start",
                self._metrics.connections_created,
            ),
            (
                "pulsar_connection_closed_total_count",
                "Client connections closed since start",
                self._metrics.connections_closed,
            ),
        ):
            g = GaugeMetricFamily(name, doc, labels=["cluster"])
            g.add_metric([cluster], float(value))
            yield g

    @staticmethod
    def _back_pressure(cluster: str, connections: list[Any]) -> Iterator[Metric]:
        stats = [c.statistics() for c in connections if hasattr(c, "statistics")]
        queued = [s["queued_bytes"] for s in stats]
        for name, doc, value in (
            (
                "pulsar_broker_throttled_connections",
                "Connections not read now because their pending publish requests or bytes are at the limit",
                sum(1 for s in stats if s["paused"] == "publish-window"),
            ),
            (
                "magnetar_broker_unwritable_connections",
                "Connections whose bytes queued for writing are over the write-buffer high water mark",
                sum(1 for s in stats if not s["writable"]),
            ),
            ("magnetar_broker_outbound_queued_bytes", "Bytes queued for writing, summed over connections", sum(queued)),
            (
                "magnetar_broker_outbound_queued_bytes_max",
                "Bytes queued for writing on the fullest connection",
                max(queued, default=0),
            ),
        ):
            g = GaugeMetricFamily(name, doc, labels=["cluster"])
            g.add_metric([cluster], float(value))
            yield g

    @staticmethod
    def _topic_values(topic: Topic) -> dict[str, float]:
        state = topic.stats_state
        rate_in, thr_in, rate_out, thr_out = topic_rates(topic)
        storage = storage_numbers(topic)
        consumers = sum(len(s.consumers) for s in topic.subscriptions.values())
        values = {
            "in_msgs": topic.msg_in_counter,
            "in_bytes": topic.bytes_in_counter,
            "rate_in": rate_in,
            "rate_out": rate_out,
            "thr_in": thr_in,
            "thr_out": thr_out,
            "avg_size": thr_in / rate_in if rate_in else 0.0,
            "backlog": storage["msgBacklog"],
            "storage": storage["storageSize"],
            "backlog_size": storage["backlogSize"],
            "backlog_age": backlog_age_seconds(state, int(time.time() * 1000)),
            "producers": len(topic.producers),
            "txn_active": len(topic.txn_buffer.ongoing),
            "txn_committed": topic.txn_buffer.committed_count,
            "txn_aborted": topic.txn_buffer.aborted_count,
            "consumers": consumers,
            "subscriptions": len(topic.subscriptions),
            "publish_limited": topic.publish_limiter.throttled,
            "delayed_index": sum(_delayed(s) for s in topic.subscriptions.values()) * DELAYED_INDEX_ENTRY_BYTES,
            "retained": max(0, storage["storageSize"] - storage["backlogSize"]),
            "offloaded": topic.ml.offloaded_size,
            **dict(compaction_values(topic)),
            **_delayed_values(topic),
        }
        return {k: float(v) for k, v in values.items()}

    @staticmethod
    def _np_topic_values(topic: NonPersistentTopic) -> dict[str, float]:
        # the same keys as a persistent topic's; nothing is stored, compacted or held back
        rate_in, thr_in, rate_out, thr_out = topic_rates(topic)
        values: dict[str, float] = {key: 0.0 for key, _, _, _ in _TOPIC_FAMILIES}
        values.update(
            {
                "in_msgs": topic.msg_in_counter,
                "in_bytes": topic.bytes_in_counter,
                "rate_in": rate_in,
                "rate_out": rate_out,
                "thr_in": thr_in,
                "thr_out": thr_out,
                "avg_size": thr_in / rate_in if rate_in else 0.0,
                "producers": len(topic.producers),
                "consumers": topic.consumer_count,
                "subscriptions": len(topic.subscriptions),
                "publish_limited": topic.publish_limiter.throttled,
            }
        )
        return {k: float(v) for k, v in values.items()}

    @staticmethod
    def _subscriptions(
        topic: Topic | NonPersistentTopic,
        base: list[str],
        fams: dict[str, GaugeMetricFamily],
        out_fams: dict[str, CounterMetricFamily],
        cons_fams: dict[str, GaugeMetricFamily] | None,
        drop_fam: GaugeMetricFamily,
    ) -> None:
        cluster, ns, name_ = base
        subs: list[tuple[str, Subscription | NonPersistentSubscription]] = sorted(topic.subscriptions.items())
        for name, sub in subs:
            consumers = list(sub.consumers)
            rates = [c.rates.per_s for c in consumers]
            dispatcher = sub.dispatcher
            individual = dispatcher is not None and dispatcher.sub_type in INDIVIDUAL_ACK_TYPES
            delayed = _delayed(sub) if individual else 0
            in_replay = len(getattr(dispatcher, "replay", ())) if individual else 0
            backlog = 0  # a non-persistent subscription keeps nothing
            expired_rate, expired, last_expire, last_md = 0.0, 0, 0, 0
            if isinstance(sub, NonPersistentSubscription):
                drop_fam.add_metric([*base, name], sub.rates.per_s[0])
            else:
                backlog = sub.backlog
                expired_rate, expired = sub.rates.per_s[0], sub.msg_expired_counter
                last_expire, last_md = sub.last_expire_ms, sub.last_md_advanced_ms
            values = {
                "back_log": backlog,
                "back_log_no_delayed": max(0, backlog - delayed),
                "delayed": delayed,
                "in_replay": in_replay,
                "rate_out": sum(r[0] for r in rates),
                "ack_rate": sum(r[3] for r in rates),
                "thr_out": sum(r[1] for r in rates),
                "rate_redeliver": sum(r[2] for r in rates),
                "unacked": sum(c.unacked_messages for c in consumers),
                "blocked": 1 if sub.blocked else 0,
                "last_expire": last_expire,
                "last_acked": max((c.last_acked_ms for c in consumers), default=0),
                "last_flow": sub.last_flow_ms,
                "last_consumed": max((c.last_consumed_ms for c in consumers), default=0),
                "last_md": last_md,
                "rate_expired": expired_rate,
                "total_expired": expired,
                "consumers": len(consumers),
                "delayed_index": delayed * DELAYED_INDEX_ENTRY_BYTES,
            }
            for k, v in values.items():
                fams[k].add_metric([*base, name], float(v))
            sub_labels = {"cluster": cluster, "namespace": ns, "topic": name_, "subscription": name}
            out_fams["out_msgs"].add_sample("pulsar_out_messages_total", sub_labels, float(sub.out_counters.msgs))
            out_fams["out_bytes"].add_sample("pulsar_out_bytes_total", sub_labels, float(sub.out_counters.bytes))
            if cons_fams is None:
                continue
            for c in consumers:
                per_s = c.rates.per_s
                c_values = {
                    "rate_out": per_s[0],
                    "ack_rate": per_s[3],
                    "thr_out": per_s[1],
                    "rate_redeliver": per_s[2],
                    "unacked": c.unacked_messages,
                    "blocked": 1 if sub.consumer_blocked(c) else 0,
                    "permits": c.permits,
                }
                c_labels = [*base, name, c.name, str(c.consumer_id)]
                for k, v in c_values.items():
                    cons_fams[k].add_metric(c_labels, float(v))
                labels = {**sub_labels, "consumer_name": c.name, "consumer_id": str(c.consumer_id)}
                out_fams["out_msgs"].add_sample("pulsar_out_messages_total", labels, float(c.msg_out_counter))
                out_fams["out_bytes"].add_sample("pulsar_out_bytes_total", labels, float(c.bytes_out_counter))

    @staticmethod
    def _producers(topic: Topic | NonPersistentTopic, base: list[str], fams: dict[str, GaugeMetricFamily]) -> None:
        for p in list(topic.producers.values()):
            rate, thr, _chunks = p.rates.per_s
            gained_msgs, gained_bytes, _ = p.rates.gained
            avg = gained_bytes / gained_msgs if gained_msgs > 0 else 0.0
            for k, v in (("rate_in", rate), ("thr_in", thr), ("avg_size", avg)):
                fams[k].add_metric([*base, p.name, str(p.producer_id)], float(v))


_REPLICATION_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("rate_in", "pulsar_replication_rate_in", "Messages per second received from the remote cluster"),
    ("rate_out", "pulsar_replication_rate_out", "Messages per second replicated to the remote cluster"),
    ("thr_in", "pulsar_replication_throughput_in", "Bytes per second received from the remote cluster"),
    ("thr_out", "pulsar_replication_throughput_out", "Bytes per second replicated to the remote cluster"),
    ("backlog", "pulsar_replication_backlog", "Entries not replicated to the remote cluster yet"),
    ("connected", "pulsar_replication_connected_count", "Replicators connected to the remote cluster"),
    ("rate_expired", "pulsar_replication_rate_expired", "Messages per second expired before replication"),
    ("delay", "pulsar_replication_delay_in_seconds", "Seconds from publish to the remote's receipt (last message)"),
)
"""Pulsar's ``pulsar_replication_*`` gauges, labelled ``remote_cluster`` (`broker.replication`)."""


class _ReplicationSeries:
    """The ``pulsar_replication_*`` samples of one scrape: per topic and remote cluster, or summed
    per namespace and remote cluster (the delay: its largest) without topic-level metrics."""

    def __init__(self, cluster: str, topic_level: bool) -> None:
        self.cluster = cluster
        self.topic_level = topic_level
        labels = ["cluster", "namespace", *(["topic"] if topic_level else []), "remote_cluster"]
        self.fams = {key: GaugeMetricFamily(name, doc, labels=labels) for key, name, doc in _REPLICATION_FAMILIES}
        self.per_ns: dict[tuple[str, str], dict[str, float]] = {}

    def add(self, ns: str, topic: str, replicators: dict[str, Any]) -> None:
        """Count a topic's replicators (by remote cluster)."""
        for remote, r in sorted(replicators.items()):
            values = _replication_values(r.stats())
            if self.topic_level:
                for key, value in values.items():
                    self.fams[key].add_metric([self.cluster, ns, topic, remote], value)
                continue
            sums = self.per_ns.setdefault((ns, remote), {})
            for key, value in values.items():
                sums[key] = max(sums.get(key, 0.0), value) if key == "delay" else sums.get(key, 0.0) + value

    def families(self) -> Iterator[Metric]:
        """The families, with the namespace sums added when not per topic."""
        for (ns, remote), sums in sorted(self.per_ns.items()):
            for key, value in sums.items():
                self.fams[key].add_metric([self.cluster, ns, remote], value)
        yield from self.fams.values()


def _replication_values(stats: dict[str, Any]) -> dict[str, float]:
    return {
        "rate_in": float(stats["msgRateIn"]),
        "rate_out": float(stats["msgRateOut"]),
        "thr_in": float(stats["msgThroughputIn"]),
        "thr_out": float(stats["msgThroughputOut"]),
        "backlog": float(stats["replicationBacklog"]),
        "connected": 1.0 if stats["connected"] else 0.0,
        "rate_expired": float(stats["msgRateExpired"]),
        "delay": float(stats["replicationDelayInSeconds"]),
    }


def _delayed(sub: Subscription | NonPersistentSubscription) -> int:
    d = sub.dispatcher
    if d is None or d.sub_type not in INDIVIDUAL_ACK_TYPES:
        return 0
    return int(getattr(sub, "delayed_messages", 0))  # held by the subscription's delayed-delivery index


def compaction_values(topic: Topic) -> list[tuple[str, float]]:
    """The compaction metrics of a topic (Pulsar's names, see `_compaction`)."""
    c = topic.compactor
    view = c.view
    return [
        ("compact_removed", c.removed_events),
        ("compact_ok", c.succeeded),
        ("compact_failed", c.failed),
        ("compact_duration", c.last_duration_ms),
        ("compact_entries", view.entries if view else 0),
        ("compact_size", view.reader.size if view else 0),
    ]


class BrokerMetrics:
    """The broker's registry: publish latency, per-topic collector and retention metrics.

    ``bind(service)`` attaches the service whose topics are reported (done by `BrokerService`).
    ``extra_registries`` (for example the managed-ledger factory's) are appended by `render`.
    """

    def __init__(self, cluster: str = "standalone", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.cluster = cluster
        self.service: BrokerService | None = None
        # observed once per SEND: the lighter histogram (one lock, a bisect)
        self._publish_latency = BatchHistogram(
            "pulsar_broker_publish_latency",
            "Time from SEND arrival to its receipt, in milliseconds",
            buckets=PUBLISH_LATENCY_BUCKETS_MS,
            registry=self.registry,
            labels={"cluster": cluster},
        )
        self.retention = RetentionMetrics(self.registry)
        self.extra_registries: list[CollectorRegistry] = []
        self.gc_pending_hook: Callable[[], int | None] | None = None
        """Returns the bytes of trimmed ledgers the bookies still hold (None: unknown)."""
        self.connections_created = 0
        self.connections_closed = 0
        self.registry.register(_TopicCollector(self))
        # process_cpu_seconds_total and friends, as Pulsar's broker exposes them: load generators
        # read the broker's CPU per message from here (``magnetar perf --engine native``)
        ProcessCollector(registry=self.registry)

    def bind(self, service: BrokerService) -> None:
        """Report the topics of ``service``."""
        self.service = service

    def connection_opened(self) -> None:
        """Count a client connection accepted (``pulsar_connection_created_total_count``)."""
        self.connections_created += 1

    def connection_closed(self) -> None:
        """Count a client connection closed (``pulsar_connection_closed_total_count``)."""
        self.connections_closed += 1

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
        return {
            "topics": len(topics),
            "producers": sum(len(t.producers) for t in topics),
            "consumers": sum(len(sub.consumers) for t in topics for sub in t.subscriptions.values()),
        }


def _delayed_values(topic: Topic) -> dict[str, float]:
    indexes = [s.delayed for s in topic.subscriptions.values() if s.delayed is not None]
    return {
        "delayed_buckets": float(sum(d.buckets + 1 for d in indexes)),
        "delayed_loaded": float(sum(d.loaded for d in indexes)),
        "delayed_memory": float(sum(d.memory_bytes() for d in indexes)),
    }
