"""Topic statistics computed when asked (admin ``stats``, ``/metrics``), not on the hot path.

The hot path only bumps plain integers (``Topic.msg_in_counter`` per SEND, each consumer's
``msg_out_counter`` per dispatched batch). Rates come from the difference between two looks at
those counters; out counters of consumers that left are folded into a per-topic total the next
time anyone looks (a consumer that comes and goes between two looks is not counted: the price
of keeping the dispatch path free of bookkeeping).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from managed_ledger import ManagedLedgerError
from retention import first_unacked_position

if TYPE_CHECKING:
    from ._topic import Topic

__all__ = ["RateMeter", "TopicStatsState", "topic_stats", "refresh_backlog_age", "storage_numbers"]

_ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}


class RateMeter:
    """Per-second rates of monotonic counters, recomputed at most once per ``window_s``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = 1.0) -> None:
        self._clock = clock
        self._window = window_s
        self._last_t = clock()
        self._last: tuple[int, ...] = ()
        self.rates: tuple[float, ...] = ()

    def update(self, *counters: int) -> tuple[float, ...]:
        """The rates of ``counters`` since the previous update (zeros on the first call)."""
        now = self._clock()
        if not self._last:
            self._last, self._last_t = counters, now
            self.rates = tuple(0.0 for _ in counters)
            return self.rates
        dt = now - self._last_t
        if dt >= self._window:
            self.rates = tuple(max(0.0, (c - p) / dt) for c, p in zip(counters, self._last, strict=True))
            self._last, self._last_t = counters, now
        return self.rates


class TopicStatsState:
    """What a topic keeps for its statistics besides its hot-path counters."""

    def __init__(self) -> None:
        self.in_rates = RateMeter()
        self.out_rates = RateMeter()
        self._consumers: dict[int, Any] = {}
        self._retired_msgs = 0
        self._retired_bytes = 0
        self.backlog_age_s = 0.0
        self.backlog_age_at = 0.0

    def out_totals(self, topic: Topic) -> tuple[int, int]:
        """(messages, bytes) dispatched by the topic since it was loaded."""
        live = {id(c): c for s in topic.subscriptions.values() for c in s.consumers}
        for key, c in list(self._consumers.items()):
            if key not in live:
                # the consumer has left: its counters are final (a closed consumer sends nothing)
                self._retired_msgs += c.msg_out_counter
                self._retired_bytes += c.bytes_out_counter
                del self._consumers[key]
        self._consumers.update(live)
        msgs = self._retired_msgs + sum(c.msg_out_counter for c in self._consumers.values())
        size = self._retired_bytes + sum(c.bytes_out_counter for c in self._consumers.values())
        return msgs, size


def storage_numbers(topic: Topic) -> dict[str, int]:
    """Storage size, slowest backlog (messages and bytes) and subscription backlog sum."""
    ml = topic.ml
    durable = [s for s in topic.subscriptions.values() if s.durable]
    backlogs = [s.cursor.backlog for s in durable]
    sizes = [s.cursor.backlog_size for s in durable]
    return {"storageSize": ml.total_size, "msgBacklog": sum(backlogs),
            "backlogSize": max(sizes, default=0), "numberOfEntries": ml.number_of_entries}


async def refresh_backlog_age(topic: Topic, now_ms: int) -> float:
    """Age (s) of the oldest unacknowledged message of the slowest durable subscription, read from
    its publish time (one entry read per subscription with a backlog). Stored on the topic."""
    from ._retention_hooks import publish_time_of

    oldest: int | None = None
    ledgers = topic.ml.ledgers
    for sub in list(topic.subscriptions.values()):
        if not sub.durable or sub.closed:
            continue
        pos = first_unacked_position(ledgers, sub.cursor.mark_delete_position)
        if pos is None:
            continue
        try:
            t = publish_time_of(await topic.ml.read_entry(pos))
        except ManagedLedgerError:
            continue
        if t is not None and (oldest is None or t < oldest):
            oldest = t
    state = topic.stats_state
    state.backlog_age_s = 0.0 if oldest is None else max(0.0, (now_ms - oldest) / 1000)
    state.backlog_age_at = time.monotonic()
    return state.backlog_age_s


def topic_stats(topic: Topic) -> dict[str, Any]:
    """Pulsar's TopicStats JSON for a loaded topic (rates are per second since the last look)."""
    state = topic.stats_state
    msg_out, bytes_out = state.out_totals(topic)
    rate_in, thr_in = state.in_rates.update(topic.msg_in_counter, topic.bytes_in_counter)
    rate_out, thr_out = state.out_rates.update(msg_out, bytes_out)
    storage = storage_numbers(topic)
    publishers = []
    for p in topic.producers.values():
        publishers.append({
            "producerId": p.producer_id, "producerName": p.name,
            "accessMode": _ACCESS_MODES.get(p.access_mode, str(p.access_mode)),
            "msgInCounter": p.msg_in_counter, "bytesInCounter": p.bytes_in_counter,
            "averageMsgSize": p.bytes_in_counter / p.msg_in_counter if p.msg_in_counter else 0.0,
            "address": str(getattr(p.connection, "remote", "")),
            "clientVersion": str(getattr(p.connection, "client_version", "")),
            "topicEpoch": p.epoch,
        })
    subs = {}
    for name, sub in sorted(topic.subscriptions.items()):
        consumers = []
        for c in sub.consumers:
            consumers.append({
                "consumerName": c.name, "consumerId": c.consumer_id, "availablePermits": c.permits,
                "unackedMessages": c.unacked_messages, "msgOutCounter": c.msg_out_counter,
                "bytesOutCounter": c.bytes_out_counter, "msgRedeliverCounter": c.msg_redeliver_counter,
                "priorityLevel": c.priority, "address": c.address, "connectedSince": c.connected_since,
                "metadata": dict(c.metadata),
            })
        info = sub.stats()
        subs[name] = {
            "msgBacklog": sub.cursor.backlog, "backlogSize": sub.cursor.backlog_size,
            "msgOutCounter": sum(c.msg_out_counter for c in sub.consumers),
            "bytesOutCounter": sum(c.bytes_out_counter for c in sub.consumers),
            "unackedMessages": sum(c.unacked_messages for c in sub.consumers),
            "type": info.get("type") or "None", "isDurable": sub.durable,
            "markDeletePosition": str(sub.cursor.mark_delete_position),
            "readPosition": str(sub.cursor.read_position), "consumers": consumers,
        }
    return {
        "msgRateIn": rate_in, "msgThroughputIn": thr_in, "msgRateOut": rate_out, "msgThroughputOut": thr_out,
        "msgInCounter": topic.msg_in_counter, "bytesInCounter": topic.bytes_in_counter,
        "msgOutCounter": msg_out, "bytesOutCounter": bytes_out,
        "averageMsgSize": topic.bytes_in_counter / topic.msg_in_counter if topic.msg_in_counter else 0.0,
        "storageSize": storage["storageSize"], "backlogSize": storage["backlogSize"],
        "msgBacklog": storage["msgBacklog"], "numberOfEntries": storage["numberOfEntries"],
        "oldestBacklogMessageAgeSeconds": state.backlog_age_s,
        "publishRateLimitedTimes": topic.publish_limiter.throttled,  # since the topic was loaded
        "publishers": publishers, "waitingPublishers": len(topic.waiting_producers),
        "subscriptions": subs, "replication": {},
        "deduplicationStatus": "Enabled" if topic.dedup is not None else "Disabled",
        "topicEpoch": topic.topic_epoch,
        "compaction": topic.compactor.stats(),
    }
