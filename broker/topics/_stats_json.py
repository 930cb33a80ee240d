"""Pulsar 4.0's stats JSON: topic, partitioned, subscription, consumer, publisher and internal stats.

Each builder returns the fields Pulsar's stats classes serialize (``TopicStatsImpl``,
``NonPersistentTopicStatsImpl``, ``PartitionedTopicStatsImpl``, ``SubscriptionStatsImpl``,
``NonPersistentSubscriptionStatsImpl``, ``ConsumerStatsImpl``, ``PublisherStatsImpl``,
``NonPersistentPublisherStatsImpl``, ``CompactionStatsImpl``, ``PersistentTopicInternalStats``),
in their order, with their JSON types: a Java ``double`` is a float, ``long`` / ``int`` an
integer, and a field whose value would be null is left out, as Pulsar's object mapper
(``NON_NULL``) leaves it out. The one field Pulsar does not have is a non-persistent
subscription's ``msgDropCounter`` (the count behind ``msgDropRate``). The values follow the
figures' definitions in Pulsar's broker (`_stats` for counters and rates); what Magnetar does not
have (offload, transactions, dispatch filters, system-topic traffic) is reported as
Pulsar reports it when unused: zero, empty or left out.

``tests/broker_admin/pulsar4_stats_fields.json`` lists Pulsar's fields and types; a test
compares every builder's output with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from managed_ledger import ManagedLedgerError
from retention import BacklogQuotaType, TopicPolicies, first_unacked_position

from ._dispatcher import SubType
from ._producer import AccessMode
from ._stats import INDIVIDUAL_ACK_TYPES, backlog_age_seconds, java_date

if TYPE_CHECKING:
    from ._consumer import Consumer
    from ._nonpersistent import NonPersistentSubscription, NonPersistentTopic
    from ._producer import Producer
    from ._subscription import Subscription
    from ._topic import Topic

__all__ = [
    "StatsOptions",
    "consumer_stats",
    "publisher_stats",
    "subscription_stats",
    "topic_stats",
    "np_subscription_stats",
    "np_topic_stats",
    "partitioned_stats",
    "internal_stats",
]

_ACCESS_MODES = {
    AccessMode.SHARED: "Shared",
    AccessMode.EXCLUSIVE: "Exclusive",
    AccessMode.WAIT_FOR_EXCLUSIVE: "WaitForExclusive",
    AccessMode.EXCLUSIVE_WITH_FENCING: "ExclusiveWithFencing",
}

_ML_STATES = {
    "initializing": "None",
    "ledger_opened": "LedgerOpened",
    "rolling": "CreatingLedger",
    "ledger_closed": "ClosedLedger",
    "terminated": "Terminated",
    "fenced": "Fenced",
    "closed": "Closed",
}
"""Managed-ledger states under Pulsar's names (``ManagedLedgerImpl.State``)."""

_CURSOR_STATES = {"open": "Open", "closed": "Closed"}
"""Cursor states under Pulsar's names (``ManagedCursorImpl.State``)."""

DELAYED_INDEX_ENTRY_BYTES = 24
"""Bytes Pulsar's in-memory delayed-delivery index spends per message (three longs: time, ledger,
entry), which ``delayedMessageIndexSizeInBytes`` reports."""


@dataclass(frozen=True)
class StatsOptions:
    """The query parameters of Pulsar's ``stats`` endpoints, with its defaults."""

    precise_backlog: bool = False  # Magnetar's backlog counts are always precise
    subscription_backlog_size: bool = True
    earliest_time_in_backlog: bool = False
    exclude_publishers: bool = False
    exclude_consumers: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> StatsOptions:
        """The options of a request's query (``getPreciseBacklog``, ``subscriptionBacklogSize``,
        ``getEarliestTimeInBacklog``, ``excludePublishers``, ``excludeConsumers``)."""

        def flag(name: str, default: bool) -> bool:
            value = query.get(name)
            return default if value is None else value.strip().lower() == "true"

        return cls(
            flag("getPreciseBacklog", False),
            flag("subscriptionBacklogSize", True),
            flag("getEarliestTimeInBacklog", False),
            flag("excludePublishers", False),
            flag("excludeConsumers", False),
        )


def _address(connection: Any) -> str:
    # Java prints a socket address as /host:port
    remote = str(getattr(connection, "remote", ""))
    return remote if not remote or remote.startswith("/") else "/" + remote


# ------------------------------------------------------------------ consumers and producers


