"""A loaded persistent topic: its managed ledger, producers, subscriptions and their tasks.

Rules:

* Rule 1 (ordering): adds enter the managed ledger in SEND arrival order, so positions follow
  arrival order, and each producer's receipts go out in order (see `_producer`). Each SEND is
  queued in ``_to_append``; one appender task per burst (started when the queue was empty, gone
  when it is empty again) hands the queued SENDs, oldest first, to ``ManagedLedger.append``,
  whose admission is FIFO and, while nobody waits for room, has no schedule point, so a burst of
  SENDs is admitted in one scheduler round. One completer task per burst takes the managed
  ledger's pending adds in that same order (``_appended``) and answers each SEND as its add
  finishes (adds finish in admission order), a whole run of finished adds in one pass. There is
  no task per SEND (the managed ledger issues its adds to the BookKeeper client the same way:
  `managed_ledger._append_pipeline`).
* Rule 2 (access modes, as Pulsar's broker; decided by `_access_modes`, shared with non-persistent
  topics): Shared producers coexist and are refused
  (ProducerBusy) while an exclusive producer holds the topic or one waits for it. Exclusive is
  refused with ProducerFenced while any other producer is connected or waiting. WaitForExclusive
  is parked (``producer_ready=false``) while any producer is connected and promoted, oldest first,
  once the topic has none. ExclusiveWithFencing closes every other producer (CLOSE_PRODUCER) and
  fails every parked one (ProducerFenced), then takes the topic. Each exclusive grant sets the
  topic epoch: the epoch the producer asks for (a reconnect), else the last epoch + 1 (0 for the
  first); an exclusive producer asking for an epoch below the topic's is fenced (ProducerFenced),
  which is how a holder taken over by ExclusiveWithFencing learns it on reconnecting. The epoch is
  stored as the managed ledger's ``pulsar.topic.epoch`` property before the grant is answered,
  so it survives unloads and broker restarts.
* Rule 3 (lifecycle): LOADED until `close`; after close every request fails with ServiceNotReady
  and the client reconnects (which loads the topic again). A fenced managed ledger (another
  owner) closes the topic.
* Rule 4 (backlog quota hold): while the topic's backlog quota says ``producer_request_hold``,
  each add waits (the appender waits before taking the head of the queue, so the SENDs behind it
  wait in order and Rule 1 holds) until the quota clears or ``backlog_quota_hold_timeout_s``
  passes; then it fails with SEND_ERROR and the client reconnects and resends. Held SENDs keep
  their bytes counted against the connection, so a held producer is paced by the connection's
  bounded window, never buffered without limit.
* Rule 5 (deduplication switch): `set_deduplication` turns dedup on or off while the topic stays
  loaded (the namespace policy changed). Turning it on builds the state with SENDs going on:
  while ``_dedup_enabling`` is set every admitted SEND is noted as pushed and every stored entry
  as persisted in the new state, then it replaces ``dedup`` (see `_dedup` Rule 7). Switches are
  serialized by ``_dedup_lock``. The dedup cursor is never a subscription, and no client or admin
  request may use its name as one. Every SEND a dedup state counted in flight is settled with
  that state when it is answered (`_dedup` Rule 2), and producers attaching and leaving are told
  to it (inactivity, `_dedup` Rule 4); the service's timers take time-based snapshots and purge
  inactive producer names through `check_deduplication_snapshot` and `purge_inactive_dedup_producers`.
* Rule 6 (storage unavailable): an add failing because no ledger can be created (no writable
  bookies: full disks, read-only, down, all in quarantine) closes every producer of the topic
  (CLOSE_PRODUCER, not SEND_ERROR, which would drop the client's whole connection, consumers
  included); the client keeps its unanswered sends, reconnects and resends them. Re-creating the
  producer is never refused for it (the clients' reconnect backoff doubles with every refusal, up
  to a minute, so refusals kept writes stopped that long after storage was back). While no
  ledger can be created the appender holds the queued SENDs, in order, trying once per
  ``_STORAGE_RETRY_S``; a held SEND of a producer closed meanwhile is dropped (its client resent
  it). So sends wait, as with Pulsar, until storage returns or the client's send timeout ends
  them, and resume as soon as a ledger can be created.
* Rule 7 (terminated): `terminate` stops the managed ledger for good and closes every producer;
  a new producer is refused with TopicTerminatedError (also after a reload). Consumers keep
  reading what is stored; once a subscription has everything acknowledged, each of its consumers
  is told REACHED_END_OF_TOPIC (the dispatcher's Rule 7), as Pulsar's dispatchers do.
* Rule 8 (a duplicate of a SEND still in flight, DUPLICATE_PENDING of `_dedup` Rule 1): it is not
  stored, and its receipt is held until the *original* is answered: the first SEND in flight of
  the same producer name whose highest sequence id covers it (adds finish in order, and a failed
  one fails those admitted after it, so that one settles the question). Once the original is
  stored the duplicate is confirmed (-1:-1, as any duplicate); if the original fails, so does the
  duplicate (SEND_ERROR), its producer counts as failed (Rule 3 of `_producer`) and the client's
  resend is judged again once nothing of that name is in flight. A later SEND of that producer is
  refused as soon as the original's add failed, even before the failure is answered, so nothing
  of it is stored ahead of the resend. Pulsar answers such a SEND at once with SEND_ERROR
  (PersistenceError, "cannot determine whether the message is a duplicate"), on which the Java,
  Go and C++ clients all drop the connection and resend; holding it reaches the same end without
  the reconnect while the original succeeds. Only when no original can be found (never expected)
  is the duplicate answered that way.
* Rule 9 (transactions): a SEND of a transaction is stored as it arrives, and the topic's
  transaction buffer (`broker.transactions.buffer`) learns of every stored entry, in position
  order, before dispatchers are woken. Its max read position bounds what subscriptions, readers
  and compaction read (so nothing at or after an open transaction's first entry is read, and
  plain messages after it wait in order); markers and aborted entries are never delivered. The
  buffer recovers its state when the topic loads, before anyone reads.
* Rule 10 (geo-replication, see `broker.replication`): ``replicators`` holds the replicators the
  topic runs (one per remote cluster, tasks of its nursery, stopped first on close); their
  ``pulsar.repl.*`` cursors are not subscriptions and no client may subscribe with such a name. A
  topic with a replication backlog is not idle (it stays loaded until its replicators have
  caught up). A SEND from a replicator producer (name ``pulsar.repl.*``) is deduplicated on the
  original producer's name carried in its metadata (``dedup_name``), as Pulsar does, so a
  message resent after an outage is stored once when deduplication is on.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from managed_ledger import (
    InitialPosition,
    ManagedLedger,
    ManagedLedgerError,
    ManagedLedgerFenced,
    ManagedLedgerState,
    PendingAdd,
    Position,
    StorageUnavailable,
)
from protocols.pulsar import InvalidTopicNameError, TopicName, check_subscription_name
from protocols.pulsar import pulsar_api_pb2 as pb
from retention import QuotaDecision

from .._errors import BrokerServiceError, NotAllowedError, ProducerBusyError, ServiceNotReadyError
from ..transactions import TxnID
from ..transactions.buffer import SNAPSHOT_CURSOR, TransactionBuffer
from ._access_modes import Admission, Waiting, admit, fenced, next_to_promote
from ._compaction import COMPACTION_CURSOR, Compactor
from ._dedup import DEDUP_CURSOR, Deduplication, DedupVerdict
from ._delayed import delete_bucket_ledgers
from ._entries import entry_info
from ._producer import Producer
from ._rate_limit import RateLimiter
from ._replication_view import ReplicatorView, is_replicator_name
from ._stats import TopicStatsState
from ._subscription import Subscription
from ._topic_limits import TopicLimits, check_producer_limit, configure_rates

if TYPE_CHECKING:
    from .._service import BrokerService
    from ._producer import Receipt

__all__ = ["Topic"]

log = logging.getLogger(__name__)

_MAX_SUBSCRIBE_LIMITERS = 10_000
"""Consumers whose subscribe rate a topic tracks at once (the least recently seen are forgotten)."""


_STORAGE_RETRY_S = 1.0
"""How often SENDs held while storage is unavailable try to create a ledger again (Rule 6)."""

TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"  # the managed-ledger property holding the topic epoch (Rule 2)

SYSTEM_CURSORS = frozenset({DEDUP_CURSOR, COMPACTION_CURSOR, SNAPSHOT_CURSOR})
"""The broker's own cursors on a topic: none of them is a subscription."""

