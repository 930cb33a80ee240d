"""The dispatcher of one subscription: reads its cursor and hands entries to consumers.

Rules:

* Rule 1 (permits): an entry goes only to a consumer with permits > 0; it uses as many permits
  as it holds messages (a batch of N uses N), so permits may go negative by one batch.
* Rule 1b (bytes): an entry goes only to a consumer whose connection is writable (its outgoing
  queue below the high water mark, `_connection` Rule B3); the connection wakes the dispatcher
  when it turns writable again. So a consumer that grants permits but does not read holds at
  most one round of entries in its connection, not its permits' worth.
* Rule 2 (replay first): entries to deliver again (redelivery requests, a consumer that left, a
  failover switch, an entry whose target had no permits, delayed entries that came due) wait in
  ``replay``, sorted by position, and go out before new entries. Acked ones are dropped from it,
  and so are positions that no longer name an entry of the topic (their ledger is gone); nothing
  else ever leaves it unsent.
* Rule 2b (read failures): when storage cannot serve a read (a replayed entry or new entries),
  the entries read before it in that round are delivered, the rest stays where it was (in
  ``replay``, or unread in the cursor) and the loop retries after a delay that doubles per
  failure up to ``dispatcherReadFailureBackoffMaxTimeInMs`` (`Backoff`; a good read halves it
  again), as Pulsar's dispatchers back off. Consumers stay attached meanwhile.
* Rule 3 (selection): Exclusive and Failover deliver to the single active consumer; Shared
  round-robins over consumers with permits (and below the unacked limit); Key_Shared sends an
  entry to the owner of its key's hash slot, and once one entry of a slot waits in ``replay``,
  later entries of that slot wait too, so each key keeps its order.
* Rule 3d (single active, in order): on Exclusive and Failover an entry goes to the active
  consumer only while no earlier entry waits in ``replay`` and no failover switch is pending
  (Rule 3c); otherwise it joins ``replay``. The active consumer can change while a round awaits
  storage (the old one leaves: what it held joins ``replay``); the entries that round read must
  not overtake those, since a cumulative ack of a later entry would acknowledge them unseen. A
  round runs only while the active consumer can take entries (another consumer's permits do not
  read entries no one may receive).
* Rule 3b (Key_Shared joins): a consumer joining a Key_Shared subscription that has consumers
  gets no entry at or after the read position of its joining until everything before that
  position is acked (its keys may still be unacked at their previous owner), as Pulsar's
  "recently joined consumers".
* Rule 4 (bounded): new entries are read only while ``replay`` is below
  ``dispatcher_max_replay_entries`` and the delayed-delivery index has room (`DelayedIndex`
  Rule 3); each round reads at most the permits available (and the configured batch size /
  bytes).
* Rule 5 (delayed delivery, Shared and Key_Shared): an entry read from the cursor whose
  ``deliver_at_time`` is in the future is offered to the subscription's delayed-delivery index
  (`broker.topics._delayed`), which holds it (bounded in memory, kept in storage) until it is due; it
  stays unacked in the cursor. Nothing is read before the index has recovered (after a restart),
  so nothing is delivered early. Due entries join ``replay`` (at most as many as it has room
  for), at most once per ``delayedDeliveryTickTimeMillis`` when nothing else wakes the loop. An
  entry read from the cursor that is pending at a consumer or waiting in ``replay`` already (the
  index released it) is skipped. On Key_Shared a due entry goes to its key's current owner
  (Rule 3); as in Pulsar, a held entry does not hold back later entries of its key (delayed
  delivery orders by due time, not by key).
* Rule 5b (read compacted, `Subscription` Rule 5): while the read position is at or before the
  compacted view's horizon, new entries come from the view (each with its original position),
  and the cursor is moved past the horizon once the view is exhausted; entries to deliver again
  at or before the horizon are read from the view too (one compaction dropped is acked away).
* Rule 6 (wake-ups): the loop sleeps until `wake` (FLOW, a consumer joining or leaving, acks,
  redelivery, new entries on the topic, termination, the delayed index loaded or recovered) or
  the next delayed entry is due.
* Rule 7 (end of topic): once the topic is terminated and the subscription has no backlog left
  (everything stored is acknowledged), each consumer is sent REACHED_END_OF_TOPIC once, as
  Pulsar's dispatchers do when a read finds no more entries on a terminated ledger; a consumer
  joining later is told when its first round finds the same.
* Rule 3c (failover switch): when the active consumer of a Failover subscription changes, its
  consumers are told (ACTIVE_CONSUMER_CHANGE) and the new active one gets entries only
  ``active_consumer_failover_delay_ms`` later, as Pulsar does: the old one's acks in flight land
  first, and a client that registers its consumer once SUBSCRIBE's SUCCESS is processed (the Go
  client) is not told before it listens. A change during that wait is covered by it: its end
  tells everyone which consumer is active then.
* Rule 9 (transactions): new entries are read only up to the topic's max read position (nothing
  of an open transaction, nor anything stored after its first entry); a commit or abort marker
  and an entry of an aborted transaction are acknowledged on the cursor and never delivered; an
  entry an open transaction's ack holds (`broker.transactions.pending_ack`) is not delivered,
  and the batch indexes it holds are marked acknowledged in the ack set sent.
* Rule 8 (dispatch rates): a round reads no more entries than the topic's and the
  subscription's dispatch limiters allow in their current windows (`_rate_limit` Rule 4); while
  either is exhausted the loop sleeps to the window's end. The unacked limits of Rule 3 come
  from the topic's resolved limits (`_topic_limits`): per consumer and per subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

import trio
from sortedcontainers import SortedSet

from magnetar.common.backoff import Backoff
from managed_ledger import Entry, ManagedLedgerError, ManagedLedgerState, Position

from .._errors import ServiceNotReadyError
from ._entries import EntryInfo, Signal, ack_set_words, entry_info
from ._selectors import AutoSplitRanges, ConsumerKey, RoundRobin, StickyRanges, choose_active_consumer

if TYPE_CHECKING:
    from .._config import BrokerConfig
    from ._consumer import Consumer
    from ._delayed import DelayedIndex
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
        self.delayed: DelayedIndex | None = None  # Rule 5, set by `run` on Shared and Key_Shared
        self._last_release_ms = 0.0
        config = self.config
        self._read_backoff = Backoff(
            config.dispatcher_read_failure_backoff_initial_time_ms / 1000,
            config.dispatcher_read_failure_backoff_max_time_ms / 1000,
            jitter=0.1,
        )
        self._read_failure: ManagedLedgerError | None = None
        self.changed = Signal()
        self.active: Consumer | None = None
        self.sticky = sticky
        self._rr: RoundRobin[Consumer] = RoundRobin()
        self._auto: AutoSplitRanges[Consumer] = AutoSplitRanges()
        self._sticky: StickyRanges[Consumer] = StickyRanges()
        self.msg_redelivered = 0
        self._sub_unacked = 0  # see `_round`
        self._failover_hold_until: float | None = None  # Rule 3c

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
            delay_s = self.config.active_consumer_failover_delay_ms / 1000.0
            if delay_s <= 0:
                self._notify_failover_active()
            elif self._failover_hold_until is None:
                self._failover_hold_until = self.clock() + delay_s

    def _notify_failover_active(self) -> None:
        if self.active is not None:
            for c in self.consumers:
                c.notify_active(c is self.active)

    def _failover_hold_s(self) -> float | None:
        """Rule 3c: how long the failover switch still holds delivery (None: no switch pending)."""
        if self._failover_hold_until is None:
            return None
        return max(0.0, self._failover_hold_until - self.clock())

    def notify_new_failover_consumer(self, consumer: Consumer) -> None:
        """Tell a Failover consumer that just joined whether it is active (unless a switch is
        pending: its end tells every consumer, Rule 3c)."""
        if self.sub_type == SubType.FAILOVER and self._failover_hold_until is None:
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

    def release(self, positions: Iterable[Position]) -> None:
        """Entries an aborted transaction's acks held: deliver them again (Rule 9), counted as a
        redelivery."""
        for pos in positions:
            self.redelivery_counts[pos] = self.redelivery_counts.get(pos, 0) + 1
            self.msg_redelivered += 1
            self.replay.add(pos)
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
        for c in self.consumers:
            c.pending.clear()
        self.wake()

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Dispatch until cancelled (the subscription owns the cancel scope)."""
        if self.sub_type in (SubType.SHARED, SubType.KEY_SHARED) and self.config.delayed_delivery_enabled:
            try:
                index = await self.sub.delayed_index()
            except ServiceNotReadyError:
                await trio.sleep_forever()  # the topic is closing: this task is about to be cancelled
            index.listener = self.wake
            await index.wait_ready()  # Rule 5: nothing is read before the index has recovered
            if not index.ready:
                log.info("dispatcher %s: the delayed-delivery index stopped; dispatching stops", self.sub.full_name)
                await trio.sleep_forever()
            self.delayed = index
        while True:
            changed = self.changed.current()
            try:
                progressed = await self._round()
            except ManagedLedgerError as exc:  # Rule 2b
                delay = self._read_backoff.next()
                log.warning("dispatcher %s: read failed (%s); retrying in %.1f s", self.sub.full_name, exc, delay)
                await trio.sleep(delay)
                continue
            if progressed:
                self._read_backoff.reduce_to_half()
                await trio.lowlevel.checkpoint()
                continue
            timeout = self._next_delayed_in()
            rate_wait = self._rate_wait_s()
            if rate_wait > 0:
                timeout = rate_wait if timeout is None else min(timeout, rate_wait)
            hold = self._failover_hold_s()
            if hold is not None:
                timeout = hold if timeout is None else min(timeout, hold)
            with trio.move_on_after(timeout if timeout is not None else float("inf")):
                await changed.wait()

    def _replay_room(self) -> int:
        return self.config.dispatcher_max_replay_entries - len(self.replay)

    def _next_delayed_in(self) -> float | None:
        """Seconds until due delayed entries can be released (Rule 5); None: only a wake-up helps
        (no delayed entry in memory, or no room in ``replay`` for one)."""
        index = self.delayed
        if index is None or self._replay_room() <= 0:
            return None
        due = index.next_due_ms()
        if due is None:
            return None
        now_ms = self.clock() * 1000.0
        tick_end = self._last_release_ms + self.config.delayed_delivery_tick_time_ms
        return max(0.0, due - now_ms, tick_end - now_ms) / 1000.0

    def _release_due_delayed(self) -> None:
        """Rule 5: due entries of the index join ``replay``, as many as it has room for."""
        index = self.delayed
        room = self._replay_room()
        if index is None or room <= 0:
            return
        now_ms = self.clock() * 1000.0
        cursor = self.sub.cursor
        due = index.pop_due(now_ms, room, lambda p: p in self.owner or p in self.replay or cursor.is_acked(p))
        self._last_release_ms = now_ms
        self.replay.update(due)

    def _can_take(self, c: Consumer) -> bool:
        if c.closed or c.permits <= 0 or not c.writable:  # Rule 1b
            return False
        if self.sub_type not in (SubType.SHARED, SubType.KEY_SHARED):
            return True
        limits = self.sub.topic.limits
        if limits.max_unacked_per_consumer > 0 and c.unacked_messages >= limits.max_unacked_per_consumer:
            return False
        return not (
            limits.max_unacked_per_subscription > 0 and self._sub_unacked >= limits.max_unacked_per_subscription
        )

    @property
    def unacked_messages(self) -> int:
        """Messages delivered to the consumers and not acked yet."""
        return sum(c.unacked_messages for c in self.consumers)

    def _rate_wait_s(self) -> float:
        """Rule 8: how long the topic's or the subscription's dispatch rate keeps this loop waiting."""
        return max(self.sub.topic.dispatch_limiter.wait_s(), self.sub.dispatch_limiter.wait_s())

    def _rate_allows(self) -> int | None:
        """Rule 8: messages the dispatch rates still allow in their windows (None: unbounded)."""
        allowed = [
            a
            for a in (self.sub.topic.dispatch_limiter.available_msgs(), self.sub.dispatch_limiter.available_msgs())
            if a is not None
        ]
        return min(allowed) if allowed else None

    def _notify_end_of_topic(self) -> None:
        """Rule 7: tell every consumer not told yet that the terminated topic has nothing more."""
        if self.sub.topic.ml.state is not ManagedLedgerState.TERMINATED or self.replay:
            return
        if self.delayed is not None and self.delayed.count:
            return
        if self.sub.cursor.backlog > 0:
            return
        for c in self.consumers:
            c.reached_end_of_topic()

    async def _round(self) -> bool:
        if self._failover_hold_until is not None:  # Rule 3c
            if self.clock() < self._failover_hold_until:
                return False  # the run loop waits for the hold's end
            self._failover_hold_until = None
            self._notify_failover_active()
        self._release_due_delayed()
        self._notify_end_of_topic()
        # the subscription's unacked count, summed once per round (acks only lower it, and
        # `_assign` adds what it hands out), so `_can_take` stays O(1) per entry
        self._sub_unacked = self.unacked_messages
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            if self.active is None or not self._can_take(self.active):  # Rule 3d
                return False
        elif not any(self._can_take(c) for c in self.consumers):
            return False
        cursor = self.sub.cursor
        batch = self.config.dispatcher_max_read_batch_size
        allowed = self._rate_allows()
        if allowed is not None:
            if allowed <= 0:
                return False  # the run loop waits for the window's end (Rule 8)
            batch = min(batch, allowed)
        self._read_failure = None
        view = self.sub.topic.compactor.view if self.sub.read_compacted else None
        entries = await self._read_replay(batch, view)
        replayed = len(entries)
        read_new = 0
        if (
            self._read_failure is None
            and self._replay_room() > 0
            and len(entries) < batch
            and (self.delayed is None or self.delayed.accepting)
        ):
            permits = sum(max(0, c.permits) for c in self.consumers if self._can_take(c))
            want = min(batch - len(entries), max(1, permits))
            try:
                new = await self._read_compacted(want) if view is not None else []
                if not new:
                    new = await cursor.read_entries(
                        want, self.config.dispatcher_max_read_size_bytes, self.sub.topic.max_read_position
                    )
            except ManagedLedgerError as exc:  # Rule 2b: what was replayed still goes out
                self._read_failure = exc
                new = []
            read_new = len(new)
            entries.extend(new)
        sent = await self._assign(entries, replayed) if entries else 0
        if self._read_failure is not None:
            raise self._read_failure
        return sent > 0 or read_new > 0

    async def _read_replay(self, batch: int, view) -> list[Entry]:
        """Up to ``batch`` entries of ``replay`` (Rule 2), in position order. Stops at the first
        one storage cannot serve (``_read_failure``, Rule 2b): it and those after it stay."""
        cursor = self.sub.cursor
        ml = self.sub.topic.ml
        entries: list[Entry] = []
        for pos in list(self.replay.islice(0, batch)):
            if cursor.is_acked(pos):
                self.replay.discard(pos)
                self.redelivery_counts.pop(pos, None)
                continue
            from_view = view is not None and pos <= view.horizon
            try:
                if from_view:  # Rule 5b
                    compacted = await view.entry_at(pos)
                    if compacted is None:
                        self.replay.discard(pos)
                        self.redelivery_counts.pop(pos, None)
                        continue
                    entries.append(compacted)
                else:
                    entries.append(await ml.read_entry(pos))
            except ManagedLedgerError as exc:
                if not from_view and not ml.has_entry(pos):
                    log.warning(
                        "dispatcher %s: %s is no longer stored (%s); not delivering it", self.sub.full_name, pos, exc
                    )
                    self.replay.discard(pos)
                    self.redelivery_counts.pop(pos, None)
                    continue
                self._read_failure = exc
                break
            self.replay.discard(pos)
        return entries

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

    async def _assign(self, entries: list[Entry], replayed: int) -> int:
        """Hand ``entries`` to consumers; the first ``replayed`` came from ``replay``, the rest
        from the cursor (only those go through the delayed-delivery index, Rule 5)."""
        out: dict[Consumer, list[tuple[Entry, int, list[int] | None]]] = {}
        blocked_slots: set[int] = set()
        now_ms = self.clock() * 1000.0
        index = self.delayed
        sent = sent_msgs = sent_bytes = 0
        buffer = self.sub.topic.txn_buffer
        held = self.sub.pending_acks
        skipped: list[Position] = []
        for i, entry in enumerate(entries):
            pos = entry.position
            info = entry_info(entry.data)
            if buffer.skips(info.marker_type, info.txn):  # Rule 9: a marker, or aborted
                skipped.append(pos)
                continue
            if held.holds(pos):  # Rule 9: an open transaction acknowledged it
                continue
            if i >= replayed and index is not None:
                if pos in self.owner or pos in self.replay:
                    continue  # the index released it already (Rule 5)
                if info.deliver_at_ms is not None and index.offer(pos, info.deliver_at_ms, now_ms):
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
            out.setdefault(target, []).append((entry, self.redelivery_counts.get(pos, 0), self._ack_set(pos, info)))
            sent += 1
            sent_msgs += info.num_messages
            sent_bytes += len(entry.data)
        if skipped:
            await self.sub.cursor.delete(skipped)
            self.acked(skipped)
        if sent:
            self.sub.topic.dispatch_limiter.record(sent_msgs, sent_bytes)
            self.sub.dispatch_limiter.record(sent_msgs, sent_bytes)
        for consumer, items in out.items():
            await consumer.send_entries(items)
        return sent

    def _ack_set(self, pos: Position, info: EntryInfo) -> list[int] | None:
        if not info.is_batch:
            return None
        acked = (self.sub.cursor.batch_acked_indexes(pos) or set()) | self.sub.pending_acks.held_indexes(pos)
        if not acked:
            return None
        return ack_set_words(info.num_messages, acked)

    def _select(self, pos: Position, info: EntryInfo, blocked_slots: set[int]) -> Consumer | None:
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            if self._failover_hold_until is not None or (self.replay and self.replay[0] < pos):
                return None  # Rule 3d: a switch is pending, or an earlier entry waits
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
