"""A subscription: a managed cursor, its consumers and its dispatcher task.

Rules:

* Rule 1: all consumers of a subscription share one type; another type is refused (ConsumerBusy)
  while any consumer is attached. Exclusive takes a single consumer.
* Rule 2: a durable subscription keeps its cursor when its consumers leave; a non-durable one
  (a reader) closes its cursor and disappears with its last consumer.
* Rule 3: acks go to the cursor first, then the dispatcher forgets the entries.
* Rule 4: seek closes every consumer (CLOSE_CONSUMER, they re-subscribe), resets the cursor and
  the dispatcher's memory, and drops the delayed-delivery index (its bucket ledgers and keys).
* Rule 6 (delayed delivery): the subscription owns its delayed-delivery index (`_delayed`),
  created by the first Shared or Key_Shared dispatcher and kept while dispatchers come and go
  (consumers leaving and joining keep what it holds); its worker runs in the topic's nursery
  until the subscription closes. Deleting the subscription deletes its bucket ledgers.
* Rule 5 (read compacted): a subscription whose consumers asked for ``read_compacted`` (Exclusive
  and Failover subscriptions and readers only) reads the topic's compacted view up to its horizon
  before the topic after it (`_compaction`). ``compacted_next`` is where that read goes on (the
  position after the last compacted entry delivered; ``(-1,-1)``: from the view's start, for a
  new subscription at the earliest position, whose cursor cannot point into trimmed ledgers);
  None means from the cursor's read position.
* Rule 7 (transactions): acks made in a transaction are held by the subscription's
  `PendingAcks` (`broker.transactions.pending_ack`) until the transaction commits (then they are
  made in the cursor) or aborts (their entries are delivered again); the dispatcher delivers no
  entry they hold. They are persisted in the cursor's properties and read back on load.
* Rule 6 (activity): ``last_active`` (the service clock, seconds) is when the subscription was
  created or loaded, a consumer joined or left, or it was acknowledged or sought, as Pulsar's
  cursor ``lastActive``; subscription expiration reads it (`_subscription_expiry`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from magnetar.common.backoff import Backoff
from managed_ledger import ManagedCursor, ManagedLedgerError, Position

from .._errors import BrokerServiceError, ConsumerBusyError, ServiceNotReadyError
from ..transactions import TxnID
from ..transactions.pending_ack import PendingAcks
from ._consumer import Consumer
from ._delayed import DelayedIndex, IndexSettings, SideLedgerBucketStore, delete_bucket_ledgers
from ._delayed_format import parse_bucket_key
from ._dispatcher import Dispatcher, SubType
from ._entries import MAX_UNKNOWN_BATCH_SIZE, acked_indexes_from_ack_set, entry_metadata
from ._rate_limit import RateLimiter
from ._selectors import RangeConflictError
from ._stats import INDIVIDUAL_ACK_TYPES, OutCounters, Rates
from ._topic_limits import check_consumer_limits

if TYPE_CHECKING:
    from ._topic import Topic

__all__ = ["Subscription"]

log = logging.getLogger(__name__)


class Subscription:
    """See the module rules. Owned by its `Topic`; its dispatcher runs in the topic's nursery."""

    def __init__(self, topic: Topic, name: str, cursor: ManagedCursor, *, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.dispatcher: Dispatcher | None = None
        self._dispatch_scope: trio.CancelScope | None = None
        self._seq = 0
        self.closed = False
        self._lock = trio.Lock()  # seek and consumer attach never interleave
        self.read_compacted = False  # Rule 5
        self.compacted_next: Position | None = None  # Rule 5
        rate = topic.limits.subscription_dispatch_rate
        self.dispatch_limiter = RateLimiter(rate.msgs, rate.bytes, rate.period_s)
        self.delayed: DelayedIndex | None = None  # Rule 6
        self._delayed_scope: trio.CancelScope | None = None
        self._delayed_done = trio.Event()
        self._delayed_store: SideLedgerBucketStore | None = None
        # statistics (`_stats`): deliveries to any consumer (Rule 2 there), expiry, timestamps (ms)
        self.out_counters = OutCounters(topic.stats_state.out)
        self.msg_expired_counter = 0
        self.rates = Rates(1)  # expired
        self.last_expire_ms = 0
        self.last_flow_ms = 0
        self.last_md_advanced_ms = 0
        self.last_active = topic.service.clock()  # Rule 6
        # Rule 7: acks held by open transactions, persisted in the cursor's properties
        self.pending_acks = PendingAcks(self, self.full_name)
        if durable:
            self.pending_acks.load(cursor.cursor_properties)

    @property
    def full_name(self) -> str:
        """``topic/subscription`` for logs."""
        return f"{self.topic.name}/{self.name}"

    @property
    def consumers(self) -> list[Consumer]:
        """The attached consumers."""
        return list(self.dispatcher.consumers) if self.dispatcher else []

    @property
    def delayed_messages(self) -> int:
        """Messages held for delayed delivery (Rule 6)."""
        return self.delayed.count if self.delayed is not None else 0

    @property
    def sub_type(self) -> int | None:
        """The type of the attached consumers, None when there are none."""
        return self.dispatcher.sub_type if self.dispatcher and self.dispatcher.consumers else None

    @property
    def type_name(self) -> str:
        """Pulsar's ``getTypeString``: the type of the subscription's dispatcher, which stays when
        its consumers leave ("None" before any consumer attached since the topic was loaded)."""
        d = self.dispatcher
        return "None" if d is None else SubType.NAMES.get(d.sub_type, "None")

    async def add_consumer(
        self,
        *,
        consumer_id: int,
        name: str,
        connection,
        sub_type: int,
        priority: int,
        hash_ranges: list[tuple[int, int]] | None,
        metadata: dict[str, str],
    ) -> Consumer:
        """Attach a consumer per Rule 1; raises `ConsumerBusyError` or `BrokerServiceError`. A
        non-durable subscription whose consumer is refused goes away (Rule 2: it exists only with
        its consumers), so refused readers leave nothing behind on a loaded topic."""
        self.last_active = self.topic.service.clock()  # Rule 6
        async with self._lock:
            try:
                return await self._add_consumer(
                    consumer_id=consumer_id,
                    name=name,
                    connection=connection,
                    sub_type=sub_type,
                    priority=priority,
                    hash_ranges=hash_ranges,
                    metadata=metadata,
                )
            except BaseException:
                if not self.durable and not self.consumers:
                    with trio.CancelScope(shield=True):
                        await self.close()
                    if self.topic.subscriptions.get(self.name) is self:
                        del self.topic.subscriptions[self.name]
                raise

    async def _add_consumer(
        self,
        *,
        consumer_id: int,
        name: str,
        connection,
        sub_type: int,
        priority: int,
        hash_ranges: list[tuple[int, int]] | None,
        metadata: dict[str, str],
    ) -> Consumer:
        if self.closed:
            raise ServiceNotReadyError(f"subscription {self.full_name} is closed; retry")

        # `_topic_limits` Rule 4, with Pulsar's messages
        check_consumer_limits(self.topic.limits, self.topic.consumer_count, len(self.consumers))
        d = self.dispatcher
        if d is not None and d.consumers:
            if d.sub_type != sub_type:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is of type {SubType.NAMES[d.sub_type]}, "
                    f"not {SubType.NAMES.get(sub_type, sub_type)}"
                )
            if sub_type == SubType.EXCLUSIVE:
                raise ConsumerBusyError(f"exclusive consumer is already connected to subscription {self.name!r}")
            if sub_type == SubType.KEY_SHARED and d.sticky != bool(hash_ranges):
                raise ConsumerBusyError("Key_Shared consumers of a subscription must all use the same mode")
        if d is None or not d.consumers:
            await self._stop_dispatcher()
            if self.dispatcher is not None:
                # a previous dispatcher read ahead: deliver its unacked entries again
                self.cursor.rewind()
                self.compacted_next = self._compacted_restart()
            d = self.dispatcher = Dispatcher(self, sub_type, sticky=bool(hash_ranges))
            await self.topic.start_task(self._run_dispatcher, d)
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
        try:
            d.add_consumer(consumer)
        except RangeConflictError as exc:
            from protocols.pulsar import pulsar_api_pb2 as pb

            raise BrokerServiceError(str(exc), pb.ConsumerAssignError) from None
        consumer.read_position_when_joining = consumer.join_barrier
        d.notify_new_failover_consumer(consumer)
        return consumer

    def _compacted_restart(self) -> Position | None:
        """Where a rewound read of the compacted view starts (Rule 5): from the view's start while
        nothing of the stored ledgers is acked (the cursor may sit after ledgers trimmed before it
        existed, whose keys the view still holds), else from the cursor's read position."""
        if self.read_compacted and self.cursor.mark_delete_position < self.topic.first_position():
            return Position(-1, -1)
        return None

    async def _run_dispatcher(self, d: Dispatcher, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._dispatch_scope = scope
            task_status.started()
            await d.run()

    async def _stop_dispatcher(self) -> None:
        if self._dispatch_scope is not None:
            self._dispatch_scope.cancel()
            self._dispatch_scope = None

    # ------------------------------------------------------------------ delayed delivery (Rule 6)

    async def delayed_index(self) -> DelayedIndex:
        """The subscription's delayed-delivery index, created (and its worker started) on first use."""
        if self.delayed is None:
            topic = self.topic
            service = topic.service
            config = service.config
            store = SideLedgerBucketStore(service.factory.side_ledgers, self.cursor, topic.ml.name)
            index = DelayedIndex(
                self.full_name,
                store,
                IndexSettings.from_config(config, topic.ml.max_entry_size),
                acked_up_to=lambda: self.cursor.mark_delete_position,
                backoff=Backoff(
                    config.dispatcher_read_failure_backoff_initial_time_ms / 1000,
                    config.dispatcher_read_failure_backoff_max_time_ms / 1000,
                    jitter=0.1,
                ),
                clock_ms=lambda: service.clock() * 1000.0,
            )
            self.delayed, self._delayed_store = index, store
            self._delayed_done = trio.Event()
            await topic.start_task(self._run_delayed, index, self._delayed_done)
        return self.delayed

    async def _run_delayed(self, index: DelayedIndex, done: trio.Event, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            with trio.CancelScope() as scope:
                self._delayed_scope = scope
                await index.run(task_status=task_status)
        finally:
            done.set()

    async def _stop_delayed(self) -> None:
        """Stop the index's worker and forget the index (what it held in memory is read again)."""
        if self._delayed_scope is not None:
            self._delayed_scope.cancel()
            self._delayed_scope = None
            # its last metadata write must be over before anyone reads the cursor's properties
            with trio.CancelScope(shield=True):
                await self._delayed_done.wait()
        if self._delayed_store is not None:
            await self._delayed_store.close()
            self._delayed_store = None
        self.delayed = None

    async def _delete_delayed(self, *, keep_keys: bool) -> None:
        """Stop the index and delete its bucket ledgers; unless ``keep_keys`` (the cursor goes too),
        remove their keys from the cursor's properties."""
        await self._stop_delayed()
        props = self.cursor.cursor_properties
        await delete_bucket_ledgers(self.topic.service.factory.side_ledgers, props)
        keys = []
        for key in props:
            try:
                if parse_bucket_key(key) is not None:
                    keys.append(key)
            except ValueError:
                keys.append(key)
        if keys and not keep_keys:
            await self.cursor.update_cursor_properties({}, keys)

    async def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; a non-durable subscription goes away with its last one (Rule 2)."""
        self.last_active = self.topic.service.clock()  # Rule 6
        if self.dispatcher is None:
            return
        self.dispatcher.remove_consumer(consumer)
        consumer.closed = True
        if not self.dispatcher.consumers:
            await self._stop_dispatcher()
            if not self.durable:
                await self.close()
                self.topic.subscriptions.pop(self.name, None)

    async def close(self) -> None:
        """Stop dispatching and close the cursor (its state is persisted by the managed ledger)."""
        if self.closed:
            return
        self.closed = True
        await self._stop_dispatcher()
        if self.durable:
            await self._stop_delayed()
        else:
            await self._delete_delayed(keep_keys=True)  # a reader's cursor keeps nothing
        for c in self.consumers:
            c.close_from_broker()
        try:
            await self.cursor.close()
        except ManagedLedgerError as exc:
            log.warning("closing cursor of %s: %s", self.full_name, exc)

    # ------------------------------------------------------------------ acks

    async def ack_individual(self, consumer: Consumer, items: Iterable[tuple[Position, list[int], int]]) -> None:
        """Individual acks: ``(position, ack_set, batch_size)``; an ack_set acks part of a batch.
        Counts the messages acknowledged on ``consumer`` (Pulsar's ``messageAckRate``)."""
        whole: list[Position] = []
        before = self.cursor.mark_delete_position
        consumer.last_acked_ms = int(time.time() * 1000)
        self.last_active = self.topic.service.clock()  # Rule 6
        for pos, ack_set, batch_size in items:
            if ack_set:
                size = self._batch_size(consumer, pos, batch_size)
                if size is None:
                    continue
                acked = acked_indexes_from_ack_set(size, ack_set) if size else set()
                if not self.cursor.is_acked(pos):
                    consumer.msg_ack_counter += len(acked - set(self.cursor.batch_acked_indexes(pos) or ()))
                if size and len(acked) < size:
                    await self.cursor.delete_batch_indexes(pos, size, acked)
                    if self.cursor.is_acked(pos):
                        whole.append(pos)
                    continue
            elif not self.cursor.is_acked(pos):
                acked_before = self.cursor.batch_acked_indexes(pos)
                held = consumer.pending.get(pos, 0) or self._pending_size(pos) or 1
                consumer.msg_ack_counter += max(1, held - len(acked_before or ()))
            whole.append(pos)
        if whole:
            await self.cursor.delete(whole)
            if self.dispatcher:
                self.dispatcher.acked(whole)
        self._note_mark_delete(before)

    @property
    def backlog(self) -> int:
        """Messages a consumer can still get: the cursor's backlog without the entries held
        behind open transactions (`_topic` Rule 9)."""
        return max(0, self.cursor.backlog - self.topic.txn_buffer.held_entries())

    # ------------------------------------------------------------------ acks in transactions (Rule 7)

    async def ack_individual_in_txn(
        self, consumer: Consumer, txn: TxnID, items: Iterable[tuple[Position, list[int], int]]
    ) -> None:
        """Individual acks of ``txn``: ``(position, ack_set, batch_size)``, held until it ends;
        raises `BrokerServiceError` (TransactionConflict) as Pulsar (`pending_ack` Rule 2)."""
        consumer.last_acked_ms = int(time.time() * 1000)
        self.last_active = self.topic.service.clock()  # Rule 6
        held: list[tuple[Position, frozenset[int] | None, int]] = []
        for pos, ack_set, batch_size in items:
            indexes: frozenset[int] | None = None
            size = 0
            if ack_set:
                size = self._batch_size(consumer, pos, batch_size) or 0
                acked = acked_indexes_from_ack_set(size, ack_set) if size else set()
                if size and len(acked) < size:
                    indexes = frozenset(acked)
            held.append((pos, indexes, size))
        await self.pending_acks.ack_individual(txn, held)
        consumer.msg_ack_counter += len(held)

    async def ack_cumulative_in_txn(
        self, consumer: Consumer, txn: TxnID, pos: Position, ack_set: list[int], batch_size: int
    ) -> None:
        """A cumulative ack of ``txn`` up to ``pos`` (a partly acknowledged batch at ``pos``: up to
        the entry before it), held until the transaction ends (`pending_ack` Rule 2)."""
        consumer.last_acked_ms = int(time.time() * 1000)
        self.last_active = self.topic.service.clock()  # Rule 6
        size = self._batch_size(consumer, pos, batch_size) or 0
        if ack_set and size and len(acked_indexes_from_ack_set(size, ack_set)) < size:
            pos = Position(pos.ledger_id, pos.entry_id - 1)
        await self.pending_acks.ack_cumulative(txn, pos)
        consumer.msg_ack_counter += 1

    def forget_delivered(self, positions: list[Position], up_to: Position | None) -> None:
        """`PendingAckHost`: the dispatcher stops tracking these entries (acknowledged or held)."""
        if self.dispatcher is None:
            return
        if positions:
            self.dispatcher.acked(positions)
        if up_to is not None:
            self.dispatcher.acked_up_to(up_to)

    def redeliver(self, positions: list[Position] | None) -> None:
        """`PendingAckHost`: deliver these entries again (None: everything not acknowledged)."""
        if self.dispatcher is None:
            return
        if positions is None:
            self.cursor.rewind()
            self.dispatcher.reset()
        else:
            self.dispatcher.release(positions)

    def _note_mark_delete(self, before: Position) -> None:
        if self.cursor.mark_delete_position > before:
            self.last_md_advanced_ms = int(time.time() * 1000)

    def _batch_size(self, consumer: Consumer, pos: Position, claimed: int) -> int | None:
        """The batch size of a partial ack: the broker's own count when it delivered the entry,
        else the client's (refused, None, when over `MAX_UNKNOWN_BATCH_SIZE`: the loops over a
        batch's indexes must not be sized by a client)."""
        known = consumer.pending.get(pos, 0) or self._pending_size(pos)
        if known:
            return known
        if claimed > MAX_UNKNOWN_BATCH_SIZE:
            log.warning(
                "%s: ignoring a partial ack of %s claiming %d messages in its batch", self.full_name, pos, claimed
            )
            return None
        return claimed

    def _pending_size(self, pos: Position) -> int:
        if self.dispatcher is None:
            return 0
        owner = self.dispatcher.owner.get(pos)
        return owner.pending.get(pos, 0) if owner else 0

    async def ack_cumulative(self, consumer: Consumer, pos: Position, ack_set: list[int], batch_size: int) -> None:
        """Cumulative ack up to ``pos`` (an ack_set means: up to before it, plus part of it).
        Counts one acknowledgement on ``consumer``, as Pulsar does for a cumulative ack."""
        consumer.last_acked_ms = int(time.time() * 1000)
        self.last_active = self.topic.service.clock()  # Rule 6
        consumer.msg_ack_counter += 1
        size = self._batch_size(consumer, pos, batch_size) or 0
        if ack_set and size:
            acked = acked_indexes_from_ack_set(size, ack_set)
            if len(acked) < size:
                earlier = [p for p in (self.dispatcher.owner if self.dispatcher else {}) if p < pos]
                if earlier:
                    await self._mark_delete(max(earlier))
                await self.cursor.delete_batch_indexes(pos, size, acked)
                return
        await self._mark_delete(pos)

    async def _mark_delete(self, pos: Position) -> None:
        if pos <= self.cursor.mark_delete_position:
            return
        await self.cursor.mark_delete(pos)
        self.last_md_advanced_ms = int(time.time() * 1000)
        if self.dispatcher:
            self.dispatcher.acked_up_to(pos)

    async def expire_up_to(self, position: Position) -> None:
        """Acknowledge every message up to and including ``position`` (admin expire-messages by
        message id); a position at or before the mark-delete position changes nothing, one past
        the last stored entry acknowledges them all."""
        last = self.topic.ml.last_confirmed_entry
        backlog = self.cursor.backlog
        await self._mark_delete(min(position, last))
        self.note_expired(backlog - self.cursor.backlog)

    async def expire_published_before(self, cutoff_ms: int) -> Position | None:
        """Acknowledge every message published before ``cutoff_ms`` (admin expire-messages):
        mark-delete up to the newest such entry after the mark-delete position; return it (None
        when nothing was older)."""

        def before(entry) -> bool:
            try:
                return entry_metadata(entry.data).publish_time < cutoff_ms
            except Exception:
                return True

        found = await self.cursor.find_newest_matching(before)
        if found is None:
            return None
        backlog = self.cursor.backlog
        await self._mark_delete(found)
        self.note_expired(backlog - self.cursor.backlog)
        return found

    # ------------------------------------------------------------------ seek

    async def seek(self, position: Position) -> None:
        """Reset the cursor to ``position`` (next read) per Rule 4."""
        self.last_active = self.topic.service.clock()  # Rule 6
        async with self._lock:
            for c in self.consumers:
                c.close_from_broker()
                if self.dispatcher:
                    self.dispatcher.remove_consumer(c)
            await self._stop_dispatcher()
            if self.dispatcher:
                self.dispatcher.reset()
            await self._delete_delayed(keep_keys=False)
            await self.cursor.reset(position)
            self.compacted_next = self._compacted_restart()

    async def position_for_publish_time(self, publish_time_ms: int) -> Position:
        """The first position whose message was published at or after ``publish_time_ms``."""

        def before(entry) -> bool:
            try:
                return entry_metadata(entry.data).publish_time < publish_time_ms
            except Exception:
                return True

        found = await self.cursor.find_newest_matching(before, search_all=True)
        if found is None:
            return self.topic.first_position()
        return self.topic.next_position(found)

    # ------------------------------------------------------------------ stats (`_stats`)

    def note_flow(self, consumer: Consumer) -> None:
        """A FLOW arrived from ``consumer`` (Pulsar's ``lastConsumedFlowTimestamp``)."""
        consumer.last_flow_ms = self.last_flow_ms = int(time.time() * 1000)

    def note_expired(self, entries: int) -> None:
        """Message expiry (TTL or the admin's expire-messages) acknowledged ``entries`` entries."""
        if entries > 0:
            self.msg_expired_counter += entries
            self.last_expire_ms = int(time.time() * 1000)

    def update_rates(self, now: float) -> None:
        """The subscription's own rates at ``now`` (`_stats` Rule 3): messages expired per second."""
        self.rates.update(now, self.msg_expired_counter)

    def _individual_ack(self) -> bool:
        return self.dispatcher is not None and self.dispatcher.sub_type in INDIVIDUAL_ACK_TYPES

    def consumer_blocked(self, consumer: Consumer) -> bool:
        """Whether the dispatcher holds ``consumer`` back for its unacked messages (`_stats` Rule 4)."""
        limit = self.topic.limits.max_unacked_per_consumer
        return self._individual_ack() and limit > 0 and consumer.unacked_messages >= limit

    @property
    def blocked(self) -> bool:
        """Whether the dispatcher holds the whole subscription back for its unacked messages
        (`_stats` Rule 4)."""
        limit = self.topic.limits.max_unacked_per_subscription
        return self._individual_ack() and limit > 0 and sum(c.unacked_messages for c in self.consumers) >= limit