def consumer_stats(
    c: Consumer, sub: Subscription | NonPersistentSubscription, ranges: list[tuple[int, int]] | None = None
) -> dict[str, Any]:
    """``ConsumerStatsImpl`` of one consumer (``ranges``: its Key_Shared hash ranges)."""
    msg_rate, byte_rate, redeliver_rate, ack_rate, chunk_rate = c.rates.per_s
    out: dict[str, Any] = {}
    role = getattr(getattr(c.connection, "auth_session", None), "role", None)
    if role is not None:
        out["appId"] = str(role)
    out.update(
        {
            "msgRateOut": msg_rate,
            "msgThroughputOut": byte_rate,
            "bytesOutCounter": c.bytes_out_counter,
            "msgOutCounter": c.msg_out_counter,
            "msgRateRedeliver": redeliver_rate,
            "messageAckRate": ack_rate,
            "chunkedMessageRate": chunk_rate,
            "consumerName": c.name,
            "availablePermits": c.permits,
            "unackedMessages": c.unacked_messages,
            "avgMessagesPerEntry": round(c.avg_messages_per_entry),
            "blockedConsumerOnUnackedMsgs": sub.consumer_blocked(c),
        }
    )
    if c.read_position_when_joining is not None:
        out["readPositionWhenJoining"] = str(c.read_position_when_joining)
    out.update(
        {
            "drainingHashesCount": 0,
            "drainingHashesClearedTotal": 0,
            "drainingHashesUnackedMessages": 0,
            "address": _address(c.connection),
            "connectedSince": c.connected_since,
            "clientVersion": str(getattr(c.connection, "client_version", "")),
            "lastAckedTimestamp": c.last_acked_ms,
            "lastConsumedTimestamp": c.last_consumed_ms,
            "lastConsumedFlowTimestamp": c.last_flow_ms,
        }
    )
    if ranges:
        # Magnetar's Key_Shared is Pulsar's classic implementation, which reports ranges as text
        out["keyHashRanges"] = [f"[{start}, {end}]" for start, end in ranges]
    out.update(
        {
            "metadata": dict(c.metadata),
            "lastAckedTime": java_date(c.last_acked_ms),
            "lastConsumedTime": java_date(c.last_consumed_ms),
        }
    )
    return out


def publisher_stats(p: Producer, *, non_persistent: bool = False) -> dict[str, Any]:
    """``PublisherStatsImpl`` (``NonPersistentPublisherStatsImpl`` with ``non_persistent``)."""
    msg_rate, byte_rate, chunk_rate = p.rates.per_s
    gained_msgs, gained_bytes, _ = p.rates.gained
    out: dict[str, Any] = {
        "accessMode": _ACCESS_MODES.get(p.access_mode, "Shared"),
        "msgRateIn": msg_rate,
        "msgThroughputIn": byte_rate,
        # Pulsar's Rate.getAverageValue: bytes per message over the last stats period
        "averageMsgSize": gained_bytes / gained_msgs if gained_msgs > 0 else 0.0,
        "chunkedMessageRate": chunk_rate,
        "producerId": p.producer_id,
        "supportsPartialProducer": False,
        "producerName": p.name,
        "address": _address(p.connection),
        "connectedSince": p.connected_since,
        "clientVersion": str(getattr(p.connection, "client_version", "")),
        "metadata": dict(p.metadata),
    }
    if non_persistent:
        out["msgDropRate"] = 0.0  # the broker never drops what a producer sends (`_nonpersistent` Rule 1)
    return out


# ------------------------------------------------------------------ subscriptions


def _consumers(sub: Subscription | NonPersistentSubscription) -> list[dict[str, Any]]:
    ranges: dict[int, list[tuple[int, int]]] = {}
    d = sub.dispatcher
    if d is not None:
        for start, end, owner in d.hash_ranges():
            ranges.setdefault(id(owner), []).append((start, end))
    return [consumer_stats(c, sub, ranges.get(id(c))) for c in list(sub.consumers)]


def _consumer_sums(consumers: list[dict[str, Any]]) -> dict[str, Any]:
    sums: dict[str, Any] = {
        key: sum((c[key] for c in consumers), 0.0)
        for key in ("msgRateOut", "msgThroughputOut", "msgRateRedeliver", "messageAckRate", "chunkedMessageRate")
    }
    sums["unackedMessages"] = sum(c["unackedMessages"] for c in consumers)
    return sums


def _key_shared_mode(sub: Subscription | NonPersistentSubscription) -> str | None:
    d = sub.dispatcher
    if d is None or d.sub_type != SubType.KEY_SHARED:
        return None
    return "STICKY" if d.sticky else "AUTO_SPLIT"


