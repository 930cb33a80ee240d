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
  as persisted in the new state, then it replaces ``dedup`` (see `_dedup` Rule 4). Switches are
  serialized by ``_dedup_lock``. The dedup cursor is never a subscription, and no client or admin
  request may use its name as one.
* Rule 6 (storage unavailable): an add failing because no ledger can be created (no writable
  bookies: full disks, read-only, down) closes every producer of the topic (CLOSE_PRODUCER, not
  SEND_ERROR, which would drop the client's whole connection); re-creating one is refused with
  ProducerBlockedQuotaExceededException while it lasts, on which the official client fails its
  pending sends at once and keeps retrying, so writes resume by themselves afterwards.
* Rule 7 (terminated): `terminate` stops the managed ledger for good and closes every producer;
  a new producer is refused with TopicTerminatedError (also after a reload). Consumers keep
  reading what is stored; once a subscription has everything acknowledged, each of its consumers
  is told REACHED_END_OF_TOPIC (the dispatcher's Rule 7), as Pulsar's dispatchers do.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
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

from ._access_modes import Admission, Waiting, admit, fenced, next_to_promote
from ._compaction import COMPACTION_CURSOR, Compactor
from ._dedup import DEDUP_CURSOR, Deduplication, DedupVerdict
from ._delayed import delete_bucket_ledgers
from ._errors import BrokerServiceError, NotAllowedError, ProducerBusyError, ServiceNotReadyError
from ._producer import Producer
from ._rate_limit import RateLimiter
from ._stats import TopicStatsState
from ._subscription import Subscription
from ._topic_limits import TopicLimits, check_producer_limit, configure_rates

if TYPE_CHECKING:
    from ._producer import Receipt
    from ._service import BrokerService

__all__ = ["Topic"]

log = logging.getLogger(__name__)

_MAX_SUBSCRIBE_LIMITERS = 10_000
"""Consumers whose subscribe rate a topic tracks at once (the least recently seen are forgotten)."""


TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"  # the managed-ledger property holding the topic epoch (Rule 2)


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
    partial_chunk: bool  # a chunk of a chunked message before its last (`_dedup` Rule 5)


class Topic:
    """See the module rules. Created and closed by `BrokerService`."""

    def __init__(self, service: BrokerService, name: TopicName, ml: ManagedLedger,
                 dedup: Deduplication | None) -> None:
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
        for sub_name, cursor in dict(getattr(ml, "cursors", {})).items():
            # deduplication's and compaction's own cursors are not subscriptions
            if sub_name not in (DEDUP_CURSOR, COMPACTION_CURSOR):
                self.subscriptions[sub_name] = Subscription(self, sub_name, cursor, durable=True)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the topic's tasks until `close` (started in the service's nursery)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.compactor.load()  # read_compacted consumers need the view from the start
            nursery.start_soon(self.compactor.monitor)
            task_status.started()
            await trio.sleep_forever()

    async def start_task(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``fn(*args, task_status=...)`` in the topic's nursery."""
        self._check_open()
        assert self._nursery is not None
        await self._nursery.start(fn, *args)

    def _check_open(self) -> None:
        if self.closed:
            raise ServiceNotReadyError(f"topic {self.name} is being unloaded; retry")

    @property
    def idle(self) -> bool:
        """No producer, no consumer, no add in flight, and no compaction running."""
        return (not self.producers and not self._waiting and not any(s.consumers for s in self.subscriptions.values())
                and not self.compactor.running)

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
        admission = admit(str(self.name), self.producers, self._waiting, producer, on_ready)
        if admission is not Admission.EXCLUSIVE:
            return admission is Admission.ATTACHED
        current = -1 if self.topic_epoch is None else self.topic_epoch
        if producer.requested_epoch is not None and producer.requested_epoch < current:
            # a reconnecting exclusive producer that another one has fenced off
            raise fenced(f"producer {producer.name!r}: the epoch of topic {self.name} has already moved "
                          f"(current epoch {current}, producer epoch {producer.requested_epoch})")
        self.producers[producer.name] = producer
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
        producer.closed = True
        self.touch()
        if self._nursery is not None and not self.closed and (nxt := next_to_promote(self.producers, self._waiting)):
            waiting, on_ready = nxt
            self.producers[waiting.name] = waiting
            self._nursery.start_soon(self._promote, waiting, on_ready)

    async def _promote(self, producer: Producer, on_ready: Callable[[BrokerServiceError | None], None]) -> None:
        try:
            await self._grant_epoch(producer)
        except BrokerServiceError as exc:
            if self.producers.get(producer.name) is producer:
                del self.producers[producer.name]
            producer.closed = True
            on_ready(exc)
            return
        if not producer.closed:  # else its client went away meanwhile (remove_producer ran)
            on_ready(None)

    def last_sequence_id(self, producer_name: str) -> int:
        """What PRODUCER_SUCCESS reports: the highest persisted sequence id with dedup, else -1."""
        return self.dedup.last_sequence_id(producer_name) if self.dedup else -1

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
                dedup = Deduplication(self.service.store, self.name.managed_ledger_name,
                                      self.service.config.deduplication_snapshot_interval_entries)
                self._dedup_enabling = dedup
                try:
                    await dedup.recover(self.ml)
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

    def publish(self, producer: Producer, sequence_id: int, highest: int, raw: bytes, num_messages: int, *,
                partial_chunk: bool = False) -> None:
        """Store one SEND's entry (Rule 1); the receipt goes out through the producer.
        ``partial_chunk``: a chunk of a chunked message before its last (see `_dedup` Rule 5)."""
        receipt = producer.new_receipt(sequence_id, highest, len(raw))
        if self.closed or self._nursery is None:
            producer.complete(receipt, -1, -1, error=f"topic {self.name} is closed")
            return
        if self.dedup is not None:
            verdict = self.dedup.check(producer.name, sequence_id, highest, partial_chunk=partial_chunk)
            if verdict is not DedupVerdict.NEW:
                producer.complete(receipt, -1, -1)
                return
        elif self._dedup_enabling is not None and not partial_chunk:
            self._dedup_enabling.note_pushed(producer.name, highest)
        if self._adds_in_flight == 0:
            self._adds_drained = trio.Event()
        self._adds_in_flight += 1
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(raw)
        producer.msg_in_counter += num_messages
        producer.bytes_in_counter += len(raw)
        self._to_append.append(_Send(producer, receipt, raw, sequence_id, highest, time.monotonic(), partial_chunk))
        if not self._appending:
            self._appending = True
            self._nursery.start_soon(self._append_loop)

    async def _append_loop(self) -> None:
        """Rule 1: hand the queued SENDs to the managed ledger, oldest first, until none is left;
        Rule 4: wait for a quota hold before taking the head."""
        queue = self._to_append
        send: _Send | None = None
        try:
            while queue:
                released = True
                if self.service.quota_holds(self.name):
                    released = await self.service.wait_quota_released(self)
                send = queue.popleft()
                producer = send.producer
                last = producer.last_add
                if producer.failed or (last is not None and last.error is not None):
                    # Rule 3 of `_producer`: nothing after a failed add is stored. ``last``
                    # catches a failure the completer has not answered yet (a later add admitted
                    # before that failure fails with it: `ManagedLedger.append`).
                    if self.dedup is not None:
                        self.dedup.on_failed(producer.name)
                    self._answer(send, error="an earlier message of this producer could not be stored")
                elif not released:
                    producer.failed = True
                    if self.dedup is not None:
                        self.dedup.on_failed(producer.name)
                    self._answer(send, error=f"backlog quota exceeded on topic {self.name}: producer held too long")
                else:
                    try:
                        add = await self.ml.append(send.data)
                    except ManagedLedgerError as exc:
                        self._add_failed(send, exc)
                    else:
                        producer.last_add = add
                        self._appended.append((send, add))
                        if not self._completing:
                            self._completing = True
                            assert self._nursery is not None
                            self._nursery.start_soon(self._complete_loop)
                send = None
        finally:
            self._appending = False
            # Cancelled (the topic is closing): what was not appended is answered with an error
            # (the client resends after reconnecting).
            if send is not None:
                self._answer(send, error=f"topic {self.name} is closing")
            while queue:
                self._answer(queue.popleft(), error=f"topic {self.name} is closing")

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
        """A SEND's entry is stored at ``pos``: answer it and tell dedup. True when a dedup
        snapshot is due."""
        producer = send.producer
        self._answer(send, pos.ledger_id, pos.entry_id)
        self.service.metrics.observe_publish(time.monotonic() - send.started)
        if self._dedup_enabling is not None:
            self._dedup_enabling.on_persisted(producer.name, send.sequence_id, send.highest, pos,
                                              partial_chunk=send.partial_chunk)
        dedup = self.dedup
        return dedup is not None and dedup.on_persisted(producer.name, send.sequence_id, send.highest, pos,
                                                        partial_chunk=send.partial_chunk)

    async def _after_run(self, stored: bool, due: Deduplication | None) -> None:
        if stored:
            for sub in self.subscriptions.values():
                if sub.dispatcher is not None:
                    sub.dispatcher.wake()
        if due is not None:
            try:
                await due.snapshot()
            except ManagedLedgerError as exc:  # closed or fenced meanwhile: the next one retries
                log.warning("dedup snapshot of %s failed: %s", self.name, exc)

    def _add_failed(self, send: _Send, exc: ManagedLedgerError) -> None:
        """The managed ledger refused or failed a SEND's add: Rule 3 of `_producer`, Rule 6, and
        a fenced managed ledger unloads the topic (Rule 3)."""
        producer = send.producer
        producer.failed = True
        if self.dedup is not None:
            self.dedup.on_failed(producer.name)
        if isinstance(exc, StorageUnavailable):
            self._close_producers(f"storage unavailable: {exc}")  # Rule 6
        self._answer(send, error=f"could not store the message: {exc}")
        if isinstance(exc, ManagedLedgerFenced):
            log.warning("topic %s fenced by another owner; unloading", self.name)
            self.service.unload_soon(self)

    def _answer(self, send: _Send, ledger_id: int = -1, entry_id: int = -1, *, error: str | None = None) -> None:
        """Complete a SEND's receipt (once) and count it out of the adds in flight."""
        if not send.receipt.done:
            send.producer.complete(send.receipt, ledger_id, entry_id, error=error)
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

    async def subscribe(self, name: str, *, durable: bool, initial_position: InitialPosition,
                        start: Position | InitialPosition | None) -> Subscription:
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
        self.touch()
        async with self._sub_lock:
            sub = self.subscriptions.get(name)
            if sub is not None and not sub.closed:
                return sub
            if durable:
                cursor = await self.ml.open_cursor(name, initial_position=initial_position)
            else:
                cursor = self.ml.new_non_durable_cursor(start if start is not None else initial_position,
                                                        inclusive=True)
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
                await self.dedup.snapshot()
            except Exception as exc:
                log.warning("dedup snapshot of %s failed on close: %s", self.name, exc)
        await self.compactor.close()
        try:
            await self.ml.close()
        except ManagedLedgerError as exc:
            log.warning("closing managed ledger of %s: %s", self.name, exc)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
