"""The dispatcher of one subscription: reads its cursor and hands entries to consumers.

Rules:

* Rule 1 (permits): an entry goes only to a consumer with permits > 0; it uses as many permits
  as it holds messages (a batch of N uses N), so permits may go negative by one batch.
* Rule 1b (bytes): an entry goes only to a consumer whose connection is writable (its outgoing
  queue below the high water mark, `_connection` Rule B3); the connection wakes the dispatcher
  when it turns writable again. So a consumer that grants permits but does not read holds at
  most one round of entries in its connection, not its permits' worth.
* Rule 2 (replay first): entries to deliver again (redelivery requests, a consumer that left, a
  failover switch, an entry whose target had no permits) wait in ``replay``, sorted by position,
  and go out before new entries. Acked ones are dropped from it.
* Rule 3 (selection): Exclusive and Failover deliver to the single active consumer; Shared
  round-robins over consumers with permits (and below the unacked limit); Key_Shared sends an
  entry to the owner of its key's hash slot, and once one entry of a slot waits in ``replay``,
  later entries of that slot wait too, so each key keeps its order.
* Rule 3b (Key_Shared joins): a consumer joining a Key_Shared subscription that has consumers
  gets no entry at or after the read position of its joining until everything before that
  position is acked (its keys may still be unacked at their previous owner), as Pulsar's
  "recently joined consumers".
* Rule 4 (bounded): new entries are read only while ``replay`` is below
  ``dispatcher_max_replay_entries``; each round reads at most the permits available (and the
  configured batch size / bytes).
* Rule 5 (delayed delivery, Shared and Key_Shared): an entry whose ``deliver_at_time`` is in the
  future is parked until then; it stays unacked in the cursor, so a restart re-reads it. On
  Key_Shared a due entry goes to its key's current owner (Rule 3); as in Pulsar, a parked entry
  does not hold back later entries of its key (delayed delivery orders by due time, not by key).
* Rule 5b (read compacted, `Subscription` Rule 5): while the read position is at or before the
  compacted view's horizon, new entries come from the view (each with its original position),
  and the cursor is moved past the horizon once the view is exhausted; entries to deliver again
  at or before the horizon are read from the view too (one compaction dropped is acked away).
* Rule 6 (wake-ups): the loop sleeps until `wake` (FLOW, a consumer joining or leaving, acks,
  redelivery, new entries on the topic, termination) or the next delayed entry is due.
* Rule 7 (end of topic): once the topic is terminated and the subscription has no backlog left
  (everything stored is acknowledged), each consumer is sent REACHED_END_OF_TOPIC once, as
  Pulsar's dispatchers do when a read finds no more entries on a terminated ledger; a consumer
  joining later is told when its first round finds the same.
* Rule 8 (dispatch rates): a round reads no more entries than the topic's and the
  subscription's dispatch limiters allow in their current windows (`_rate_limit` Rule 4); while
  either is exhausted the loop sleeps to the window's end. The unacked limits of Rule 3 come
  from the topic's resolved limits (`_topic_limits`): per consumer and per subscription.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

import trio
from sortedcontainers import SortedSet

from managed_ledger import Entry, ManagedLedgerError, ManagedLedgerState, Position

from ._entries import EntryInfo, Signal, ack_set_words, entry_info
from ._selectors import AutoSplitRanges, ConsumerKey, RoundRobin, StickyRanges, choose_active_consumer

if TYPE_CHECKING:
    from ._config import BrokerConfig
    from ._consumer import Consumer
    from ._subscription import Subscription

__all__ = ["Dispatcher", "SubType"]

log = logging.getLogger(__name__)


class SubType:
    """CommandSubscribe.SubType values."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3
    NAMES: ClassVar[dict[int, str]] = {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}


