"""The broker's configuration: a frozen dataclass whose keys also accept Pulsar's broker.conf names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from magnetar.common.config import ConfigError, config_field, require_at_least, require_positive
from magnetar.common.tls import PULSAR_KEYS, TlsSettings, server_context
from retention import RetentionConfig

__all__ = [
    "BrokerConfig",
    "MESSAGE_SIZE_FRAME_PADDING",
    "AdvertisedListener",
    "INACTIVE_TOPIC_DELETE_MODES",
    "parse_advertised_listeners",
]

MESSAGE_SIZE_FRAME_PADDING = 10 * 1024
"""Room for the command and message metadata on top of ``maxMessageSize`` (Pulsar's frame padding).

``maxMessageSize`` bounds a message's payload: clients split chunked messages into payloads of
exactly that size, so a frame, and a SEND's metadata + payload, may exceed it by this much."""

_TOPIC_TYPES = ("non-partitioned", "partitioned")
INACTIVE_TOPIC_DELETE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")
"""Pulsar's InactiveTopicDeleteMode values (``brokerDeleteInactiveTopicsMode``)."""
_LISTENER_SCHEMES = ("pulsar", "pulsar+ssl")


@dataclass(frozen=True)
class AdvertisedListener:
    """One named listener of ``advertisedListeners``: its pulsar:// and pulsar+ssl:// URLs ('' = none)."""

    service_url: str = ""
    service_url_tls: str = ""


def parse_advertised_listeners(value: str) -> dict[str, AdvertisedListener]:
    """Parse ``advertisedListeners`` (``name:pulsar://host:port,name:pulsar+ssl://host:port,...``), in
    order, as Pulsar validates it: a name and a ``pulsar://`` or ``pulsar+ssl://`` URL with a host and
    a port per entry, at most one URL of each scheme per name, and no host:port shared by two names.
    Raises `ValueError` saying what is wrong."""
    found: dict[str, dict[str, str]] = {}
    owner: dict[str, str] = {}
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        name, url = name.strip(), url.strip()
        scheme, slashes, address = url.partition("://")
        if not sep or not name or not slashes:
            raise ValueError(f"{entry!r} is not <listener_name>:<scheme>://<host>:<port>")
        if scheme not in _LISTENER_SCHEMES:
            raise ValueError(f"{entry!r}: the scheme must be pulsar or pulsar+ssl, got {scheme!r}")
        host, colon, port = address.rstrip("/").rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{entry!r}: the URL needs a host and a port (1-65535)")
        urls = found.setdefault(name, {})
        if scheme in urls:
            raise ValueError(f"listener {name!r} has more than one {scheme}:// URL")
        urls[scheme] = f"{scheme}://{host}:{port}"
        other = owner.setdefault(f"{host}:{port}", name)
        if other != name:
            raise ValueError(f"{host}:{port} is advertised by two listeners, {other!r} and {name!r}")
    return {
        name: AdvertisedListener(urls.get("pulsar", ""), urls.get("pulsar+ssl", "")) for name, urls in found.items()
    }


@dataclass(frozen=True)
class BrokerConfig(RetentionConfig):
    """Settings of the Pulsar protocol server and its topics.

    Every field accepts its snake_case name or the Pulsar ``broker.conf`` alias. The retention,
    TTL and backlog-quota keys are `RetentionConfig`'s (inherited, so they come first in field
    order). `validate` raises `ConfigError` naming the key for values that cannot work (ports out
    of range, sizes <= 0, an unknown auto-creation type), then runs `RetentionConfig.validate`.
    """

    cluster_name: str = config_field("standalone", alias="clusterName", help="Name of this cluster.")
    advertised_address: str = config_field(
        "127.0.0.1", alias="advertisedAddress", help="Host name the broker gives clients in lookup answers."
    )
    bind_address: str = config_field("0.0.0.0", alias="bindAddress", help="Address the server listens on.")
    advertised_listeners: str = config_field(
        "",
        alias="advertisedListeners",
        help="Named listeners advertised in lookups, as in Pulsar: "
        "'internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6650,"
        "external:pulsar+ssl://broker.example.com:6651' (at most one pulsar:// and one pulsar+ssl:// "
        "URL per name). A client that connects with a listener name (listener_name=...) is given that "
        "listener's URLs; an unknown name fails its lookup (ServiceNotReady, as Pulsar). Without a "
        "listener name the internal listener is advertised. The URLs are advertised only: the broker "
        "listens on brokerServicePort / brokerServicePortTls. '' = advertisedAddress and the ports.",
    )
    internal_listener_name: str = config_field(
        "",
        alias="internalListenerName",
        help="Which of advertisedListeners is advertised to clients that give no listener name; '' = the first one.",
    )
    broker_service_port: int | None = config_field(
        6650,
        alias="brokerServicePort",
        help='Pulsar protocol port (pulsar://); empty ("") switches the plain-text port off, as in Pulsar.',
    )
    web_service_port: int | None = config_field(
        8080,
        alias="webServicePort",
        help='Admin REST port (http://); empty ("") switches the plain-text port off, as in Pulsar.',
    )
    http_max_request_size: int = config_field(
        10 * 1024 * 1024,
        alias="httpMaxRequestSize",
        help="Largest admin REST request body in bytes; a larger one is answered 413 without being read "
        "further (a Content-Length above it is refused before reading). 0 or negative = no limit "
        "(Pulsar's default is -1; Magnetar's is 10 MiB). Headers are bounded by the HTTP server.",
    )
    admin_max_stored_value_bytes: int = config_field(
        512 * 1024,
        help="Largest JSON body the admin REST API parses, and largest tenant info, namespace policies "
        "or schema definition it stores (one metadata node; ZooKeeper refuses nodes over its "
        "jute.maxbuffer, 1 MiB by default). A larger one is answered 413.",
    )
    max_num_partitions_per_partitioned_topic: int = config_field(
        10_000,
        alias="maxNumPartitionsPerPartitionedTopic",
        help="Most partitions a partitioned topic may have: creating or updating one with more (or an "
        "autoTopicCreationOverride with more) is answered 406. 0 or negative = no limit (Pulsar's "
        "default is 0; Magnetar bounds it so that one admin request cannot make every listing of "
        "the namespace enumerate billions of partitions).",
    )
    allow_auto_topic_creation: bool = config_field(
        True, alias="allowAutoTopicCreation", help="Create topics on first use inside existing namespaces."
    )
    allow_auto_topic_creation_type: str = config_field(
        "non-partitioned",
        alias="allowAutoTopicCreationType",
        help="Type of auto-created topics: non-partitioned or partitioned.",
    )
    default_num_partitions: int = config_field(
        1, alias="defaultNumPartitions", help="Partitions of an auto-created partitioned topic."
    )
    default_number_of_namespace_bundles: int = config_field(
        4,
        alias="defaultNumberOfNamespaceBundles",
        help="Bundles (hash ranges) a new namespace is split into; in a cluster each bundle is owned "
        "by one broker at a time.",
    )
    load_balancer_enabled: bool = config_field(
        True,
        alias="loadBalancerEnabled",
        help="In a cluster, the leader broker sheds load and splits hot bundles (the settings below).",
    )
    load_balancer_shedding_enabled: bool = config_field(
        True,
        alias="loadBalancerSheddingEnabled",
        help="Unload bundles from brokers loaded above the cluster average plus the threshold.",
    )
    load_balancer_shedding_interval_minutes: float = config_field(
        1.0,
        alias="loadBalancerSheddingIntervalMinutes",
        help="How often the leader checks the load reports for shedding and splitting.",
    )
    load_balancer_broker_threshold_shedder_percentage: float = config_field(
        10.0,
        alias="loadBalancerBrokerThresholdShedderPercentage",
        help="Percentage points of CPU above the cluster average before a broker sheds bundles.",
    )
    load_balancer_history_resource_percentage: float = config_field(
        0.9,
        alias="loadBalancerHistoryResourcePercentage",
        help="Weight of the previous load when smoothing a broker's load (0 = only the latest).",
    )
    load_balancer_auto_bundle_split_enabled: bool = config_field(
        True, alias="loadBalancerAutoBundleSplitEnabled", help="Split bundles above the limits below."
    )
    load_balancer_namespace_bundle_max_topics: int = config_field(
        1000, alias="loadBalancerNamespaceBundleMaxTopics", help="Topics of a bundle before it is split."
    )
    load_balancer_namespace_bundle_max_sessions: int = config_field(
        1000,
        alias="loadBalancerNamespaceBundleMaxSessions",
        help="Producers plus consumers of a bundle before it is split.",
    )
    load_balancer_namespace_bundle_max_msg_rate: float = config_field(
        30000.0,
        alias="loadBalancerNamespaceBundleMaxMsgRate",
        help="Messages per second (in + out) of a bundle before it is split.",
    )
    load_balancer_namespace_maximum_bundles: int = config_field(
        128, alias="loadBalancerNamespaceMaximumBundles", help="Bundles a namespace may be split into at most."
    )
    max_message_size: int = config_field(
        5 * 1024 * 1024,
        alias="maxMessageSize",
        help="Largest message (metadata + payload) accepted; advertised in CONNECTED.",
    )
    keep_alive_interval_s: int = config_field(
        30,
        alias="keepAliveIntervalSeconds",
        help="Idle time before the broker pings; twice this without any answer closes the connection.",
    )
    handshake_timeout_s: float = config_field(
        10.0,
        help="A connection that has not completed CONNECT this long after it was accepted is closed. "
        "Pulsar has no key for it (it closes such a connection at its first keep-alive check, "
        "keepAliveIntervalSeconds); clients send CONNECT as soon as TCP (and TLS) is up.",
    )
    broker_max_connections: int = config_field(
        0,
        alias="brokerMaxConnections",
        help="Connections served at once; one more is answered ERROR NotAllowed and closed right after "
        "accept (0 = no limit, Pulsar's default).",
    )
    broker_max_connections_per_ip: int = config_field(
        0,
        alias="brokerMaxConnectionsPerIp",
        help="Connections served at once from one client IP address; one more is answered ERROR NotAllowed "
        "and closed right after accept (0 = no limit, Pulsar's default; clients behind one NAT or "
        "proxy share an address).",
    )
    max_pending_publish_requests_per_connection: int = config_field(
        1000,
        alias="maxPendingPublishRequestsPerConnection",
        help="SEND frames per connection whose receipt has not been written to the client yet (waiting for "
        "storage, or for a client that does not read) before the broker stops reading it.",
    )
    max_pending_publish_bytes: int = config_field(
        64 * 1024 * 1024,
        alias="maxPendingPublishBytes",
        help="Bytes of SEND frames per connection whose receipt has not been written to the client yet before "
        "the broker stops reading it.",
    )
    write_buffer_high_water_mark: int = config_field(
        64 * 1024,
        alias="pulsarChannelWriteBufferHighWaterMark",
        help="Bytes queued for writing on a connection (receipts, responses, messages for its consumers) above "
        "which it is unwritable: the broker stops reading it and its consumers' dispatch waits, until the "
        "queue drains below pulsarChannelWriteBufferLowWaterMark. Pulsar does the same with "
        "pulsarChannelPauseReceivingRequestsIfUnwritable, which Magnetar always applies.",
    )
    write_buffer_low_water_mark: int = config_field(
        32 * 1024,
        alias="pulsarChannelWriteBufferLowWaterMark",
        help="Bytes queued for writing below which an unwritable connection is writable again "
        "(read again, its consumers dispatched to).",
    )
    broker_deduplication_enabled: bool = config_field(
        False,
        alias="brokerDeduplicationEnabled",
        help="Default for namespaces whose policies do not set deduplicationEnabled.",
    )
    deduplication_snapshot_interval_entries: int = config_field(
        1000,
        alias="brokerDeduplicationEntriesInterval",
        help="Stored entries between two snapshots of the producers' last sequence ids; a topic loading "
        "replays at most about this many entries after the last snapshot.",
    )
    deduplication_max_producers: int = config_field(
        10000,
        alias="brokerDeduplicationMaxNumberOfProducers",
        help="Producer names a topic remembers for deduplication and writes into a snapshot; past it the "
        "longest disconnected are forgotten first (connected ones never).",
    )
    deduplication_producer_inactivity_timeout_minutes: float = config_field(
        360.0,
        alias="brokerDeduplicationProducerInactivityTimeoutMinutes",
        help="Forget the deduplication state of a producer name disconnected this long (checked every third of it).",
    )
    deduplication_snapshot_frequency_s: float = config_field(
        120.0,
        alias="brokerDeduplicationSnapshotFrequencyInSeconds",
        help="How often each topic checks whether a time-based deduplication snapshot is due (0 = never).",
    )
    deduplication_snapshot_interval_s: float = config_field(
        120.0,
        alias="brokerDeduplicationSnapshotIntervalSeconds",
        help="Take a deduplication snapshot when this long passed since the last one and entries were "
        "stored since, besides every brokerDeduplicationEntriesInterval entries (0 = only by entries).",
    )
    dispatcher_max_read_batch_size: int = config_field(
        100, alias="dispatcherMaxReadBatchSize", help="Entries read from the cursor per dispatch round."
    )
    dispatcher_max_read_size_bytes: int = config_field(
        5 * 1024 * 1024, alias="dispatcherMaxReadSizeBytes", help="Bytes read per dispatch round."
    )
    active_consumer_failover_delay_ms: int = config_field(
        1000,
        alias="activeConsumerFailoverDelayTimeMillis",
        help="After the active consumer of a Failover subscription changes, wait this long before telling "
        "its consumers and delivering to the new one, so that the old one's acks in flight land first "
        "(0 = at once).",
    )
    dispatcher_max_replay_entries: int = config_field(
        5000, help="Entries waiting for redelivery before a subscription stops reading new ones."
    )
    max_unacked_messages_per_consumer: int = config_field(
        50000,
        alias="maxUnackedMessagesPerConsumer",
        help="Messages delivered but not acked before a Shared consumer stops receiving (0 = no limit).",
    )
    delayed_delivery_enabled: bool = config_field(
        True, alias="delayedDeliveryEnabled", help="Honour deliver_at_time on Shared and Key_Shared subscriptions."
    )
    delayed_delivery_tracker_factory_class_name: str = config_field(
        "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
        alias="delayedDeliveryTrackerFactoryClassName",
        help="The delayed-delivery index: org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory "
        "keeps it in bucket ledgers with only the near segments in memory (bounded, survives restarts); "
        "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory keeps all of it in memory "
        "(rebuilt by reading the backlog after a restart). Pulsar's default is the in-memory one; "
        "Magnetar's is the bucket one, so that a delayed backlog has a memory bound.",
    )
    delayed_delivery_tick_time_ms: int = config_field(
        1000,
        alias="delayedDeliveryTickTimeMillis",
        help="A subscription releases delayed messages at most once per tick (never before they are due, "
        "so up to this much after).",
    )
    delayed_delivery_min_index_count_per_bucket: int = config_field(
        50000,
        alias="delayedDeliveryMinIndexCountPerBucket",
        help="Delayed messages a subscription indexes in memory before sealing them into a stored bucket.",
    )
    delayed_delivery_max_time_step_per_bucket_snapshot_segment_s: int = config_field(
        300,
        alias="delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds",
        help="Due times one stored segment of a bucket spans at most (a segment is loaded whole).",
    )
    delayed_delivery_max_indexes_per_bucket_snapshot_segment: int = config_field(
        5000,
        alias="delayedDeliveryMaxIndexesPerBucketSnapshotSegment",
        help="Delayed messages in one stored segment of a bucket at most (-1: only the time step and the "
        "entry size cut segments).",
    )
    delayed_delivery_max_num_buckets: int = config_field(
        50,
        alias="delayedDeliveryMaxNumBuckets",
        help="Stored buckets per subscription before adjacent ones are merged (-1: never merge; the index's "
        "memory then grows with the number of buckets). Pulsar's default is -1; Magnetar's bounds memory.",
    )
    dispatcher_read_failure_backoff_initial_time_ms: int = config_field(
        15000,
        alias="dispatcherReadFailureBackoffInitialTimeInMs",
        help="A subscription whose read failed (bookies unavailable) retries after this long, doubling "
        "each time; nothing waiting for redelivery is dropped.",
    )
    dispatcher_read_failure_backoff_max_time_ms: int = config_field(
        60000, alias="dispatcherReadFailureBackoffMaxTimeInMs", help="The longest read-failure backoff."
    )
    max_unacked_messages_per_subscription: int = config_field(
        200000,
        alias="maxUnackedMessagesPerSubscription",
        help="Messages delivered but not acked on a Shared subscription before it stops dispatching (0 = no limit).",
    )
    max_producers_per_topic: int = config_field(
        0, alias="maxProducersPerTopic", help="Producers a topic accepts (0 = no limit)."
    )
    max_consumers_per_topic: int = config_field(
        0, alias="maxConsumersPerTopic", help="Consumers a topic accepts over all its subscriptions (0 = no limit)."
    )
    max_consumers_per_subscription: int = config_field(
        0, alias="maxConsumersPerSubscription", help="Consumers a subscription accepts (0 = no limit)."
    )
    max_publish_rate_per_topic_in_messages: int = config_field(
        0,
        alias="maxPublishRatePerTopicInMessages",
        help="Messages per second a topic takes before its producers' connections are paused (0 = no limit).",
    )
    max_publish_rate_per_topic_in_bytes: int = config_field(
        0,
        alias="maxPublishRatePerTopicInBytes",
        help="Bytes per second a topic takes before its producers' connections are paused (0 = no limit).",
    )
    dispatch_throttling_rate_per_topic_in_msg: int = config_field(
        0, alias="dispatchThrottlingRatePerTopicInMsg", help="Messages per second dispatched per topic (0 = no limit)."
    )
    dispatch_throttling_rate_per_topic_in_byte: int = config_field(
        0, alias="dispatchThrottlingRatePerTopicInByte", help="Bytes per second dispatched per topic (0 = no limit)."
    )
    dispatch_throttling_rate_per_subscription_in_msg: int = config_field(
        0,
        alias="dispatchThrottlingRatePerSubscriptionInMsg",
        help="Messages per second dispatched per subscription (0 = no limit).",
    )
    dispatch_throttling_rate_per_subscription_in_byte: int = config_field(
        0,
        alias="dispatchThrottlingRatePerSubscriptionInByte",
        help="Bytes per second dispatched per subscription (0 = no limit).",
    )
    subscribe_throttling_rate_per_consumer: int = config_field(
        0,
        alias="subscribeThrottlingRatePerConsumer",
        help="Subscribes one consumer (host, name, id) may make per period (0 = no limit).",
    )
    subscribe_rate_period_per_consumer_s: int = config_field(
        30, alias="subscribeRatePeriodPerConsumerInSecond", help="The period of subscribeThrottlingRatePerConsumer."
    )
    subscription_key_shared_enable: bool = config_field(
        True, alias="subscriptionKeySharedEnable", help="Allow Key_Shared subscriptions."
    )
    # inactive-topic deletion (broker.housekeeping._inactive_topics); namespaces and topics override the first four
    # keys with their inactiveTopicPolicies
    broker_delete_inactive_topics_enabled: bool = config_field(
        True,
        alias="brokerDeleteInactiveTopicsEnabled",
        help="Delete loaded topics that stayed inactive (see brokerDeleteInactiveTopicsMode) for "
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds, with their data, as Pulsar does by default.",
    )
    broker_delete_inactive_topics_frequency_s: int = config_field(
        60,
        alias="brokerDeleteInactiveTopicsFrequencySeconds",
        help="How often loaded topics are checked for inactivity (seconds).",
    )
    broker_delete_inactive_topics_mode: str = config_field(
        "delete_when_no_subscriptions",
        alias="brokerDeleteInactiveTopicsMode",
        help="delete_when_no_subscriptions: inactive = no subscription, producer or consumer; "
        "delete_when_subscriptions_caught_up: inactive = no producer or consumer and no subscription with a "
        "backlog (the subscriptions are deleted with the topic).",
    )
    broker_delete_inactive_topics_max_inactive_duration_s: int | None = config_field(
        None,
        alias="brokerDeleteInactiveTopicsMaxInactiveDurationSeconds",
        help="Seconds a topic must stay inactive before it is deleted; unset = "
        "brokerDeleteInactiveTopicsFrequencySeconds.",
    )
    broker_delete_inactive_partitioned_topic_metadata_enabled: bool = config_field(
        False,
        alias="brokerDeleteInactivePartitionedTopicMetadataEnabled",
        help="When the last stored partition of a partitioned topic is deleted for inactivity, delete the "
        "partitioned topic's metadata (and its topic policies) too.",
    )
    # subscription expiration (broker.housekeeping._subscription_expiry); namespaces override the first key
    subscription_expiration_time_minutes: int = config_field(
        0,
        alias="subscriptionExpirationTimeMinutes",
        help="Delete durable subscriptions that have had no consumer and no activity for this many minutes "
        "(0 = never), unless their namespace's subscription_expiration_time_minutes says otherwise.",
    )
    subscription_expiry_check_interval_minutes: int = config_field(
        5,
        alias="subscriptionExpiryCheckIntervalInMinutes",
        help="How often loaded topics' subscriptions are checked for expiration (minutes; 0 = never).",
    )
    topic_unload_idle_s: float = config_field(
        300.0, help="Unload (close the managed ledger of) a topic with no producer or consumer for this long."
    )
    policy_recheck_interval_s: float = config_field(
        5.0,
        help="How often loaded topics re-read their namespace's policies (deduplication), to see "
        "changes made through another broker or directly in the metadata store.",
    )
    compaction_monitor_interval_s: float = config_field(
        60.0,
        alias="brokerServiceCompactionMonitorIntervalInSeconds",
        help="How often each loaded topic compares its compaction backlog with its compaction threshold.",
    )
    compaction_threshold_bytes: int = config_field(
        0,
        alias="brokerServiceCompactionThresholdInBytes",
        help="Compact a topic automatically once its not-yet-compacted backlog exceeds this many bytes, "
        "unless its namespace sets compactionThreshold (0: off).",
    )
    schema_compatibility_strategy: str = config_field(
        "FULL",
        alias="schemaCompatibilityStrategy",
        help="Default schema compatibility: ALWAYS_COMPATIBLE, ALWAYS_INCOMPATIBLE, BACKWARD, FORWARD, FULL "
        "(and *_TRANSITIVE).",
    )
    is_allow_auto_update_schema: bool = config_field(
        True, alias="isAllowAutoUpdateSchema", help="Producers may register new schema versions."
    )
    default_namespace: str = config_field(
        "public/default", help="Namespace (and its tenant) created at start when missing."
    )
    # The retention, TTL and backlog-quota keys are `RetentionConfig`'s fields (inherited: declared
    # once, flat in broker.conf as in Pulsar); `retention_config()` copies them out.
    retention_enabled: bool = config_field(
        True, help="Run the retention service (retention, message TTL, backlog quotas) in the broker."
    )
    backlog_quota_hold_timeout_s: float = config_field(
        30.0,
        help="producer_request_hold: how long a SEND waits for the backlog to shrink before the "
        "broker answers SEND_ERROR (the client reconnects and resends).",
    )
    # /metrics detail, as Pulsar's keys: topic level (with per-subscription series) by default
    expose_topic_level_metrics_in_prometheus: bool = config_field(
        True,
        alias="exposeTopicLevelMetricsInPrometheus",
        help="Label /metrics series per topic and export per-subscription series; false = one series per "
        "namespace (sums over its topics), for brokers with many topics.",
    )
    expose_consumer_level_metrics_in_prometheus: bool = config_field(
        False,
        alias="exposeConsumerLevelMetricsInPrometheus",
        help="Also export pulsar_consumer_* series per consumer (with topic-level metrics only).",
    )
    expose_producer_level_metrics_in_prometheus: bool = config_field(
        False,
        alias="exposeProducerLevelMetricsInPrometheus",
        help="Also export pulsar_producer_* series per producer (with topic-level metrics only).",
    )
    stats_update_frequency_s: int = config_field(
        60,
        alias="statsUpdateFrequencyInSecs",
        help="Seconds between two computations of the rates in topic stats, /metrics, CONSUMER_STATS and load "
        "reports; each rate covers the period before its computation.",
    )
    stats_update_initial_delay_s: int = config_field(
        60, alias="statsUpdateInitialDelayInSecs", help="Seconds after start before the rates are first computed."
    )

    # TLS (Pulsar's keys). Off unless a TLS port is set; then the certificate and key are required.
    broker_service_port_tls: int | None = config_field(
        None,
        alias="brokerServicePortTls",
        help="Pulsar protocol port over TLS (pulsar+ssl://; Pulsar's usual value is 6651). Unset = no TLS port.",
    )
    web_service_port_tls: int | None = config_field(
        None,
        alias="webServicePortTls",
        help="Admin REST port over TLS (https://; Pulsar's usual value is 8443). Unset = no TLS port.",
    )
    tls_certificate_file_path: str = config_field(
        "", alias="tlsCertificateFilePath", help="PEM certificate (chain) of the TLS ports."
    )
    tls_key_file_path: str = config_field("", alias="tlsKeyFilePath", help="PEM private key of tlsCertificateFilePath.")
    tls_trust_certs_file_path: str = config_field(
        "",
        alias="tlsTrustCertsFilePath",
        help="PEM CA certificates a client certificate must chain to (checked when a client presents one).",
    )
    tls_require_trusted_client_cert_on_connect: bool = config_field(
        False,
        alias="tlsRequireTrustedClientCertOnConnect",
        help="Refuse TLS clients without a certificate trusted by tlsTrustCertsFilePath (mutual TLS).",
    )
    tls_allow_insecure_connection: bool = config_field(
        False, alias="tlsAllowInsecureConnection", help="Do not check client certificates at all on the TLS ports."
    )
    tls_protocols: tuple[str, ...] = config_field(
        (), alias="tlsProtocols", help='TLS versions allowed, e.g. ["TLSv1.3", "TLSv1.2"]; empty = defaults.'
    )
    tls_ciphers: tuple[str, ...] = config_field(
        (), alias="tlsCiphers", help="OpenSSL cipher names allowed for TLS 1.2; empty = defaults."
    )

    # ---- authentication and authorization (broker.auth; off by default)
    authentication_enabled: bool = config_field(
        False,
        alias="authenticationEnabled",
        help="Require clients (Pulsar protocol and admin REST) to authenticate with a configured provider.",
    )
    authentication_providers: tuple[str, ...] = config_field(
        [],
        alias="authenticationProviders",
        help="Enabled providers: 'token', 'tls' (client certificate CN; needs tlsTrustCertsFilePath) and/or "
        "'basic' (htpasswd users; needs basicAuthConf), or Pulsar's class names "
        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken / AuthenticationProviderTls / "
        "AuthenticationProviderBasic.",
    )
    authentication_refresh_check_s: int = config_field(
        60,
        alias="authenticationRefreshCheckSeconds",
        help="How often open connections are checked for expired credentials; an expired one gets "
        "AUTH_CHALLENGE (clients that support refresh) or is closed.",
    )
    anonymous_user_role: str = config_field(
        "",
        alias="anonymousUserRole",
        help="Role given to clients that send no credentials while authentication is on ('' = refuse them).",
    )
    authorization_enabled: bool = config_field(
        False,
        alias="authorizationEnabled",
        help="Check every operation against superUserRoles, tenant adminRoles and namespace/topic "
        "permissions (needs authenticationEnabled).",
    )
    super_user_roles: tuple[str, ...] = config_field([], alias="superUserRoles", help="Roles allowed every operation.")
    basic_auth_conf: str = config_field(
        "",
        alias="basicAuthConf",
        help="htpasswd file of the basic provider: file:///path, a path, or its contents in base64 "
        "($apr1$ MD5, {SHA} or DES crypt hashes).",
    )
    token_secret_key: str = config_field(
        "",
        alias="tokenSecretKey",
        help="HS256 secret of the token provider: data:;base64,<key> or file:///path (raw bytes).",
    )
    token_public_key: str = config_field(
        "",
        alias="tokenPublicKey",
        help="Public key (DER or PEM) of the token provider for RS256/ES256 tokens: data:;base64,<key> or "
        "file:///path.",
    )
    token_public_alg: str = config_field(
        "RS256", alias="tokenPublicAlg", help="Algorithm of tokenPublicKey: RS256 (RSA) or ES256 (EC)."
    )
    token_auth_claim: str = config_field("sub", alias="tokenAuthClaim", help="Token claim holding the role.")
    token_audience_claim: str = config_field(
        "aud", alias="tokenAudienceClaim", help="Token claim holding the audience (checked when tokenAudience is set)."
    )
    token_audience: str = config_field(
        "",
        alias="tokenAudience",
        help="When set, tokens must name this audience (this broker) in tokenAudienceClaim ('' = not checked).",
    )

    # ---- the broker's own client to the other brokers of a cluster (broker.cluster._broker_client)
    broker_client_authentication_plugin: str = config_field(
        "",
        alias="brokerClientAuthenticationPlugin",
        help="How this broker authenticates to the other brokers (admin fan-out, the leader's unloads and "
        "splits): 'token', 'tls' or 'basic', or Pulsar's org.apache.pulsar.client.impl.auth."
        "AuthenticationToken / AuthenticationTls / AuthenticationBasic ('' = no credentials). Its "
        "role must be one of superUserRoles.",
    )
    broker_client_authentication_parameters: str = config_field(
        "",
        alias="brokerClientAuthenticationParameters",
        help="Parameters of brokerClientAuthenticationPlugin: token 'token:<jwt>' or 'file:///path' (read "
        "at each call); tls 'tlsCertFile:/path,tlsKeyFile:/path' (or that JSON); basic "
        "'{\"userId\": ..., \"password\": ...}' or 'user:password'.",
    )
    broker_client_tls_enabled: bool = config_field(
        False,
        alias="brokerClientTlsEnabled",
        help="Call the other brokers on their https admin URL (webServicePortTls) and the TLS lookup URL.",
    )
    broker_client_trust_certs_file_path: str = config_field(
        "",
        alias="brokerClientTrustCertsFilePath",
        help="CA (PEM) the other brokers' certificates must chain to ('' = tlsTrustCertsFilePath, else the "
        "system CAs).",
    )
    broker_client_certificate_file_path: str = config_field(
        "",
        alias="brokerClientCertificateFilePath",
        help="Client certificate (PEM) this broker presents to the other brokers ('' = the tls plugin's "
        "tlsCertFile, else none).",
    )
    broker_client_key_file_path: str = config_field(
        "", alias="brokerClientKeyFilePath", help="Private key of brokerClientCertificateFilePath."
    )
    broker_client_tls_protocols: tuple[str, ...] = config_field(
        (), alias="brokerClient_tlsProtocols", help="TLS versions of the broker client ('' = defaults)."
    )
    broker_client_tls_ciphers: tuple[str, ...] = config_field(
        (), alias="brokerClient_tlsCiphers", help="OpenSSL cipher names of the broker client ('' = defaults)."
    )
    tls_hostname_verification_enabled: bool = config_field(
        False,
        alias="tlsHostnameVerificationEnabled",
        help="The broker client also checks that the other brokers' certificates name their host.",
    )

    # ---- geo-replication (broker.replication)
    replication_producer_queue_size: int = config_field(
        1000,
        alias="replicationProducerQueueSize",
        help="Messages a replicator has sent to a remote cluster and not had confirmed yet, at most.",
    )
    create_topic_to_remote_cluster_for_replication: bool = config_field(
        True,
        alias="createTopicToRemoteClusterForReplication",
        help="A replicator creates the topic on the remote cluster (partitioned like the local one) "
        "through the remote's admin REST before replicating to it.",
    )
    replication_metrics_enabled: bool = config_field(
        True,
        alias="replicationMetricsEnabled",
        help="Export the pulsar_replication_* metrics (per topic and remote cluster, or per namespace).",
    )
    replication_start_at: str = config_field(
        "latest",
        alias="replicationStartAt",
        help="Where a new replicator's cursor starts on a topic that already exists: 'latest' (only "
        "messages published from then on are replicated, as Pulsar) or 'earliest' (what the topic holds too).",
    )

    @property
    def inactive_topic_max_duration_s(self) -> int:
        """``brokerDeleteInactiveTopicsMaxInactiveDurationSeconds``, or the check frequency when unset
        (Pulsar's default)."""
        value = self.broker_delete_inactive_topics_max_inactive_duration_s
        return self.broker_delete_inactive_topics_frequency_s if value is None else value

    @property
    def tls_enabled(self) -> bool:
        """Whether a TLS port (protocol or admin REST) is configured."""
        return self.broker_service_port_tls is not None or self.web_service_port_tls is not None

    def tls_settings(self) -> TlsSettings:
        """The TLS keys as `magnetar.common.tls.TlsSettings` (errors then name Pulsar's keys)."""
        return TlsSettings(
            cert_file=self.tls_certificate_file_path,
            key_file=self.tls_key_file_path,
            trust_certs_file=self.tls_trust_certs_file_path,
            require_client_cert=self.tls_require_trusted_client_cert_on_connect,
            allow_insecure=self.tls_allow_insecure_connection,
            protocols=self.tls_protocols,
            ciphers=self.tls_ciphers,
            keys=PULSAR_KEYS,
        )

    def listeners(self) -> tuple[dict[str, AdvertisedListener], str]:
        """The advertised listeners by name and the internal listener's name ('' when none is set).
        Raises `ConfigError` naming the key that is wrong."""
        try:
            listeners = parse_advertised_listeners(self.advertised_listeners)
        except ValueError as exc:
            raise ConfigError("advertised_listeners", str(exc)) from None
        internal = self.internal_listener_name.strip()
        if internal and internal not in listeners:
            raise ConfigError(
                "internal_listener_name",
                f"{internal!r} is not one of advertisedListeners ({', '.join(listeners) or 'none'})",
            )
        if not internal and listeners:
            internal = next(iter(listeners))
        return listeners, internal

    def retention_config(self) -> RetentionConfig:
        """The retention part of this config as a plain `RetentionConfig` (the inherited keys)."""
        return RetentionConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RetentionConfig)})

    def validate(self) -> None:
        """Raise `ConfigError` for a value no broker can run with."""
        for key in ("broker_service_port", "web_service_port", "broker_service_port_tls", "web_service_port_tls"):
            port = getattr(self, key)
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(key, f"must be a port number (0-65535), got {port}")
        if self.broker_service_port is None and self.broker_service_port_tls is None:
            raise ConfigError("broker_service_port", "brokerServicePort and brokerServicePortTls are both off")
        if self.tls_enabled:
            server_context(self.tls_settings())  # the files exist and hold a key pair, or an error names the key
        self.listeners()  # raises ConfigError naming advertised_listeners / internal_listener_name
        if self.allow_auto_topic_creation_type not in _TOPIC_TYPES:
            raise ConfigError(
                "allow_auto_topic_creation_type",
                f"must be one of {', '.join(_TOPIC_TYPES)}, got {self.allow_auto_topic_creation_type!r}",
            )
        require_positive(
            self,
            "default_num_partitions",
            "max_message_size",
            "keep_alive_interval_s",
            "max_pending_publish_requests_per_connection",
            "max_pending_publish_bytes",
            "write_buffer_high_water_mark",
            "write_buffer_low_water_mark",
            "deduplication_snapshot_interval_entries",
            "dispatcher_max_read_batch_size",
            "dispatcher_max_read_size_bytes",
            "dispatcher_max_replay_entries",
            "replication_producer_queue_size",
            message="must be positive, got {value}",
        )
        if self.replication_start_at not in ("latest", "earliest"):
            raise ConfigError("replication_start_at", f"must be latest or earliest, got {self.replication_start_at!r}")
        require_at_least(
            self,
            "max_unacked_messages_per_consumer",
            "max_unacked_messages_per_subscription",
            "max_producers_per_topic",
            "max_consumers_per_topic",
            "max_consumers_per_subscription",
            "max_publish_rate_per_topic_in_messages",
            "max_publish_rate_per_topic_in_bytes",
            "dispatch_throttling_rate_per_topic_in_msg",
            "dispatch_throttling_rate_per_topic_in_byte",
            "dispatch_throttling_rate_per_subscription_in_msg",
            "dispatch_throttling_rate_per_subscription_in_byte",
            "subscribe_throttling_rate_per_consumer",
            message="must be 0 (no limit) or positive",
        )
        require_positive(self, "subscribe_rate_period_per_consumer_s")
        self._validate_delayed_delivery()
        require_positive(self, "handshake_timeout_s")
        require_at_least(self, "active_consumer_failover_delay_ms")
        require_at_least(
            self, "broker_max_connections", "broker_max_connections_per_ip", message="must be 0 (no limit) or positive"
        )
        require_positive(self, "topic_unload_idle_s", "policy_recheck_interval_s", "compaction_monitor_interval_s")
        self._validate_housekeeping()
        self._validate_limits_and_buffers()
        self._validate_namespaces_and_load()
        if self.authentication_enabled and not self.authentication_providers:
            raise ConfigError("authentication_providers", "must name a provider when authenticationEnabled")
        if self.authorization_enabled and not self.authentication_enabled:
            raise ConfigError("authorization_enabled", "needs authenticationEnabled")
        require_positive(self, "authentication_refresh_check_s")
        super().validate()

    def _validate_housekeeping(self) -> None:
        require_positive(self, "broker_delete_inactive_topics_frequency_s")
        require_at_least(
            self,
            "subscription_expiration_time_minutes",
            "subscription_expiry_check_interval_minutes",
            message="must be 0 (off) or positive",
        )
        if self.broker_delete_inactive_topics_mode not in INACTIVE_TOPIC_DELETE_MODES:
            raise ConfigError(
                "broker_delete_inactive_topics_mode",
                f"must be one of {', '.join(INACTIVE_TOPIC_DELETE_MODES)}, got "
                f"{self.broker_delete_inactive_topics_mode!r}",
            )
        if (self.broker_delete_inactive_topics_max_inactive_duration_s or 0) < 0:
            raise ConfigError("broker_delete_inactive_topics_max_inactive_duration_s", "must not be negative")
        require_positive(self, "deduplication_max_producers", "deduplication_producer_inactivity_timeout_minutes")
        require_at_least(
            self,
            "deduplication_snapshot_frequency_s",
            "deduplication_snapshot_interval_s",
            message="must be 0 (off) or positive",
        )

    def _validate_limits_and_buffers(self) -> None:
        require_at_least(self, "compaction_threshold_bytes", "stats_update_initial_delay_s")
        require_positive(self, "stats_update_frequency_s")
        if self.write_buffer_low_water_mark > self.write_buffer_high_water_mark:
            raise ConfigError(
                "write_buffer_low_water_mark",
                "must not exceed write_buffer_high_water_mark (pulsarChannelWriteBufferHighWaterMark)",
            )
        if self.max_message_size > self.max_pending_publish_bytes:
            raise ConfigError("max_pending_publish_bytes", "must be at least max_message_size")

    def _validate_namespaces_and_load(self) -> None:
        if self.schema_compatibility_strategy.upper() not in _STRATEGIES:
            raise ConfigError(
                "schema_compatibility_strategy", f"unknown strategy {self.schema_compatibility_strategy!r}"
            )
        tenant, _, namespace = self.default_namespace.partition("/")
        if not tenant or not namespace or "/" in namespace:
            raise ConfigError("default_namespace", "must look like '<tenant>/<namespace>'")
        require_positive(self, "backlog_quota_hold_timeout_s")
        require_positive(self, "admin_max_stored_value_bytes")
        require_positive(
            self,
            "load_balancer_shedding_interval_minutes",
            "load_balancer_namespace_bundle_max_topics",
            "load_balancer_namespace_bundle_max_sessions",
            "load_balancer_namespace_bundle_max_msg_rate",
        )
        if not 0.0 <= self.load_balancer_history_resource_percentage < 1.0:
            raise ConfigError("load_balancer_history_resource_percentage", "must be in [0, 1)")
        if not 1 <= self.load_balancer_namespace_maximum_bundles <= 1024:
            raise ConfigError("load_balancer_namespace_maximum_bundles", "must be between 1 and 1024")
        if not 1 <= self.default_number_of_namespace_bundles <= 1024:
            raise ConfigError(
                "default_number_of_namespace_bundles",
                f"must be between 1 and 1024, got {self.default_number_of_namespace_bundles}",
            )
        if 0 < self.max_num_partitions_per_partitioned_topic < self.default_num_partitions:
            raise ConfigError(
                "default_num_partitions",
                f"must not exceed max_num_partitions_per_partitioned_topic "
                f"({self.max_num_partitions_per_partitioned_topic})",
            )

    def _validate_delayed_delivery(self) -> None:
        factories = (
            "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
            "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory",
        )
        if self.delayed_delivery_tracker_factory_class_name not in factories:
            raise ConfigError(
                "delayed_delivery_tracker_factory_class_name",
                f"must be one of {', '.join(factories)}, got {self.delayed_delivery_tracker_factory_class_name!r}",
            )
        require_positive(
            self,
            "delayed_delivery_tick_time_ms",
            "delayed_delivery_min_index_count_per_bucket",
            "delayed_delivery_max_time_step_per_bucket_snapshot_segment_s",
            "dispatcher_read_failure_backoff_initial_time_ms",
        )
        # a bucket's footer (20 bytes a segment, a segment per message at worst) is one stored entry
        if self.delayed_delivery_min_index_count_per_bucket > 200_000:
            raise ConfigError("delayed_delivery_min_index_count_per_bucket", "must be at most 200000")
        for key in ("delayed_delivery_max_indexes_per_bucket_snapshot_segment", "delayed_delivery_max_num_buckets"):
            if getattr(self, key) == 0 or getattr(self, key) < -1:
                raise ConfigError(key, f"must be positive or -1 (no limit), got {getattr(self, key)}")
        if self.dispatcher_read_failure_backoff_max_time_ms < self.dispatcher_read_failure_backoff_initial_time_ms:
            raise ConfigError(
                "dispatcher_read_failure_backoff_max_time_ms",
                "must be at least dispatcher_read_failure_backoff_initial_time_ms",
            )


_STRATEGIES = {
    "ALWAYS_COMPATIBLE",
    "ALWAYS_INCOMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
}