_THROTTLE_AND_FILTER_COUNTERS = (
    "filterProcessedMsgCount",
    "filterAcceptedMsgCount",
    "filterRejectedMsgCount",
    "filterRescheduledMsgCount",
    "dispatchThrottledMsgEventsBySubscriptionLimit",
    "dispatchThrottledBytesEventsBySubscriptionLimit",
    "dispatchThrottledMsgEventsByTopicLimit",
    "dispatchThrottledBytesEventsByTopicLimit",
    "dispatchThrottledMsgEventsByBrokerLimit",
    "dispatchThrottledBytesEventsByBrokerLimit",
)


def _ranges_serialized_size(sub: Subscription) -> int:
    """Bytes of the individually acknowledged ranges as a cursor stores them (Pulsar's
    ``MessageRange`` of two ``NestedPositionInfo``: ledger and entry id varints)."""

    def varint(v: int) -> int:
        v &= (1 << 64) - 1
        n = 1
        while v >= 0x80:
            v >>= 7
            n += 1
        return n

    def position(p: Any) -> int:
        body = 2 + varint(p.ledger_id) + varint(p.entry_id)
        return 1 + varint(body) + body

    total = 0
    for lo, hi in sub.cursor.individually_deleted_ranges:
        body = position(lo) + position(hi)
        total += 1 + varint(body) + body
    return total


def _delayed(sub: Subscription | NonPersistentSubscription) -> int:
    # held by the subscription's delayed-delivery index (none on non-persistent topics)
    return int(getattr(sub, "delayed_messages", 0))


async def _earliest_publish_time(sub: Subscription) -> int:
    """Publish time of the subscription's first unacknowledged message, -1 when there is none."""
    from ..housekeeping._retention_hooks import publish_time_of

    ml = sub.topic.ml
    pos = first_unacked_position(ml.ledgers, sub.cursor.mark_delete_position)
    if pos is None:
        return -1
    try:
        t = publish_time_of(await ml.read_entry(pos))
    except ManagedLedgerError:
        return 0
    return -1 if t is None else t


async def subscription_stats(sub: Subscription, options: StatsOptions = StatsOptions()) -> dict[str, Any]:
    """``SubscriptionStatsImpl`` of a persistent subscription."""
    consumers = _consumers(sub)
    sums = _consumer_sums(consumers)
    d = sub.dispatcher
    individual = d is not None and d.sub_type in INDIVIDUAL_ACK_TYPES
    delayed = _delayed(sub) if individual else 0
    backlog = sub.backlog
    active = (
        getattr(d, "active", None) if d is not None and d.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER) else None
    )
    ranges = sub.cursor.individually_deleted_ranges
    out: dict[str, Any] = {
        "msgRateOut": sums["msgRateOut"],
        "msgThroughputOut": sums["msgThroughputOut"],
        "bytesOutCounter": sub.out_counters.bytes,
        "msgOutCounter": sub.out_counters.msgs,
        "msgRateRedeliver": sums["msgRateRedeliver"],
        "messageAckRate": sums["messageAckRate"],
        "chunkedMessageRate": sums["chunkedMessageRate"],
        "msgBacklog": backlog,
        "backlogSize": sub.cursor.backlog_size if options.subscription_backlog_size else -1,
        "earliestMsgPublishTimeInBacklog": (
            await _earliest_publish_time(sub) if options.earliest_time_in_backlog else 0
        ),
        "msgBacklogNoDelayed": max(0, backlog - delayed),
        "blockedSubscriptionOnUnackedMsgs": sub.blocked,
        "msgDelayed": delayed,
        "msgInReplay": len(d.replay) if individual and d is not None else 0,
        "unackedMessages": sums["unackedMessages"],
        "type": sub.type_name,
    }
    if active is not None:
        out["activeConsumerName"] = active.name
    out.update(
        {
            "msgRateExpired": sub.rates.per_s[0],
            "totalMsgExpired": sub.msg_expired_counter,
            "lastExpireTimestamp": sub.last_expire_ms,
            "lastConsumedFlowTimestamp": sub.last_flow_ms,
            "lastConsumedTimestamp": max((c["lastConsumedTimestamp"] for c in consumers), default=0),
            "lastAckedTimestamp": max((c["lastAckedTimestamp"] for c in consumers), default=0),
            "lastMarkDeleteAdvancedTimestamp": sub.last_md_advanced_ms,
            "consumers": [] if options.exclude_consumers else consumers,
            "isDurable": sub.durable,
            "isReplicated": False,
            "allowOutOfOrderDelivery": False,
        }
    )
    mode = _key_shared_mode(sub)
    if mode is not None:
        out["keySharedMode"] = mode
    out.update(
        {
            "consumersAfterMarkDeletePosition": {
                c.name: str(c.join_barrier) for c in sub.consumers if c.join_barrier is not None
            },
            "drainingHashesCount": 0,
            "drainingHashesClearedTotal": 0,
            "drainingHashesUnackedMessages": 0,
            "nonContiguousDeletedMessagesRanges": len(ranges),
            "nonContiguousDeletedMessagesRangesSerializedSize": _ranges_serialized_size(sub),
            "delayedMessageIndexSizeInBytes": delayed * DELAYED_INDEX_ENTRY_BYTES,
            "subscriptionProperties": {},
            **dict.fromkeys(_THROTTLE_AND_FILTER_COUNTERS, 0),
            "durable": sub.durable,
            "replicated": False,
        }
    )
    return out