class Dispatcher:
    """Delivers a subscription's entries to its consumers; see the module rules."""

    def __init__(self, subscription: Subscription, sub_type: int, *, sticky: bool = False) -> None:
        self.sub = subscription
        self.sub_type = sub_type
        self.clock = subscription.topic.service.clock
        self.consumers: list[Consumer] = []
        self.replay: SortedSet = SortedSet()
        self.redelivery_counts: dict[Position, int] = {}
        self.owner: dict[Position, Consumer] = {}
        self.delayed: list[tuple[int, Position]] = []
        self.changed = Signal()
        self.active: Consumer | None = None
        self.sticky = sticky
        self._rr: RoundRobin[Consumer] = RoundRobin()
        self._auto: AutoSplitRanges[Consumer] = AutoSplitRanges()
        self._sticky: StickyRanges[Consumer] = StickyRanges()
        self.msg_redelivered = 0
        self._sub_unacked = 0  # see `_round`

    @property
    def config(self) -> BrokerConfig:
        """The service's current config (dynamic keys change it on a running broker)."""
        return self.sub.topic.service.config

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer; raises `RangeConflictError` for overlapping STICKY ranges."""
        if self.sub_type == SubType.KEY_SHARED:
            if self.sticky:
                self._sticky.add(consumer, consumer.hash_ranges)
            else:
                self._auto.add(consumer)
            if self.consumers:
                # Rule 3b: keys moving to a joining consumer may still be unacked elsewhere
                consumer.join_barrier = self.sub.cursor.read_position
        self.consumers.append(consumer)
        self._update_active()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; what it held unacked is delivered to the others."""
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self.sub_type == SubType.KEY_SHARED:
            (self._sticky if self.sticky else self._auto).remove(consumer)
        self._take_back(consumer, list(consumer.pending), count=False)
        self._update_active()
        self.wake()

    def _update_active(self) -> None:
        if self.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return
        keys = {ConsumerKey(c.priority, c.name, c.seq): c for c in self.consumers}
        best = choose_active_consumer(list(keys), self.sub.topic.name.partition)
        new_active = keys[best] if best is not None else None
        if new_active is self.active:
            return
        old = self.active
        self.active = new_active
        if old is not None and old in self.consumers:
            # the old active consumer's unacked entries go to the new one, in order
            self._take_back(old, list(old.pending), count=False)
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

    # ------------------------------------------------------------------ requests

    def wake(self) -> None:
        """Something changed: let the loop run a round."""
        self.changed.fire()

    def flow(self, consumer: Consumer, permits: int) -> None:
        """FLOW: the consumer can take ``permits`` more messages."""
        consumer.permits += permits
        self.wake()

    def acked(self, positions: Iterable[Position]) -> None:
        """Forget delivered entries that are now acked (by anyone)."""
        for pos in positions:
            owner = self.owner.pop(pos, None)
            if owner is not None:
                owner.pending.pop(pos, None)
            self.redelivery_counts.pop(pos, None)
            self.replay.discard(pos)
        self.wake()

    def acked_up_to(self, position: Position) -> None:
        """Cumulative ack: forget every delivered entry at or before ``position``."""
        self.acked([p for p in self.owner if p <= position] + [p for p in self.replay if p <= position])

    def redeliver(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        """Deliver again what ``consumer`` holds unacked (all, or the listed positions)."""
        held = list(consumer.pending) if positions is None else [p for p in positions if p in consumer.pending]
        self._take_back(consumer, held, count=True)
        self.wake()

    def _take_back(self, consumer: Consumer, positions: list[Position], *, count: bool) -> None:
        for pos in positions:
            messages = consumer.pending.pop(pos, None)
            if self.owner.get(pos) is consumer:
                del self.owner[pos]
            if count:
                self.redelivery_counts[pos] = self.redelivery_counts.get(pos, 0) + 1
                consumer.msg_redeliver_counter += messages or 1  # messages, as Pulsar counts them
                self.msg_redelivered += 1
            self.replay.add(pos)

    def reset(self) -> None:
        """Forget every delivery state (after a seek): the cursor is the only truth again."""
        self.replay.clear()
        self.redelivery_counts.clear()
        self.owner.clear()
        self.delayed.clear()
        for c in self.consumers:
            c.pending.clear()
        self.wake()

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Dispatch until cancelled (the subscription owns the cancel scope)."""
        while True:
            changed = self.changed.current()
            try:
                progressed = await self._round()
            except ManagedLedgerError as exc:
                log.warning("dispatcher %s: read failed: %s", self.sub.full_name, exc)
                progressed = False
                with trio.move_on_after(1.0):
                    await changed.wait()
                continue
            if progressed:
                await trio.lowlevel.checkpoint()
                continue
            timeout = self._next_delayed_in()
            rate_wait = self._rate_wait_s()
            if rate_wait > 0:
                timeout = rate_wait if timeout is None else min(timeout, rate_wait)
            with trio.move_on_after(timeout if timeout is not None else float("inf")):
                await changed.wait()

    def _next_delayed_in(self) -> float | None:
        if not self.delayed:
            return None
        return max(0.0, self.delayed[0][0] / 1000.0 - self.clock())

    def _release_due_delayed(self) -> None:
        now_ms = self.clock() * 1000.0
        while self.delayed and self.delayed[0][0] <= now_ms:
            _, pos = heapq.heappop(self.delayed)
            self.replay.add(pos)

    def _can_take(self, c: Consumer) -> bool:
        if c.closed or c.permits <= 0 or not c.writable:  # Rule 1b
            return False
        if self.sub_type not in (SubType.SHARED, SubType.KEY_SHARED):
            return True
        limits = self.sub.topic.limits
        if limits.max_unacked_per_consumer > 0 and c.unacked_messages >= limits.max_unacked_per_consumer:
            return False
        return not (limits.max_unacked_per_subscription > 0
                    and self._sub_unacked >= limits.max_unacked_per_subscription)

    @property
    def unacked_messages(self) -> int:
        """Messages delivered to the consumers and not acked yet."""
        return sum(c.unacked_messages for c in self.consumers)

    def _rate_wait_s(self) -> float:
        """Rule 8: how long the topic's or the subscription's dispatch rate keeps this loop waiting."""
        return max(self.sub.topic.dispatch_limiter.wait_s(), self.sub.dispatch_limiter.wait_s())

    def _rate_allows(self) -> int | None:
        """Rule 8: messages the dispatch rates still allow in their windows (None: unbounded)."""
        allowed = [a for a in (self.sub.topic.dispatch_limiter.available_msgs(),
                               self.sub.dispatch_limiter.available_msgs()) if a is not None]
        return min(allowed) if allowed else None

    def _notify_end_of_topic(self) -> None:
        """Rule 7: tell every consumer not told yet that the terminated topic has nothing more."""
        if self.sub.topic.ml.state is not ManagedLedgerState.TERMINATED or self.replay or self.delayed:
            return
        if self.sub.cursor.backlog > 0:
            return
        for c in self.consumers:
            c.reached_end_of_topic()

    async def _round(self) -> bool:
        self._release_due_delayed()
        self._notify_end_of_topic()
        # the subscription's unacked count, summed once per round (acks only lower it, and
        # `_assign` adds what it hands out), so `_can_take` stays O(1) per entry
        self._sub_unacked = self.unacked_messages
        if not any(self._can_take(c) for c in self.consumers):
            return False
        cursor = self.sub.cursor
        ml = self.sub.topic.ml
        batch = self.config.dispatcher_max_read_batch_size
        allowed = self._rate_allows()
        if allowed is not None:
            if allowed <= 0:
                return False  # the run loop waits for the window's end (Rule 8)
            batch = min(batch, allowed)
        entries: list[Entry] = []
        view = self.sub.topic.compactor.view if self.sub.read_compacted else None
        for pos in list(self.replay.islice(0, batch)):
            if cursor.is_acked(pos):
                self.replay.discard(pos)
                self.redelivery_counts.pop(pos, None)
                continue
            try:
                if view is not None and pos <= view.horizon:  # Rule 5b
                    compacted = await view.entry_at(pos)
                    if compacted is None:
                        self.replay.discard(pos)
                        self.redelivery_counts.pop(pos, None)
                        continue
                    entries.append(compacted)
                else:
                    entries.append(await ml.read_entry(pos))
            except ManagedLedgerError as exc:
                log.warning("dispatcher %s: dropping unreadable %s: %s", self.sub.full_name, pos, exc)
                self.replay.discard(pos)
                continue
            self.replay.discard(pos)
        read_new = 0
        if len(self.replay) < self.config.dispatcher_max_replay_entries and len(entries) < batch:
            permits = sum(max(0, c.permits) for c in self.consumers if self._can_take(c))
            want = min(batch - len(entries), max(1, permits))
            new = await self._read_compacted(want) if view is not None else []
            if not new:
                new = await cursor.read_entries(want, self.config.dispatcher_max_read_size_bytes)
            read_new = len(new)
            entries.extend(new)
        if not entries:
            return False
        sent = await self._assign(entries)
        return sent > 0 or read_new > 0

    async def _read_compacted(self, want: int) -> list[Entry]:
        """Rule 5b: up to ``want`` entries of the compacted view from where this subscription is
        in it; none once past the horizon (the cursor then reads the topic after it)."""
        sub, topic = self.sub, self.sub.topic
        view = topic.compactor.view
        if view is None:
            return []
        start = sub.compacted_next if sub.compacted_next is not None else sub.cursor.read_position
        if start > view.horizon:
            sub.compacted_next = None
            return []
        entries = await view.read_from(start, want)
        if len(entries) < want:  # the view is exhausted: go on with the topic after the horizon
            sub.compacted_next = None
            await sub.cursor.seek(topic.next_position(view.horizon))
        else:
            last = entries[-1].position
            # raw, not normalized: the next compacted entry may lie in a ledger trimmed since
            sub.compacted_next = Position(last.ledger_id, last.entry_id + 1)
            await sub.cursor.seek(topic.next_position(last))
        return entries

    async def _assign(self, entries: list[Entry]) -> int:
        out: dict[Consumer, list[tuple[Entry, int, list[int] | None]]] = {}
        blocked_slots: set[int] = set()
        now_ms = self.clock() * 1000.0
        sent = sent_msgs = sent_bytes = 0
        for entry in entries:
            pos = entry.position
            info = entry_info(entry.data)
            if (self.sub_type in (SubType.SHARED, SubType.KEY_SHARED) and self.config.delayed_delivery_enabled
                    and info.deliver_at_ms is not None and info.deliver_at_ms > now_ms):
                heapq.heappush(self.delayed, (info.deliver_at_ms, pos))
                continue
            target = self._select(pos, info, blocked_slots)
            if target is None:
                self.replay.add(pos)
                if self.sub_type == SubType.KEY_SHARED:
                    blocked_slots.add(info.hash_slot)
                continue
            target.permits -= info.num_messages
            target.pending[pos] = info.num_messages
            self._sub_unacked += info.num_messages
            self.owner[pos] = target
            out.setdefault(target, []).append(
                (entry, self.redelivery_counts.get(pos, 0), self._ack_set(pos, info)))
            sent += 1
            sent_msgs += info.num_messages
            sent_bytes += len(entry.data)
        if sent:
            self.sub.topic.dispatch_limiter.record(sent_msgs, sent_bytes)
            self.sub.dispatch_limiter.record(sent_msgs, sent_bytes)
        for consumer, items in out.items():
            await consumer.send_entries(items)
        return sent

    def _ack_set(self, pos: Position, info: EntryInfo) -> list[int] | None:
        if not info.is_batch:
            return None
        acked = self.sub.cursor.batch_acked_indexes(pos)
        if not acked:
            return None
        return ack_set_words(info.num_messages, acked)

    def _select(self, pos: Position, info: EntryInfo, blocked_slots: set[int]) -> Consumer | None:
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            c = self.active
            return c if c is not None and self._can_take(c) else None
        if self.sub_type == SubType.SHARED:
            return self._rr.pick(self.consumers, self._can_take)
        if info.hash_slot in blocked_slots:
            return None
        c = (self._sticky if self.sticky else self._auto).select(info.hash_slot)
        if c is None or not self._can_take(c):
            return None
        if c.join_barrier is not None:
            if self.sub.topic.next_position(self.sub.cursor.mark_delete_position) >= c.join_barrier:
                c.join_barrier = None  # everything read before it joined is acked
            elif pos >= c.join_barrier:
                return None
        return c