LAST_DISPATCHABLE_SCAN = 1000
"""Entries `Topic.last_dispatchable_position` looks back over (markers and aborted entries)."""

TXN_SNAPSHOT_EVERY = 1000
"""Transaction ends between two transaction-buffer snapshots (Pulsar's
``transactionBufferSnapshotMaxTransactionCount`` default)."""
TXN_SNAPSHOT_MIN_INTERVAL_S = 5.0
"""Seconds after which a transaction end takes a snapshot (Pulsar's
``transactionBufferSnapshotMinTimeInMillis`` default)."""


def _stored_epoch(ml: ManagedLedger) -> int | None:
    value = dict(getattr(ml, "properties", {}) or {}).get(TOPIC_EPOCH_PROPERTY)
    try:
        return None if value is None else int(value)
    except ValueError:
        log.warning("topic %s: ignoring a malformed %s property %r", ml.name, TOPIC_EPOCH_PROPERTY, value)
        return None


@dataclass(slots=True, eq=False)
class _Send:
    """A SEND on its way to storage (Rule 1): in ``_to_append``, then in ``_appended``."""

    producer: Producer
    receipt: Receipt  # the producer's receipt slot, answered once (Rule 1 of `_producer`)
    data: bytes  # the entry: metadata and payload as the client sent them
    sequence_id: int
    highest: int  # the sequence id it is deduplicated on (`_dedup` Rule 1)
    started: float  # monotonic arrival time (publish latency)
    partial_chunk: bool  # a chunk of a chunked message before its last (`_dedup` Rule 6)
    dedup_name: str  # the producer name it is deduplicated on (Rule 10)
    counted: Deduplication | None = None  # the dedup state counting it in flight (`_dedup` Rule 2)
    add: PendingAdd | None = None  # its managed-ledger add, once appended
    followers: list[tuple[Producer, Receipt]] | None = None  # duplicates held on it (Rule 8)
    txn: TxnID | None = None  # the transaction it belongs to (Rule 9)