def np_subscription_stats(sub: NonPersistentSubscription) -> dict[str, Any]:
    """``NonPersistentSubscriptionStatsImpl`` (plus ``msgDropCounter``)."""
    consumers = _consumers(sub)
    sums = _consumer_sums(consumers)
    out: dict[str, Any] = {
        "msgRateOut": sums["msgRateOut"],
        "msgThroughputOut": sums["msgThroughputOut"],
        "bytesOutCounter": sub.out_counters.bytes,
        "msgOutCounter": sub.out_counters.msgs,
        "msgRateRedeliver": sums["msgRateRedeliver"],
        "messageAckRate": sums["messageAckRate"],
        "chunkedMessageRate": 0.0,
        "msgBacklog": 0,
        "backlogSize": 0,
        "earliestMsgPublishTimeInBacklog": 0,
        "msgBacklogNoDelayed": 0,
        "blockedSubscriptionOnUnackedMsgs": False,
        "msgDelayed": 0,
        "msgInReplay": 0,
        "unackedMessages": 0,
        "type": sub.type_name,
        "msgRateExpired": 0.0,
        "totalMsgExpired": 0,
        "lastExpireTimestamp": 0,
        "lastConsumedFlowTimestamp": 0,
        "lastConsumedTimestamp": 0,
        "lastAckedTimestamp": 0,
        "lastMarkDeleteAdvancedTimestamp": 0,
        "consumers": consumers,
        "isDurable": False,
        "isReplicated": False,
        "allowOutOfOrderDelivery": False,
    }
    mode = _key_shared_mode(sub)
    if mode is not None:
        out["keySharedMode"] = mode
    out.update(
        {
            "consumersAfterMarkDeletePosition": {},
            "drainingHashesCount": 0,
            "drainingHashesClearedTotal": 0,
            "drainingHashesUnackedMessages": 0,
            "nonContiguousDeletedMessagesRanges": 0,
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
            "delayedMessageIndexSizeInBytes": 0,
            "subscriptionProperties": {},
            **dict.fromkeys(_THROTTLE_AND_FILTER_COUNTERS, 0),
            "msgDropRate": sub.rates.per_s[0],
            "msgDropCounter": sub.msg_drop_counter,
            "replicated": False,
            "durable": False,
        }
    )
    return out


# ------------------------------------------------------------------ topics


def _compaction(topic: Topic | None) -> dict[str, int]:
    out = {
        "lastCompactionRemovedEventCount": 0,
        "lastCompactionSucceedTimestamp": 0,
        "lastCompactionFailedTimestamp": 0,
        "lastCompactionDurationTimeInMills": 0,
    }
    if topic is not None:
        stats = topic.compactor.stats()
        for key in out:
            out[key] = int(stats.get(key, 0) or 0)
    return out


def _topic_head(
    topic: Topic | NonPersistentTopic, publishers: list[dict[str, Any]], subs: Mapping[str, dict[str, Any]]
) -> dict[str, Any]:
    """The counters and rates every topic kind reports the same way."""
    rate_in = sum((p["msgRateIn"] for p in publishers), 0.0)
    thr_in = sum((p["msgThroughputIn"] for p in publishers), 0.0)
    out = topic.stats_state.out
    return {
        "msgRateIn": rate_in,
        "msgThroughputIn": thr_in,
        "msgRateOut": sum((s["msgRateOut"] for s in subs.values()), 0.0),
        "msgThroughputOut": sum((s["msgThroughputOut"] for s in subs.values()), 0.0),
        "bytesInCounter": topic.bytes_in_counter,
        "msgInCounter": topic.msg_in_counter,
        "systemTopicBytesInCounter": 0,
        "bytesOutCounter": out.bytes,
        "msgOutCounter": out.msgs,
        "bytesOutInternalCounter": 0,
        "averageMsgSize": thr_in / rate_in if rate_in else 0.0,
    }


