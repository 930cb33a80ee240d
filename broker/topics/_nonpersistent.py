"""Non-persistent topics (``non-persistent://``): in-memory fan-out, no managed ledger, no storage.

Rules (Pulsar's non-persistent topics):

* Rule 1 (no storage): a SEND is handed at once to the consumers connected now and answered with
  a receipt whose message id is ``0:N`` (N counts the topic's entries since it was loaded); the
  same id is the message id its consumers see. Nothing is kept: a message published while a
  subscription has no consumer able to take it is lost for that subscription.
* Rule 2 (subscriptions): a subscription exists only while it has consumers (it is forgotten
  with its last one); the four types select consumers as on persistent topics: Exclusive and
  Failover the active consumer, Shared round-robin over consumers with permits, Key_Shared the
  owner of the key's hash slot (auto-split or sticky ranges).
* Rule 3 (slow consumers): a message goes to the selected consumer only while it has permits
  (FLOW); otherwise it is dropped for it and counted (``msgDropRate`` in stats) instead of being
  buffered. Shared first tries the other consumers with permits. Permits, and the connection's
  outgoing byte bound (a full queue counts as no permits), bound what is queued for a consumer,
  so memory stays bounded whatever the publish rate.
* Rule 4 (acks): acks, redelivery requests and negative acks are accepted and change nothing
  (there is nothing to deliver again); seek and GET_LAST_MESSAGE_ID are refused as in Pulsar.
* Rule 5 (producers): access modes as on persistent topics (Shared, Exclusive refused with
  ProducerFenced while another producer is attached, WaitForExclusive parked until the topic is
  free, ExclusiveWithFencing takes over); the topic epoch lives in memory only, as the topic does.
* Rule 6 (lifetime): the topic is loaded on first use and unloaded when idle like a persistent
  one; unloading closes its producers and consumers, which reconnect.
* Rule 7 (limits and rates): the limits of `_topic_limits` are resolved and refreshed as for a
  persistent topic (Rule 5 there) and checked by the same functions with the same errors: max
  producers (ProducerBusy), max consumers per topic and per subscription (ConsumerBusy). The
  publish rate pauses the producer's connection exactly as on a persistent topic (`_rate_limit`
  Rule 3: the SEND handler does it for both kinds), so a throttled producer is slowed, never
  dropped. Over the topic's or the subscription's dispatch rate a message is dropped for that
  subscription and counted like any message it cannot take (Rule 3): nothing can wait here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from protocols.pulsar import TopicName, encode_payload_command_raw, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError, ConsumerBusyError, ProducerBusyError, ServiceNotReadyError
from ._access_modes import Admission, Waiting, admit, next_to_promote
from ._consumer import Consumer
from ._dispatcher import SubType
from ._entries import EntryInfo, entry_info
from ._producer import AccessMode, Producer
from ._rate_limit import RateLimiter
from ._selectors import (
    AutoSplitRanges,
    ConsumerKey,
    RangeConflictError,
    RoundRobin,
    StickyRanges,
    choose_active_consumer,
)
from ._stats import OutCounters, Rates, TopicStatsState
from ._topic_limits import TopicLimits, check_consumer_limits, check_producer_limit, configure_rates

if TYPE_CHECKING:
    from managed_ledger import Position

    from .._service import BrokerService

__all__ = ["NonPersistentTopic", "NonPersistentSubscription"]

log = logging.getLogger(__name__)

_ACCESS_MODE_NAMES = {
    AccessMode.SHARED: "Shared",
    AccessMode.EXCLUSIVE: "Exclusive",
    AccessMode.WAIT_FOR_EXCLUSIVE: "WaitForExclusive",
    AccessMode.EXCLUSIVE_WITH_FENCING: "ExclusiveWithFencing",
}


class NonPersistentSubscription:
    """A subscription of a non-persistent topic and its own dispatcher (Rules 2-4).

    It is its own ``dispatcher`` (the connection handlers send FLOW and redelivery requests
    there), so a consumer of either kind of topic is driven the same way.
    """

    durable = False

    def __init__(self, topic: NonPersistentTopic, name: str) -> None:
        self.topic = topic
        self.name = name
        self.sub_type: int | None = None
        self.sticky = False
        self.consumers: list[Consumer] = []
        self.active: Consumer | None = None
        self.closed = False
        self.msg_drop_counter = 0
        # deliveries to any consumer, kept for the topic once the subscription is gone (`_stats`)
        self.out_counters = OutCounters(topic.stats_state.out)
        self.rates = Rates(1)  # dropped
        self.last_flow_ms = 0
        self._seq = 0
        self._rr: RoundRobin[Consumer] = RoundRobin()
        self._auto: AutoSplitRanges[Consumer] = AutoSplitRanges()
        self._sticky: StickyRanges[Consumer] = StickyRanges()
        rate = topic.limits.subscription_dispatch_rate
        self.dispatch_limiter = RateLimiter(rate.msgs, rate.bytes, rate.period_s)  # Rule 7

    @property
    def dispatcher(self) -> NonPersistentSubscription:
        """This subscription (see the class docstring)."""
        return self

    @property
    def full_name(self) -> str:
        """``topic/subscription`` for logs."""
        return f"{self.topic.name}/{self.name}"

    # ------------------------------------------------------------------ consumers

    async def add_consumer(
        self,
        *,
        consumer_id: int,
        name: str,
        connection: Any,
        sub_type: int,
        priority: int,
        hash_ranges: list[tuple[int, int]] | None,
        metadata: dict[str, str],
    ) -> Consumer:
        """Attach a consumer; raises `ConsumerBusyError` (another type, a second Exclusive consumer,
        mixed Key_Shared modes) or `BrokerServiceError` (overlapping sticky ranges)."""
        if self.closed:
            raise ServiceNotReadyError(f"subscription {self.full_name} is closed; retry")
        try:
            check_consumer_limits(self.topic.limits, self.topic.consumer_count, len(self.consumers))  # Rule 7
        except ConsumerBusyError:
            if not self.consumers:
                self.topic.forget_subscription(self)  # made for this consumer: it exists only with consumers
            raise
        if self.consumers:
            if self.sub_type != sub_type:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is of type {SubType.NAMES.get(self.sub_type or 0)}, "
                    f"not {SubType.NAMES.get(sub_type, sub_type)}"
                )
            if sub_type == SubType.EXCLUSIVE:
                raise ConsumerBusyError(f"exclusive consumer is already connected to subscription {self.name!r}")
            if sub_type == SubType.KEY_SHARED and self.sticky != bool(hash_ranges):
                raise ConsumerBusyError("Key_Shared consumers of a subscription must all use the same mode")
        else:
            self.sub_type, self.sticky = sub_type, bool(hash_ranges)
        self._seq += 1
        consumer = Consumer(
            consumer_id=consumer_id,
            name=name,
            connection=connection,
            subscription=self,
            priority=priority,
            seq=self._seq,
            hash_ranges=hash_ranges or (),
            metadata=metadata,
        )
        if sub_type == SubType.KEY_SHARED:
            try:
                if self.sticky:
                    self._sticky.add(consumer, consumer.hash_ranges)
                else:
                    self._auto.add(consumer)
            except RangeConflictError as exc:
                raise BrokerServiceError(str(exc), pb.ConsumerAssignError) from None
        self.consumers.append(consumer)
        self._update_active()
        return consumer

    async def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; the subscription disappears with its last one (Rule 2)."""
        consumer.closed = True
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self.sub_type == SubType.KEY_SHARED:
            (self._sticky if self.sticky else self._auto).remove(consumer)
        self._update_active()
        if not self.consumers:
            self.topic.forget_subscription(self)

    def _update_active(self) -> None:
        if self.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return
        keys = {ConsumerKey(c.priority, c.name, c.seq): c for c in self.consumers}
        best = choose_active_consumer(list(keys), self.topic.name.partition)
        new_active = keys[best] if best is not None else None
        if new_active is self.active:
            return
        self.active = new_active
        if self.sub_type == SubType.FAILOVER:
            for c in self.consumers:
                c.notify_active(c is new_active)

    def notify_new_failover_consumer(self, consumer: Consumer) -> None:
        """Tell a Failover consumer that just joined whether it is active."""
        if self.sub_type == SubType.FAILOVER:
            consumer.notify_active(consumer is self.active)

    def hash_ranges(self) -> list[tuple[int, int, Consumer]]:
        """Key_Shared: ``(start, end, consumer)`` of every hash range (inclusive), for stats."""
        if self.sub_type != SubType.KEY_SHARED:
            return []
        return (self._sticky if self.sticky else self._auto).ranges()

    # ------------------------------------------------------------------ requests (Rule 4)

    def flow(self, consumer: Consumer, permits: int) -> None:
        """FLOW: the consumer can take ``permits`` more messages."""
        consumer.permits += permits

    @property
    def type_name(self) -> str:
        """Pulsar's ``getTypeString`` (the subscription lives only while it has consumers)."""
        return "None" if self.sub_type is None else SubType.NAMES.get(self.sub_type, "None")

    def note_flow(self, consumer: Consumer) -> None:
        """A FLOW arrived from ``consumer`` (``lastConsumedFlowTimestamp``)."""
        consumer.last_flow_ms = self.last_flow_ms = int(time.time() * 1000)

    def update_rates(self, now: float) -> None:
        """The subscription's own rates at ``now`` (`_stats` Rule 3): messages dropped per second."""
        self.rates.update(now, self.msg_drop_counter)

    def consumer_blocked(self, consumer: Consumer) -> bool:
        """Never: nothing is unacknowledged on a non-persistent topic (Rule 4)."""
        return False

    blocked = False
    """Never blocked on unacked messages (Rule 4)."""

    def wake(self) -> None:
        """Nothing waits to be dispatched (Rule 1): a no-op, as the persistent dispatcher's wake-up."""

    def redeliver(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        """Redelivery request: nothing is kept, so nothing is delivered again (Rule 4)."""

    async def ack_individual(self, consumer: Consumer, items: object) -> None:
        """An ack changes nothing (Rule 4)."""

    async def ack_cumulative(self, consumer: Consumer, pos: Position, ack_set: list[int], size: int) -> None:
        """An ack changes nothing (Rule 4)."""

    # ------------------------------------------------------------------ dispatch (Rules 2, 3)

    def _has_permits(self, c: Consumer) -> bool:
        # a connection that cannot keep up (unwritable: its outgoing queue over the high water
        # mark) counts as out of permits, as Pulsar checks the channel's writability
        return not c.closed and c.ready and c.permits > 0 and c.writable

    def _select(self, info: EntryInfo) -> Consumer | None:
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return self.active
        if self.sub_type == SubType.SHARED:
            return self._rr.pick(self.consumers, self._has_permits)
        return (self._sticky if self.sticky else self._auto).select(info.hash_slot)

    def _rate_exhausted(self) -> bool:
        return self.topic.dispatch_limiter.exhausted() or self.dispatch_limiter.exhausted()

    def dispatch(self, entry_id: int, data: bytes, info: EntryInfo) -> None:
        """Send one entry to the selected consumer if it has permits and the dispatch rates allow
        it, else drop it for this subscription and count it (Rules 3, 7). Never waits: the
        publisher is never slowed by a subscription."""
        if not self.consumers:
            return  # no subscriber to lose it: not a drop (Rule 1)
        target = None if self._rate_exhausted() else self._select(info)
        if target is None or not self._has_permits(target):
            self.msg_drop_counter += info.num_messages
            self.topic.msg_drop_counter += info.num_messages
            return
        # the same accounting as a persistent dispatcher's round: the last message admitted may
        # overshoot a bound by its own size (`_rate_limit` Rule 2)
        self.topic.dispatch_limiter.record(info.num_messages, len(data))
        self.dispatch_limiter.record(info.num_messages, len(data))
        target.permits -= info.num_messages
        message_id: dict[str, int] = {"ledgerId": 0, "entryId": entry_id}
        if self.topic.name.partition >= 0:
            message_id["partition"] = self.topic.name.partition
        frame = encode_payload_command_raw(
            make_command("MESSAGE", consumer_id=target.consumer_id, message_id=message_id), data
        )
        target.note_sent(info.num_messages, len(data), 1)
        target.connection.send_nowait(frame)

    def close(self) -> None:
        """Close every consumer from the broker (they re-subscribe)."""
        self.closed = True
        for c in list(self.consumers):
            c.close_from_broker()
        self.consumers.clear()


class NonPersistentTopic:
    """One loaded non-persistent topic; see the module rules. Created by `BrokerService`."""

    def __init__(self, service: BrokerService, name: TopicName) -> None:
        if name.persistent:
            raise ValueError(f"{name} is a persistent topic")
        self.service = service
        self.name = name
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.closed = False
        self.last_active = service.clock()
        self.topic_epoch: int | None = None
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        # deliveries over every subscription since the topic was loaded (`_stats` Rule 2)
        self.stats_state = TopicStatsState()
        self.msg_drop_counter = 0
        self._entries = 0
        self._waiting: Waiting = []  # parked WaitForExclusive producers (`_access_modes`)
        # Rule 7: the service resolves the stored policies before the topic is used
        self.limits = TopicLimits.from_config(service.config)
        self.publish_limiter = RateLimiter()
        self.dispatch_limiter = RateLimiter()

    @property
    def idle(self) -> bool:
        """No producer, consumer or waiting producer is attached."""
        return not self.producers and not self._waiting and not self.subscriptions

    @property
    def waiting_producers(self) -> list[Producer]:
        """WaitForExclusive producers parked until the topic is free."""
        return [p for p, _ in self._waiting]

    def touch(self) -> None:
        """Note activity (idle unload, Rule 6)."""
        self.last_active = self.service.clock()

    def _check_open(self) -> None:
        if self.closed:
            raise ServiceNotReadyError(f"topic {self.name} is being unloaded; retry")

    def apply_limits(self, limits: TopicLimits) -> None:
        """Enforce ``limits`` from now on (Rule 7, `_topic_limits` Rule 3): the limiters take the
        new bounds and keep counting the current window."""
        configure_rates(self, limits, [sub.dispatch_limiter for sub in self.subscriptions.values()])

    @property
    def consumer_count(self) -> int:
        """Consumers attached over all subscriptions."""
        return sum(len(s.consumers) for s in self.subscriptions.values())

    # ------------------------------------------------------------------ producers (Rule 5)

    async def add_producer(self, producer: Producer, on_ready: Callable[[BrokerServiceError | None], None]) -> bool:
        """Attach a producer per Rule 5. True: ready now; False: parked (WaitForExclusive) and
        ``on_ready(None)`` runs once it holds the topic. Raises `ProducerBusyError` or
        `BrokerServiceError` (ProducerFenced, NotAllowed)."""
        self._check_open()
        self.touch()
        if producer.name in self.producers:
            raise ProducerBusyError(f"producer with name {producer.name!r} is already connected to topic {self.name}")
        check_producer_limit(self.limits, len(self.producers) + len(self._waiting))  # Rule 7
        admission = admit(str(self.name), self.producers, self._waiting, producer, on_ready)
        if admission is not Admission.EXCLUSIVE:
            return admission is Admission.ATTACHED
        self._grant_epoch(producer)
        return True

    def _grant_epoch(self, producer: Producer) -> None:
        self.topic_epoch = 0 if self.topic_epoch is None else self.topic_epoch + 1
        producer.epoch = self.topic_epoch
        self.producers[producer.name] = producer

    def remove_producer(self, producer: Producer) -> None:
        """Detach a producer; promote a waiting one once the topic has no producer left."""
        self._waiting = [(p, cb) for p, cb in self._waiting if p is not producer]
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        producer.closed = True
        self.touch()
        if not self.closed and (nxt := next_to_promote(self.producers, self._waiting)):
            waiting, on_ready = nxt
            self._grant_epoch(waiting)
            on_ready(None)

    def last_sequence_id(self, producer_name: str) -> int:
        """What PRODUCER_SUCCESS reports: -1 (no deduplication without storage)."""
        return -1

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest: int,
        raw: bytes,
        num_messages: int,
        *,
        partial_chunk: bool = False,
    ) -> None:
        """Fan one SEND out to the subscriptions and answer its receipt at once (Rule 1)."""
        receipt = producer.new_receipt(sequence_id, highest, len(raw))
        if self.closed:
            producer.complete(receipt, -1, -1, error=f"topic {self.name} is closed")
            return
        self._entries += 1
        entry_id = self._entries
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(raw)
        producer.msg_in_counter += num_messages
        producer.bytes_in_counter += len(raw)
        if self.subscriptions:
            info = entry_info(raw)
            for sub in list(self.subscriptions.values()):
                sub.dispatch(entry_id, raw, info)
        producer.complete(receipt, 0, entry_id)

    # ------------------------------------------------------------------ subscriptions (Rule 2)

    async def subscribe(self, name: str, **_ignored: object) -> NonPersistentSubscription:
        """The subscription ``name``, created when it does not exist (no position: Rule 1)."""
        self._check_open()
        self.touch()
        sub = self.subscriptions.get(name)
        if sub is None or sub.closed:
            sub = self.subscriptions[name] = NonPersistentSubscription(self, name)
        return sub

    def forget_subscription(self, sub: NonPersistentSubscription) -> None:
        """Its last consumer left: the subscription is gone (Rule 2)."""
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        self.touch()

    async def unsubscribe(self, sub: NonPersistentSubscription) -> None:
        """Delete a subscription."""
        sub.close()
        self.forget_subscription(sub)

    async def close(self) -> None:
        """Disconnect producers and consumers (they reconnect and load the topic again)."""
        if self.closed:
            return
        self.closed = True
        for p in list(self.producers.values()):
            p.close_from_broker()
        for p, _ in self._waiting:
            p.close_from_broker()
        self.producers.clear()
        self._waiting.clear()
        for sub in list(self.subscriptions.values()):
            sub.close()
        self.subscriptions.clear()