class Topic:
    """See the module rules. Created and closed by `BrokerService`."""

    def __init__(self, service: BrokerService, name: TopicName, ml: ManagedLedger, dedup: Deduplication | None) -> None:
        self.service = service
        self.name = name
        self.ml = ml
        self.dedup = dedup
        self._dedup_enabling: Deduplication | None = None
        self._dedup_lock = trio.Lock()
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.closed = False
        self.last_active = service.clock()
        self.topic_epoch: int | None = _stored_epoch(ml)  # Rule 2; None until the first exclusive grant
        self._waiting: Waiting = []  # parked WaitForExclusive producers (`_access_modes`)
        self._nursery: trio.Nursery | None = None
        self._to_append: deque[_Send] = deque()  # arrived, not yet appended (Rule 1)
        self._appended: deque[tuple[_Send, PendingAdd]] = deque()  # appended, not yet answered
        self._in_hand: _Send | None = None  # taken off ``_to_append``, its add being admitted
        self._appending = False  # the appender task runs
        self._completing = False  # the completer task runs
        self._sub_lock = trio.Lock()
        self._adds_in_flight = 0  # SENDs queued, appended or being answered (what close waits for)
        self._adds_drained = trio.Event()
        self._adds_drained.set()
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.stats_state = TopicStatsState()
        self.compactor = Compactor(self)  # topic compaction (`_compaction`)
        # `_topic_limits`: the service resolves the stored policies right after loading
        self.limits = TopicLimits.from_config(service.config)
        self.publish_limiter = RateLimiter()
        self.dispatch_limiter = RateLimiter()
        # subscribe rate per (client host, consumer name, consumer id), least recently used first
        self._subscribe_limiters: OrderedDict[tuple[str, str, int], RateLimiter] = OrderedDict()
        # backlog-quota decisions holding or rejecting producers (retention's `QuotaStates`, kept
        # here so they last as long as the topic is loaded and go with it), and when the broker
        # last evaluated the quota for a producer (`BrokerService.recheck_quota`)
        self.quota_decisions: tuple[QuotaDecision, ...] = ()
        self.quota_checked_at = -float("inf")
        # Rule 9: the transaction buffer (its state is recovered by `run`)
        self.txn_buffer = TransactionBuffer(
            self,
            snapshot_every=TXN_SNAPSHOT_EVERY,
            snapshot_min_interval_s=TXN_SNAPSHOT_MIN_INTERVAL_S,
            clock=service.clock,
        )
        # geo-replication (Rule 10): the running replicators by remote cluster, started and
        # stopped by `broker.replication` in this topic's nursery
        self.replicators: dict[str, ReplicatorView] = {}
        for sub_name, cursor in dict(getattr(ml, "cursors", {})).items():
            # deduplication's, compaction's, the transaction buffer's and the replicators' own
            # cursors are not subscriptions
            if sub_name not in SYSTEM_CURSORS and not is_replicator_name(sub_name):
                self.subscriptions[sub_name] = Subscription(self, sub_name, cursor, durable=True)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the topic's tasks until `close` (started in the service's nursery)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.txn_buffer.recover()  # Rule 9: nothing is read before open transactions are known
            await self.compactor.load()  # read_compacted consumers need the view from the start
            nursery.start_soon(self.compactor.monitor)
            task_status.started()
            await trio.sleep_forever()

    async def start_task(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``fn(*args, task_status=...)`` in the topic's nursery."""
        self._check_open()
        assert self._nursery is not None
        await self._nursery.start(fn, *args)

    def start_soon(self, fn: Callable[[], Awaitable[Any]]) -> bool:
        """Run ``fn()`` in the topic's nursery (cancelled when the topic closes); False, running
        nothing, when the topic is closed or not running yet."""
        if self.closed or self._nursery is None:
            return False
        try:
            self._nursery.start_soon(fn)
        except RuntimeError:  # the nursery is closing: the topic is going away
            return False
        return True

    def _check_open(self) -> None:
        if self.closed:
            raise ServiceNotReadyError(f"topic {self.name} is being unloaded; retry")

    @property
    def idle(self) -> bool:
        """No producer, no consumer, no add in flight, no compaction running, and nothing left to
        replicate (Rule 10)."""
        return (
            not self.producers
            and not self._waiting
            and not any(s.consumers for s in self.subscriptions.values())
            and not self.compactor.running
            and not any(r.backlog for r in self.replicators.values())
        )

    @property
    def waiting_producers(self) -> list[Producer]:
        """WaitForExclusive producers parked until the topic is free."""
        return [p for p, _ in self._waiting]

    def touch(self) -> None:
        """Note activity (for idle unloading)."""
        self.last_active = self.service.clock()

    def apply_limits(self, limits: TopicLimits) -> None:
        """Enforce ``limits`` from now on (`_topic_limits` Rule 3): the rate limiters take the new
        bounds and every dispatcher runs a round under them."""
        subs = list(self.subscriptions.values())
        configure_rates(self, limits, [sub.dispatch_limiter for sub in subs])
        for sub in subs:
            if sub.dispatcher is not None:
                sub.dispatcher.wake()

    def check_subscribe_rate(self, remote: str, consumer_name: str, consumer_id: int) -> None:
        """Count one subscribe of this consumer against the subscribe rate (`_topic_limits`
        Rule 4); raises `NotAllowedError` with Pulsar's message when it is over. The table of
        consumers is bounded (`_MAX_SUBSCRIBE_LIMITERS`, least recently seen dropped first)."""
        rate = self.limits.subscribe_rate
        if rate.per_consumer <= 0:
            self._subscribe_limiters.clear()
            return
        host = remote.rsplit(":", 1)[0]  # "host:port" / "[v6]:port": a client's port changes on reconnect
        key = (host, consumer_name, consumer_id)
        limiter = self._subscribe_limiters.pop(key, None)
        if limiter is None:
            limiter = RateLimiter(rate.per_consumer, 0, rate.period_s)
        else:
            limiter.configure(rate.per_consumer, 0, rate.period_s)
        self._subscribe_limiters[key] = limiter
        while len(self._subscribe_limiters) > _MAX_SUBSCRIBE_LIMITERS:
            self._subscribe_limiters.popitem(last=False)
        if limiter.exhausted():
            raise NotAllowedError("Subscribe limited by subscribe rate limit per consumer.")
        limiter.record(1, 0)

    @property
    def consumer_count(self) -> int:
        """Consumers attached over all subscriptions."""
        return sum(len(s.consumers) for s in self.subscriptions.values())

    # ------------------------------------------------------------------ producers

    async def add_producer(self, producer: Producer, on_ready: Callable[[BrokerServiceError | None], None]) -> bool:
        """Attach a producer per Rule 2. True: ready now; False: parked, and ``on_ready`` runs later
        with None once it holds the topic, or with the error that refused it.

        Raises `ProducerBusyError` or `BrokerServiceError` (ProducerFenced).
        """
        self._check_open()
        self.touch()
        if self.ml.state is ManagedLedgerState.TERMINATED:
            raise BrokerServiceError(f"topic {self.name} is terminated", pb.TopicTerminatedError)
        if producer.name in self.producers:
            raise ProducerBusyError(f"producer with name {producer.name!r} is already connected to topic {self.name}")
        check_producer_limit(self.limits, len(self.producers) + len(self._waiting))  # `_topic_limits`
        before = list(self.producers)
        admission = admit(str(self.name), self.producers, self._waiting, producer, on_ready)
        for name in before:
            if name not in self.producers:  # closed by ExclusiveWithFencing
                self._dedup_detached(name)
        if admission is not Admission.EXCLUSIVE:
            if admission is Admission.ATTACHED:
                self._dedup_attached(producer.name)
            return admission is Admission.ATTACHED
        current = -1 if self.topic_epoch is None else self.topic_epoch
        if producer.requested_epoch is not None and producer.requested_epoch < current:
            # a reconnecting exclusive producer that another one has fenced off
            raise fenced(
                f"producer {producer.name!r}: the epoch of topic {self.name} has already moved "
                f"(current epoch {current}, producer epoch {producer.requested_epoch})"
            )
        self.producers[producer.name] = producer
        self._dedup_attached(producer.name)
        try:
            await self._grant_epoch(producer)
        except BaseException:
            self.remove_producer(producer)  # and promote a waiting one if the topic is free now
            raise
        return True

    async def _grant_epoch(self, producer: Producer) -> None:
        """Give an exclusive producer its topic epoch and store it first (Rule 2)."""
        if producer.requested_epoch is not None:
            epoch = producer.requested_epoch
        else:
            epoch = (-1 if self.topic_epoch is None else self.topic_epoch) + 1
        producer.epoch = epoch
        if epoch != self.topic_epoch:
            try:
                await self.ml.set_property(TOPIC_EPOCH_PROPERTY, str(epoch))
            except ManagedLedgerError as exc:
                raise ServiceNotReadyError(f"topic {self.name}: cannot store the topic epoch: {exc}") from None
        self.topic_epoch = epoch

    def remove_producer(self, producer: Producer) -> None:
        """Detach a producer (closed by the client or its connection); promote a waiting one once
        the topic has no producer left (Rule 2)."""
        self._waiting = [(p, cb) for p, cb in self._waiting if p is not producer]
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self._dedup_detached(producer.name)
        producer.closed = True
        self.touch()
        if self._nursery is not None and not self.closed and (nxt := next_to_promote(self.producers, self._waiting)):
            waiting, on_ready = nxt
            self.producers[waiting.name] = waiting
            self._dedup_attached(waiting.name)
            self._nursery.start_soon(self._promote, waiting, on_ready)

    async def _promote(self, producer: Producer, on_ready: Callable[[BrokerServiceError | None], None]) -> None:
        try:
            await self._grant_epoch(producer)
        except BrokerServiceError as exc:
            if self.producers.get(producer.name) is producer:
                del self.producers[producer.name]
                self._dedup_detached(producer.name)
            producer.closed = True
            on_ready(exc)
            return
        if not producer.closed:  # else its client went away meanwhile (remove_producer ran)
            on_ready(None)

    def last_sequence_id(self, producer_name: str) -> int:
        """What PRODUCER_SUCCESS reports: the highest persisted sequence id with dedup, else -1."""
        return self.dedup.last_sequence_id(producer_name) if self.dedup else -1

    def _dedup_states(self) -> Iterator[Deduplication]:
        if self.dedup is not None:
            yield self.dedup
        if self._dedup_enabling is not None:
            yield self._dedup_enabling

    def _dedup_attached(self, name: str) -> None:
        for state in self._dedup_states():
            state.producer_added(name)

    def _dedup_detached(self, name: str) -> None:
        for state in self._dedup_states():
            state.producer_removed(name, self.service.clock())

    async def check_deduplication_snapshot(self) -> None:
        """Take a dedup snapshot when ``brokerDeduplicationSnapshotIntervalSeconds`` passed since the
        last one and entries were stored since (`_dedup` Rule 3); a failure is logged (the next
        check retries)."""
        dedup = self.dedup
        if dedup is None or self.closed:
            return
        try:
            await dedup.snapshot_if_stale(self.service.clock(), self.service.config.deduplication_snapshot_interval_s)
        except ManagedLedgerError as exc:
            log.warning("dedup snapshot of %s failed: %s", self.name, exc)

    async def purge_inactive_dedup_producers(self) -> None:
        """Forget the producer names inactive for ``brokerDeduplicationProducerInactivityTimeoutMinutes``
        (`_dedup` Rule 4) and, when any was, take a snapshot without them."""
        dedup = self.dedup
        if dedup is None or self.closed:
            return
        now = self.service.clock()
        timeout_s = self.service.config.deduplication_producer_inactivity_timeout_minutes * 60.0
        if dedup.purge_inactive(now, timeout_s, attached=self.producers.keys()):
            try:
                await dedup.snapshot(now)
            except ManagedLedgerError as exc:
                log.warning("dedup snapshot of %s failed: %s", self.name, exc)

    @property
    def deduplication_enabled(self) -> bool:
        """Whether SENDs are deduplicated now."""
        return self.dedup is not None

    async def set_deduplication(self, enabled: bool) -> bool:
        """Turn deduplication on or off while loaded (Rule 5); True when it changed.

        Raises `ManagedLedgerError` when the dedup cursor cannot be opened or deleted (the state
        is then unchanged)."""
        async with self._dedup_lock:
            if self.closed or enabled == (self.dedup is not None):
                return False
            if enabled:
                dedup = self.service.new_deduplication(self.name)
                self._dedup_enabling = dedup
                try:
                    await dedup.recover(self.ml, now=self.service.clock(), attached=self.producers.keys())
                finally:
                    self._dedup_enabling = None
                if self.closed:
                    return False
                self.dedup = dedup
            else:
                old, self.dedup = self.dedup, None
                assert old is not None
                await old.disable(self.ml)
            log.info("deduplication %s on loaded topic %s", "enabled" if enabled else "disabled", self.name)
            return True

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest: int,
        raw: bytes,
        num_messages: int,
        *,
        partial_chunk: bool = False,
        txn: TxnID | None = None,
        dedup_name: str | None = None,
    ) -> None:
        """Store one SEND's entry (Rule 1); the receipt goes out through the producer.
        ``partial_chunk``: a chunk of a chunked message before its last (see `_dedup` Rule 6);
        ``txn``: the transaction it belongs to (Rule 9: the caller awaited ``txn_buffer.prepare``);
        ``dedup_name``: the producer name deduplication keys it on when not the producer's own
        (a replicated message: its original producer's, Rule 10)."""
        name = producer.name if dedup_name is None else dedup_name
        receipt = producer.new_receipt(sequence_id, highest, len(raw))
        if self.closed or self._nursery is None:
            producer.complete(receipt, -1, -1, error=f"topic {self.name} is closed")
            return
        counted: Deduplication | None = None
        if self.dedup is not None:
            verdict = self.dedup.check(name, sequence_id, highest, partial_chunk=partial_chunk)
            if verdict is DedupVerdict.DUPLICATE_PERSISTED:
                producer.complete(receipt, -1, -1)
                return
            if verdict is DedupVerdict.DUPLICATE_PENDING:
                self._hold_duplicate(producer, receipt, name, max(sequence_id, highest))
                return
            counted = self.dedup
        elif self._dedup_enabling is not None:
            self._dedup_enabling.note_pushed(name, highest, partial_chunk=partial_chunk)
            counted = self._dedup_enabling
        if self._adds_in_flight == 0:
            self._adds_drained = trio.Event()
        self._adds_in_flight += 1
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(raw)
        producer.msg_in_counter += num_messages
        producer.bytes_in_counter += len(raw)
        self._to_append.append(
            _Send(producer, receipt, raw, sequence_id, highest, time.monotonic(), partial_chunk, name, counted, txn=txn)
        )
        if not self._appending:
            self._appending = True
            self._nursery.start_soon(self._append_loop)

    def _hold_duplicate(self, producer: Producer, receipt: Receipt, name: str, top: int) -> None:
        """Rule 8: hold a duplicate's receipt on its original, still in flight."""
        original = next(
            (s for s in self._in_flight() if s.dedup_name == name and not s.partial_chunk and s.highest >= top),
            None,
        )
        if original is None:
            producer.failed = True
            producer.complete(
                receipt,
                -1,
                -1,
                error=f"[{self.name}][{producer.name}] cannot determine whether "
                f"the message is a duplicate at this time",
            )
            return
        if original.followers is None:
            original.followers = []
        original.followers.append((producer, receipt))
        producer.awaits = original

    def _in_flight(self) -> Iterator[_Send]:
        """The SENDs not answered yet, in the order they entered (and leave) the managed ledger."""
        in_hand = () if self._in_hand is None else (self._in_hand,)
        return itertools.chain((s for s, _ in self._appended), in_hand, self._to_append)

    async def _append_loop(self) -> None:
        """Rule 1: hand the queued SENDs to the managed ledger, oldest first, until none is left;
        Rule 4: wait for a quota hold before taking the head."""
        queue = self._to_append
        send: _Send | None = None
        try:
            while queue:
                released = True
                if self.service.quota_holds(self):
                    released = await self.service.wait_quota_released(self)
                held = self.ml.storage_error is not None and await self._wait_for_storage()
                send = self._in_hand = queue.popleft()
                producer = send.producer
                last = producer.last_add
                awaited = producer.awaits
                if (
                    producer.failed
                    or (held and producer.closed)  # Rule 6: its client resends on its new producer
                    or (last is not None and last.error is not None)
                    or (awaited is not None and awaited.add is not None and awaited.add.error is not None)
                ):
                    # Rule 3 of `_producer`: nothing after a failed add is stored. ``last``
                    # catches a failure the completer has not answered yet (a later add admitted
                    # before that failure fails with it: `ManagedLedger.append`), ``awaited`` the
                    # same for the original a held duplicate of this producer waits on (Rule 8).
                    self._answer(send, error="an earlier message of this producer could not be stored")
                elif not released:
                    producer.failed = True
                    self._answer(send, error=f"backlog quota exceeded on topic {self.name}: producer held too long")
                else:
                    try:
                        add = await self.ml.append(send.data)
                    except ManagedLedgerError as exc:
                        self._add_failed(send, exc)
                    else:
                        producer.last_add = send.add = add
                        self._appended.append((send, add))
                        if not self._completing:
                            self._completing = True
                            assert self._nursery is not None
                            self._nursery.start_soon(self._complete_loop)
                send = self._in_hand = None
        finally:
            self._appending = False
            self._in_hand = None
            # Cancelled (the topic is closing): what was not appended is answered with an error
            # (the client resends after reconnecting).
            if send is not None:
                self._answer(send, error=f"topic {self.name} is closing")
            while queue:
                self._answer(queue.popleft(), error=f"topic {self.name} is closing")

    async def _wait_for_storage(self) -> bool:
        """Rule 6: hold the queued SENDs (in order) while no ledger can be created, trying again
        once per the managed ledger's retry interval; True when it held them."""
        held = False
        while self.ml.storage_error is not None:
            held = True
            try:
                await self.ml.ensure_writable()
            except StorageUnavailable:
                await trio.sleep(_STORAGE_RETRY_S)
            except ManagedLedgerError:
                break  # closed, fenced or terminated: the append says so
        return held

    async def _complete_loop(self) -> None:
        """Rule 1: answer the appended SENDs in order as their adds finish, each run of finished
        adds in one pass; then wake the subscriptions and take a due dedup snapshot, once per run."""
        appended = self._appended
        stored = False
        due: Deduplication | None = None
        try:
            while appended:
                send, add = appended[0]
                if not add.finished:
                    if stored or due is not None:
                        await self._after_run(stored, due)
                        stored, due = False, None
                        continue  # the snapshot waited: look at the head again
                    await add.wait()
                    continue
                appended.popleft()
                if add.error is not None:
                    self._add_failed(send, add.error)
                    continue
                assert add.position is not None
                if self._stored(send, add.position):
                    due = self.dedup
                stored = True
            if stored or due is not None:
                await self._after_run(stored, due)
        finally:
            self._completing = False
            # Cancelled (the topic is closing): adds may still finish, their receipts are errors
            while appended:
                send, _ = appended.popleft()
                self._answer(send, error=f"topic {self.name} is closing")

    def _stored(self, send: _Send, pos: Position) -> bool:
        """A SEND's entry is stored at ``pos``: tell dedup, then answer it. True when a dedup
        snapshot is due."""
        due = False
        self.txn_buffer.note_stored(pos, send.txn)  # Rule 9, before any dispatcher is woken
        if self.dedup is not None or self._dedup_enabling is not None:
            producer = send.producer
            # a replicated message's original producer is attached only as far as its own name is
            attached = self.producers.get(send.dedup_name) is producer
            now = self.service.clock()
            for state in self._dedup_states():
                snapshot_due = state.on_persisted(
                    send.dedup_name,
                    send.sequence_id,
                    send.highest,
                    pos,
                    partial_chunk=send.partial_chunk,
                    attached=attached,
                    now=now,
                )
                if state is self.dedup:
                    due = snapshot_due
        self._answer(send, pos.ledger_id, pos.entry_id)
        self.service.metrics.observe_publish(time.monotonic() - send.started)
        return due

    def wake_dispatchers(self) -> None:
        """Let every dispatcher run a round (entries became readable)."""
        for sub in self.subscriptions.values():
            if sub.dispatcher is not None:
                sub.dispatcher.wake()

    @property
    def max_read_position(self) -> Position:
        """The last position subscriptions, readers and compaction may read (Rule 9)."""
        return self.txn_buffer.max_read_position

    async def _after_run(self, stored: bool, due: Deduplication | None) -> None:
        if stored:
            self.wake_dispatchers()
        if due is not None:
            try:
                await due.snapshot(self.service.clock())
            except ManagedLedgerError as exc:  # closed or fenced meanwhile: the next one retries
                log.warning("dedup snapshot of %s failed: %s", self.name, exc)

    def _add_failed(self, send: _Send, exc: ManagedLedgerError) -> None:
        """The managed ledger refused or failed a SEND's add: Rule 3 of `_producer`, Rule 6, and
        a fenced managed ledger unloads the topic (Rule 3)."""
        producer = send.producer
        producer.failed = True
        if isinstance(exc, StorageUnavailable):
            self._close_producers(f"storage unavailable: {exc}")  # Rule 6
        self._answer(send, error=f"could not store the message: {exc}")
        if isinstance(exc, ManagedLedgerFenced):
            log.warning("topic %s fenced by another owner; unloading", self.name)
            self.service.unload_soon(self)

    def _answer(self, send: _Send, ledger_id: int = -1, entry_id: int = -1, *, error: str | None = None) -> None:
        """Complete a SEND's receipt (once) and those of the duplicates held on it (Rule 8), settle
        it with the dedup state that counted it, and count it out of the adds in flight."""
        if not send.receipt.done:
            send.producer.complete(send.receipt, ledger_id, entry_id, error=error)
        if send.followers:
            followers, send.followers = send.followers, None
            for producer, receipt in followers:
                if producer.awaits is send:
                    producer.awaits = None
                if error is not None:
                    producer.failed = True  # Rule 3 of `_producer`: the client resends from this one
                if not receipt.done:
                    producer.complete(receipt, -1, -1, error=error)
        if send.counted is not None:
            send.counted.settle(send.dedup_name)
            send.counted = None
        self._adds_in_flight -= 1
        if self._adds_in_flight == 0:
            self._adds_drained.set()

    async def terminate(self) -> Position:
        """Rule 7: terminate the topic; return the position of its last message."""
        self._check_open()
        last = await self.ml.terminate()
        self._close_producers("the topic was terminated")
        for sub in list(self.subscriptions.values()):
            if sub.dispatcher is not None:
                sub.dispatcher.wake()  # consumers that read everything learn the end at once
        return last

    def _close_producers(self, why: str) -> None:
        """Close every producer from the broker (Rule 6): each client re-creates its producer,
        which PRODUCER refuses while storage stays unavailable."""
        if self.producers:
            log.warning("topic %s: closing its producers: %s", self.name, why)
        for p in list(self.producers.values()):
            p.close_from_broker()
            self.remove_producer(p)

    # ------------------------------------------------------------------ subscriptions

    async def subscribe(
        self, name: str, *, durable: bool, initial_position: InitialPosition, start: Position | InitialPosition | None
    ) -> Subscription:
        """The subscription ``name``, creating its cursor if needed (a reader gets a new one).

        Raises `BrokerServiceError` (NotAllowedError) for the dedup cursor's name (Rule 5) and for
        a name that cannot name a cursor (empty, ``.``, ``..``, with ``/`` or NUL)."""
        self._check_open()
        try:
            check_subscription_name(name)
        except InvalidTopicNameError as exc:
            raise BrokerServiceError(str(exc), pb.NotAllowedError) from None
        if name == DEDUP_CURSOR:
            raise BrokerServiceError(f"subscription name {name!r} is reserved for deduplication", pb.NotAllowedError)
        if name == COMPACTION_CURSOR:
            raise BrokerServiceError(f"subscription name {name!r} is reserved for compaction", pb.NotAllowedError)
        if name == SNAPSHOT_CURSOR:
            raise BrokerServiceError(f"subscription name {name!r} is reserved for transactions", pb.NotAllowedError)
        if is_replicator_name(name):
            raise BrokerServiceError(f"subscription name {name!r} is reserved for replicators", pb.NotAllowedError)
        self.touch()
        async with self._sub_lock:
            sub = self.subscriptions.get(name)
            if sub is not None and not sub.closed:
                return sub
            if durable:
                cursor = await self.ml.open_cursor(name, initial_position=initial_position)
            else:
                cursor = self.ml.new_non_durable_cursor(
                    start if start is not None else initial_position, inclusive=True
                )
            sub = Subscription(self, name, cursor, durable=durable)
            self.subscriptions[name] = sub
            return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        """Delete a subscription, its cursor and its delayed-delivery bucket ledgers."""
        await sub.close()
        self.subscriptions.pop(sub.name, None)
        if sub.durable:
            await delete_bucket_ledgers(self.service.factory.side_ledgers, sub.cursor.cursor_properties)
            await self.ml.delete_cursor(sub.name)

    # ------------------------------------------------------------------ positions

    def previous_position(self, pos: Position) -> Position | None:
        """The stored entry before ``pos`` (None when ``pos`` is the first one)."""
        if pos.entry_id > 0:
            return Position(pos.ledger_id, pos.entry_id - 1)
        earlier = [i for i in self.ml.ledgers if i.ledger_id < pos.ledger_id and i.entries > 0]
        return Position(earlier[-1].ledger_id, earlier[-1].entries - 1) if earlier else None

    async def last_dispatchable_position(self, max_steps: int = LAST_DISPATCHABLE_SCAN) -> Position:
        """The last entry a consumer can be given (Rule 9): at or before the max read position,
        not a marker nor aborted (looking back at most ``max_steps`` entries; past them, the
        position reached). What GET_LAST_MESSAGE_ID answers, so that a reader asking whether a
        message is available is never told of one it would not get."""
        pos = min(self.ml.last_confirmed_entry, self.max_read_position)
        buffer = self.txn_buffer
        if not buffer.active and not buffer.aborted:
            return pos
        for _ in range(max_steps):
            if pos.entry_id < 0 or not self.ml.has_entry(pos):
                return pos
            info = entry_info((await self.ml.read_entry(pos)).data)
            if not buffer.skips(info.marker_type, info.txn):
                return pos
            before = self.previous_position(pos)
            if before is None:
                return Position(pos.ledger_id, -1)
            pos = before
        return pos

    def first_position(self) -> Position:
        """The position of the first stored entry (or of the next one when there is none)."""
        ledgers = list(self.ml.ledgers)
        for info in ledgers:
            if info.entries > 0 or info is ledgers[-1]:
                return Position(info.ledger_id, 0)
        last = self.ml.last_confirmed_entry
        return Position(last.ledger_id, last.entry_id + 1)

    def next_position(self, pos: Position) -> Position:
        """The position after ``pos`` (skipping to the next ledger after a closed one's last entry)."""
        last = self.ml.last_confirmed_entry
        if pos.ledger_id >= last.ledger_id:
            return Position(pos.ledger_id, pos.entry_id + 1)
        ledgers = list(self.ml.ledgers)
        for i, info in enumerate(ledgers):
            if info.ledger_id == pos.ledger_id:
                if pos.entry_id + 1 < info.entries or i + 1 == len(ledgers):
                    return Position(pos.ledger_id, pos.entry_id + 1)
                return Position(ledgers[i + 1].ledger_id, 0)
        return Position(pos.ledger_id, pos.entry_id + 1)

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Disconnect producers and consumers, snapshot dedup state and close the managed ledger."""
        if self.closed:
            return
        self.closed = True
        for replicator in self.replicators.values():
            replicator.stop()  # their cursors are persisted with the managed ledger's close below
        for p in list(self.producers.values()):
            p.close_from_broker()
        for p, _ in self._waiting:
            p.close_from_broker()
        self.producers.clear()
        self._waiting.clear()
        with trio.move_on_after(10):
            await self._adds_drained.wait()  # adds already admitted finish (their receipts are dropped)
        for sub in list(self.subscriptions.values()):
            await sub.close()
        if self.dedup is not None:
            try:
                await self.dedup.snapshot(self.service.clock())
            except Exception as exc:
                log.warning("dedup snapshot of %s failed on close: %s", self.name, exc)
        try:
            await self.txn_buffer.snapshot()
        except ManagedLedgerError as exc:  # the replay after the last one covers what it missed
            log.warning("transaction buffer snapshot of %s failed on close: %s", self.name, exc)
        await self.compactor.close()
        try:
            await self.ml.close()
        except ManagedLedgerError as exc:
            log.warning("closing managed ledger of %s: %s", self.name, exc)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