async def _quota_limits(topic: Topic) -> tuple[int, int]:
    """The topic's backlog quota limits in force: (bytes, seconds), -1 where none."""
    service = topic.service
    try:
        ns, own = await service.policies.overrides(topic.name)
    except ValueError:  # stored policies that do not parse: no limit is known
        return -1, -1
    quotas = TopicPolicies.resolve(service.policies.config, ns, own).backlog_quotas
    size = quotas.get(BacklogQuotaType.DESTINATION_STORAGE)
    age = quotas.get(BacklogQuotaType.MESSAGE_AGE)
    return (size.limit_size if size is not None else -1), (age.limit_time if age is not None else -1)


async def topic_stats(topic: Topic, options: StatsOptions = StatsOptions()) -> dict[str, Any]:
    """``TopicStatsImpl`` of a loaded persistent topic."""
    state = topic.stats_state
    publishers = [publisher_stats(p) for p in list(topic.producers.values())]
    subs = {
        name: await subscription_stats(sub, options)
        for name, sub in sorted(list(topic.subscriptions.items()))
        if not sub.closed
    }
    durable = [s for s in topic.subscriptions.values() if s.durable and not s.closed]
    size_limit, time_limit = await _quota_limits(topic)
    earliest = 0
    backlog_size = max((s.cursor.backlog_size for s in durable), default=0)
    if options.earliest_time_in_backlog and backlog_size:
        times = [await _earliest_publish_time(s) for s in durable]
        earliest = min((t for t in times if t > 0), default=0)
    out = _topic_head(topic, publishers, subs)
    out.update(
        {
            "msgChunkPublished": state.msg_chunk_published,
            "storageSize": topic.ml.total_size,
            "backlogSize": backlog_size,
            "backlogQuotaLimitSize": size_limit,
            "backlogQuotaLimitTime": time_limit,
            "oldestBacklogMessageAgeSeconds": backlog_age_seconds(state, int(time.time() * 1000)),
        }
    )
    if state.oldest_subscription is not None:
        out["oldestBacklogMessageSubscriptionName"] = state.oldest_subscription
    offload = topic.ml.offload_stats()
    out.update(
        {
            "publishRateLimitedTimes": topic.publish_limiter.throttled,
            "earliestMsgPublishTimeInBacklogs": earliest,
            "offloadedStorageSize": topic.ml.offloaded_size,
            "lastOffloadLedgerId": offload["lastOffloadLedgerId"],
            "lastOffloadSuccessTimeStamp": offload["lastOffloadSuccessTimeStamp"],
            "lastOffloadFailureTimeStamp": offload["lastOffloadFailureTimeStamp"],
            "ongoingTxnCount": len(topic.txn_buffer.ongoing),
            "abortedTxnCount": topic.txn_buffer.aborted_count,
            "committedTxnCount": topic.txn_buffer.committed_count,
            "publishers": [] if options.exclude_publishers else publishers,
            "waitingPublishers": len(topic.waiting_producers),
            "subscriptions": subs,
            "replication": {remote: r.stats() for remote, r in sorted(topic.replicators.items())},
            "deduplicationStatus": "Enabled" if topic.dedup is not None else "Disabled",
        }
    )
    if topic.topic_epoch is not None:
        out["topicEpoch"] = topic.topic_epoch
    out.update(
        {
            "nonContiguousDeletedMessagesRanges": sum(s["nonContiguousDeletedMessagesRanges"] for s in subs.values()),
            "nonContiguousDeletedMessagesRangesSerializedSize": sum(
                s["nonContiguousDeletedMessagesRangesSerializedSize"] for s in subs.values()
            ),
            "delayedMessageIndexSizeInBytes": sum(s["delayedMessageIndexSizeInBytes"] for s in subs.values()),
            "compaction": _compaction(topic),
            "ownerBroker": topic.service.broker_id,
        }
    )
    return out


def np_topic_stats(topic: NonPersistentTopic, options: StatsOptions = StatsOptions()) -> dict[str, Any]:
    """``NonPersistentTopicStatsImpl`` of a loaded non-persistent topic."""
    publishers = [publisher_stats(p, non_persistent=True) for p in list(topic.producers.values())]
    subs = {name: np_subscription_stats(sub) for name, sub in sorted(list(topic.subscriptions.items()))}
    if options.exclude_consumers:
        for s in subs.values():
            s["consumers"] = []
    out = _topic_head(topic, publishers, subs)
    out.update(
        {
            "msgChunkPublished": False,
            "storageSize": 0,
            "backlogSize": 0,
            "backlogQuotaLimitSize": 0,
            "backlogQuotaLimitTime": 0,
            "oldestBacklogMessageAgeSeconds": 0,
            "publishRateLimitedTimes": topic.publish_limiter.throttled,
            "earliestMsgPublishTimeInBacklogs": 0,
            "offloadedStorageSize": 0,
            "lastOffloadLedgerId": 0,
            "lastOffloadSuccessTimeStamp": 0,
            "lastOffloadFailureTimeStamp": 0,
            "ongoingTxnCount": 0,
            "abortedTxnCount": 0,
            "committedTxnCount": 0,
            "waitingPublishers": len(topic.waiting_producers),
            "deduplicationStatus": "Disabled",
        }
    )
    if topic.topic_epoch is not None:
        out["topicEpoch"] = topic.topic_epoch
    out.update(
        {
            "nonContiguousDeletedMessagesRanges": 0,
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
            "delayedMessageIndexSizeInBytes": 0,
            "compaction": _compaction(None),
            "ownerBroker": topic.service.broker_id,
            # publishers drop nothing (`_nonpersistent` Rule 1): Pulsar's topic-level drop rate is theirs
            "msgDropRate": sum((p["msgDropRate"] for p in publishers), 0.0),
            "publishers": [] if options.exclude_publishers else publishers,
            "subscriptions": subs,
            "replication": {},
        }
    )
    return out


# ------------------------------------------------------------------ partitioned topics (Pulsar's add())


def _add_consumer(into: dict[str, Any], c: dict[str, Any]) -> None:
    for key in (
        "msgRateOut",
        "messageAckRate",
        "msgThroughputOut",
        "bytesOutCounter",
        "msgOutCounter",
        "msgRateRedeliver",
        "availablePermits",
        "unackedMessages",
        "drainingHashesClearedTotal",
    ):
        into[key] = into.get(key, 0) + c[key]
    for key in (
        "blockedConsumerOnUnackedMsgs",
        "readPositionWhenJoining",
        "drainingHashesCount",
        "drainingHashesUnackedMessages",
        "keyHashRanges",
        "consumerName",
    ):
        if key in c:
            into[key] = c[key]


def _empty_consumer() -> dict[str, Any]:
    return {
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "bytesOutCounter": 0,
        "msgOutCounter": 0,
        "msgRateRedeliver": 0.0,
        "messageAckRate": 0.0,
        "chunkedMessageRate": 0.0,
        "availablePermits": 0,
        "unackedMessages": 0,
        "avgMessagesPerEntry": 0,
        "blockedConsumerOnUnackedMsgs": False,
        "drainingHashesCount": 0,
        "drainingHashesClearedTotal": 0,
        "drainingHashesUnackedMessages": 0,
        "lastAckedTimestamp": 0,
        "lastConsumedTimestamp": 0,
        "lastConsumedFlowTimestamp": 0,
        "lastAckedTime": java_date(0),
        "lastConsumedTime": java_date(0),
    }


_SUB_SUMS = (
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "msgBacklog",
    "backlogSize",
    "msgBacklogNoDelayed",
    "msgDelayed",
    "msgInReplay",
    "unackedMessages",
    "msgRateExpired",
    "totalMsgExpired",
    "drainingHashesCount",
    "drainingHashesClearedTotal",
    "drainingHashesUnackedMessages",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "delayedMessageIndexSizeInBytes",
    *_THROTTLE_AND_FILTER_COUNTERS,
)


def _add_subscription(into: dict[str, Any], s: dict[str, Any]) -> None:
    """Pulsar's ``SubscriptionStatsImpl.add``: sums, the type of the last, ORed flags, consumers
    merged by position."""
    for key in _SUB_SUMS:
        into[key] = into.get(key, 0) + s[key]
    if "msgDropRate" in s:
        into["msgDropRate"] = into.get("msgDropRate", 0.0) + s["msgDropRate"]
        into["msgDropCounter"] = into.get("msgDropCounter", 0) + s["msgDropCounter"]
    if "type" in s:
        into["type"] = s["type"]
    for flag, alias in (("isReplicated", "replicated"), ("isDurable", "durable")):
        into[flag] = into[alias] = bool(into.get(flag)) or s[flag]
    into["allowOutOfOrderDelivery"] = bool(into.get("allowOutOfOrderDelivery")) or s["allowOutOfOrderDelivery"]
    mine = into.setdefault("consumers", [])
    for i, c in enumerate(s["consumers"]):
        if i == len(mine):
            mine.append(_empty_consumer())
        _add_consumer(mine[i], c)
    into.setdefault("consumersAfterMarkDeletePosition", {}).update(s["consumersAfterMarkDeletePosition"])
    mine_t, theirs = into.get("earliestMsgPublishTimeInBacklog", 0), s["earliestMsgPublishTimeInBacklog"]
    into["earliestMsgPublishTimeInBacklog"] = min(mine_t, theirs) if mine_t and theirs else max(mine_t, theirs)
    into.setdefault("subscriptionProperties", {}).update(s["subscriptionProperties"])


def _empty_subscription(non_persistent: bool) -> dict[str, Any]:
    out: dict[str, Any] = {key: 0 for key in _SUB_SUMS}
    for key in (
        "msgRateOut",
        "msgThroughputOut",
        "msgRateRedeliver",
        "messageAckRate",
        "chunkedMessageRate",
        "msgRateExpired",
    ):
        out[key] = 0.0
    out.update(
        {
            "earliestMsgPublishTimeInBacklog": 0,
            "blockedSubscriptionOnUnackedMsgs": False,
            "lastExpireTimestamp": 0,
            "lastConsumedFlowTimestamp": 0,
            "lastConsumedTimestamp": 0,
            "lastAckedTimestamp": 0,
            "lastMarkDeleteAdvancedTimestamp": 0,
            "consumers": [],
            "isDurable": False,
            "isReplicated": False,
            "allowOutOfOrderDelivery": False,
            "consumersAfterMarkDeletePosition": {},
            "subscriptionProperties": {},
            "durable": False,
            "replicated": False,
        }
    )
    if non_persistent:
        out.update({"msgDropRate": 0.0, "msgDropCounter": 0})
    return out


def _add_publisher(into: dict[str, Any], p: dict[str, Any]) -> None:
    """Pulsar's ``PublisherStatsImpl.add``: rates summed, the average size averaged."""
    into["_count"] = into.get("_count", 0) + 1
    into["msgRateIn"] += p["msgRateIn"]
    into["msgThroughputIn"] += p["msgThroughputIn"]
    into["averageMsgSize"] = (into["averageMsgSize"] * (into["_count"] - 1) + p["averageMsgSize"]) / into["_count"]
    if "msgDropRate" in p:
        into["msgDropRate"] += p["msgDropRate"]


def _add_replicator(into: dict[str, Any], remote: str, r: dict[str, Any]) -> None:
    """Pulsar's ``ReplicatorStatsImpl.add``: rates and backlogs summed, connected only if every
    partition's replicator is, the largest delay."""
    total = into.get(remote)
    if total is None:
        into[remote] = dict(r)
        return
    for key in (
        "msgRateIn",
        "msgThroughputIn",
        "msgRateOut",
        "msgThroughputOut",
        "msgRateExpired",
        "replicationBacklog",
    ):
        total[key] += r[key]
    total["connected"] = total["connected"] and r["connected"]
    total["replicationDelayInSeconds"] = max(total["replicationDelayInSeconds"], r["replicationDelayInSeconds"])


def partitioned_stats(
    n: int, parts: Mapping[str, dict[str, Any]], *, per_partition: bool = True, non_persistent: bool = False
) -> dict[str, Any]:
    """``PartitionedTopicStatsImpl``: the stats of the partitions (``parts``, by partition name)
    added up as Pulsar's ``TopicStatsImpl.add`` does, ``metadata`` and, with ``per_partition``
    (Pulsar's default), each partition's own stats."""
    total: dict[str, Any] = {
        "msgRateIn": 0.0,
        "msgThroughputIn": 0.0,
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "bytesInCounter": 0,
        "msgInCounter": 0,
        "systemTopicBytesInCounter": 0,
        "bytesOutCounter": 0,
        "msgOutCounter": 0,
        "bytesOutInternalCounter": 0,
        "averageMsgSize": 0.0,
        "msgChunkPublished": False,
        "storageSize": 0,
        "backlogSize": 0,
        "backlogQuotaLimitSize": 0,
        "backlogQuotaLimitTime": 0,
        "oldestBacklogMessageAgeSeconds": 0,
        "publishRateLimitedTimes": 0,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0,
        "lastOffloadLedgerId": 0,
        "lastOffloadSuccessTimeStamp": 0,
        "lastOffloadFailureTimeStamp": 0,
        "ongoingTxnCount": 0,
        "abortedTxnCount": 0,
        "committedTxnCount": 0,
        "publishers": [],
        "waitingPublishers": 0,
        "subscriptions": {},
        "replication": {},
        "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "delayedMessageIndexSizeInBytes": 0,
        "compaction": _compaction(None),
    }
    if non_persistent:
        total["msgDropRate"] = 0.0
    for count, stats in enumerate(parts.values(), start=1):
        for key in (
            "msgRateIn",
            "msgThroughputIn",
            "msgRateOut",
            "msgThroughputOut",
            "bytesInCounter",
            "msgInCounter",
            "bytesOutCounter",
            "msgOutCounter",
            "waitingPublishers",
            "storageSize",
            "backlogSize",
            "publishRateLimitedTimes",
            "offloadedStorageSize",
            "nonContiguousDeletedMessagesRanges",
            "nonContiguousDeletedMessagesRangesSerializedSize",
            "delayedMessageIndexSizeInBytes",
        ):
            total[key] += stats[key]
        total["averageMsgSize"] = (total["averageMsgSize"] * (count - 1) + stats["averageMsgSize"]) / count
        if non_persistent:
            total["msgDropRate"] += stats["msgDropRate"]
        for i, p in enumerate(stats["publishers"]):
            if i == len(total["publishers"]):
                fresh = {
                    "msgRateIn": 0.0,
                    "msgThroughputIn": 0.0,
                    "averageMsgSize": 0.0,
                    "chunkedMessageRate": 0.0,
                    "producerId": 0,
                    "supportsPartialProducer": False,
                }
                if non_persistent:
                    fresh["msgDropRate"] = 0.0
                total["publishers"].append(fresh)
            _add_publisher(total["publishers"][i], p)
        for name, s in stats["subscriptions"].items():
            _add_subscription(total["subscriptions"].setdefault(name, _empty_subscription(non_persistent)), s)
        for remote, r in stats["replication"].items():
            _add_replicator(total["replication"], remote, r)
    for p in total["publishers"]:
        p.pop("_count", None)
    total["metadata"] = {"partitions": n, "deleted": False}
    total["partitions"] = dict(parts) if per_partition else {}
    return total


# ------------------------------------------------------------------ internal stats


async def internal_stats(topic: Topic) -> dict[str, Any]:
    """``PersistentTopicInternalStats`` of a loaded persistent topic: its managed ledger, cursors,
    schema ledgers (none: schemas live in the metadata store) and compacted ledger."""
    ml = topic.ml.internal_stats()
    out: dict[str, Any] = {
        "entriesAddedCounter": ml["entriesAddedCounter"],
        "numberOfEntries": ml["numberOfEntries"],
        "totalSize": ml["totalSize"],
        "currentLedgerEntries": ml["currentLedgerEntries"],
        "currentLedgerSize": ml["currentLedgerSize"],
        "lastLedgerCreatedTimestamp": java_date(int(ml["lastLedgerCreatedTimestamp"])),
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": ml["pendingAddEntriesCount"],
        "lastConfirmedEntry": ml["lastConfirmedEntry"],
        "state": _ML_STATES.get(str(ml["state"]).lower(), str(ml["state"])),
        "ledgers": [
            {
                "ledgerId": li["ledgerId"],
                "entries": li["entries"],
                "size": li["size"],
                "offloaded": bool(li.get("offloaded")),
                "underReplicated": False,
            }
            for li in ml["ledgers"]
        ],
    }
    cursors: dict[str, Any] = {}
    for name, c in ml["cursors"].items():
        sub = topic.subscriptions.get(name)
        cursors[name] = {
            "markDeletePosition": c["markDeletePosition"],
            "readPosition": c["readPosition"],
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": c["messagesConsumedCounter"],
            "cursorLedger": -1,
            "cursorLedgerLastEntry": -1,  # cursors are stored in the metadata store
            "individuallyDeletedMessages": c["individuallyDeletedMessages"],
            "lastLedgerSwitchTimestamp": java_date(0),
            "state": _CURSOR_STATES.get(str(c["state"]).lower(), str(c["state"])),
            "active": bool(sub is not None and sub.consumers),
            "numberOfEntriesSinceFirstNotAckedMessage": c["numberOfEntriesSinceFirstNotAckedMessage"],
            "totalNonContiguousDeletedMessagesRange": c["totalNonContiguousDeletedMessagesRange"],
            "subscriptionHavePendingRead": False,
            "subscriptionHavePendingReplayRead": False,
            "properties": {k: v for k, v in dict(c.get("properties") or {}).items() if isinstance(v, int)},
        }
    out["cursors"] = cursors
    out["schemaLedgers"] = []
    view = topic.compactor.view
    compacted = {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False, "underReplicated": False}
    if view is not None:
        compacted.update({"ledgerId": int(view.ledger_id), "entries": int(view.entries), "size": int(view.reader.size)})
    out["compactedLedger"] = compacted
    return out
