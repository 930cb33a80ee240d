"""One transaction coordinator's transactions, logged in a managed ledger (Pulsar's
``MLTransactionMetadataStore``).

Rules:

* Rule 1 (log first): every change (`_meta` Rule 4) is appended to the log, managed ledger
  ``pulsar/system/persistent/__transaction_log_{tc}``, before it is applied in memory or answered.
* Rule 2 (ids): a transaction's id is (coordinator id, sequence): the sequence grows by one per
  transaction and is never reused, across restarts too. Before issuing a sequence above the
  reserved one the store records a new reservation (``SEQUENCE_PROPERTY``, a managed-ledger
  property, ``SEQUENCE_BATCH`` ahead); recovery starts after the larger of the reservation and
  every sequence it replays.
* Rule 3 (recovery): `open_store` replays the log from its cursor (``LOG_CURSOR``): the
  transactions it rebuilds are exactly those whose end (COMMITTED/ABORTED) was not logged. The
  store answers requests only once READY.
* Rule 4 (trimming): when a transaction ends, every log position recording it is acknowledged on
  the log's cursor, so the log keeps only what open transactions need; `trim` drops its closed
  ledgers below that. Retention never opens the log (`holds_log`).
* Rule 5 (timeouts): every OPEN transaction has a deadline (open time + its timeout);
  `run_timeouts` hands each transaction still OPEN at its deadline to the abort callback, once.
* Rule 6 (bounds): at most ``max_active`` transactions are held (`TooManyTransactionsError` beyond).
"""

from __future__ import annotations

import enum
import heapq
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from google.protobuf.message import DecodeError

from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, ManagedLedgerFactory, Position
from protocols.pulsar import TopicName
from protocols.pulsar import transaction_metadata_pb2 as tpb

from .._txnid import TxnID
from ._errors import CoordinatorNotFoundError, TooManyTransactionsError, TransactionNotFoundError
from ._meta import FINAL, Op, TxnMeta, TxnStatus, new_entry

__all__ = [
    "TransactionMetadataStore",
    "StoreState",
    "open_store",
    "log_topic",
    "LOG_CURSOR",
    "SEQUENCE_PROPERTY",
    "SEQUENCE_BATCH",
]

log = logging.getLogger(__name__)

LOG_CURSOR = "transaction.subscription"
"""The log's cursor (the name Pulsar's coordinator gives it)."""
SEQUENCE_PROPERTY = "magnetar.txn.reserved_sequence"
"""Rule 2: the managed-ledger property holding the highest sequence reserved."""
SEQUENCE_BATCH = 1000
"""Rule 2: sequences reserved by one property write."""
_REPLAY_BATCH = 500


def log_topic(tc_id: int) -> TopicName:
    """The (never loaded) topic whose managed ledger is coordinator ``tc_id``'s log."""
    return TopicName.parse(f"persistent://pulsar/system/__transaction_log_{tc_id}")


class StoreState(enum.Enum):
    """Pulsar's TransactionMetadataStoreState names (the coordinator stats' ``state``)."""

    INITIALIZING = "Initializing"
    READY = "Ready"
    CLOSED = "Close"


class TransactionMetadataStore:
    """Coordinator ``tc_id``'s transactions over its log ``ml`` (module rules). Create it with
    `open_store`; ``clock_ms`` gives the time in ms since the epoch."""

    def __init__(
        self, tc_id: int, ml: ManagedLedger, cursor: ManagedCursor, *, clock_ms: Callable[[], int], max_active: int
    ) -> None:
        self.tc_id = tc_id
        self.ml = ml
        self.cursor = cursor
        self._clock_ms = clock_ms
        self.max_active = max_active
        self.txns: dict[TxnID, TxnMeta] = {}
        self.state = StoreState.INITIALIZING
        self.sequence = 0
        self._reserved = 0
        self._reserve_lock = trio.Lock()
        self._deadlines: list[tuple[int, int]] = []  # (deadline ms, sequence): Rule 5
        self._deadlines_changed = trio.Event()
        self.recover_start_ms = clock_ms()
        self.recover_end_ms = 0
        self.created = self.committed = self.aborted = self.timed_out = self.appended = 0

    # ------------------------------------------------------------------ recovery (Rule 3)

    async def _replay(self) -> None:
        self._reserved = int(self.ml.properties.get(SEQUENCE_PROPERTY, "0") or 0)
        done: list[Position] = []
        while True:
            entries = await self.cursor.read_entries(_REPLAY_BATCH)
            if not entries:
                break
            for entry in entries:
                self._replay_one(bytes(entry.data), entry.position, done)
        self.sequence = max(self.sequence, self._reserved)
        if done:
            await self.cursor.delete(done)
        for meta in self.txns.values():
            if meta.status == TxnStatus.OPEN:
                heapq.heappush(self._deadlines, (meta.timeout_at_ms, meta.txn_id.least_bits))
        self.state = StoreState.READY
        self.recover_end_ms = self._clock_ms()
        log.info(
            "transaction coordinator %d recovered %d open transactions (sequence %d)",
            self.tc_id,
            len(self.txns),
            self.sequence,
        )

    def _replay_one(self, data: bytes, position: Position, done: list[Position]) -> None:
        record = tpb.TransactionMetadataEntry()
        try:
            record.ParseFromString(data)
        except DecodeError:
            log.warning("transaction log %d: entry %s is not a TransactionMetadataEntry: skipped", self.tc_id, position)
            done.append(position)
            return
        txn = TxnID(record.txnid_most_bits, record.txnid_least_bits)
        if record.metadata_op == Op.NEW:
            self.sequence = max(self.sequence, record.txnid_least_bits)
            meta = self.txns.get(txn)
            if meta is None:
                self.txns[txn] = TxnMeta(
                    txn,
                    open_ms=record.start_time,
                    timeout_ms=record.timeout_ms,
                    owner=record.owner,
                    positions=[position],
                    last_modified_ms=record.last_modification_time,
                )
            else:
                meta.positions.append(position)
            return
        meta = self.txns.get(txn)
        if meta is None:  # its end was logged before (`_meta` Rule 4)
            done.append(position)
            return
        meta.apply_entry(record, position)
        if meta.status in FINAL:
            done.extend(meta.positions)
            del self.txns[txn]

    # ------------------------------------------------------------------ requests

    def _check_ready(self) -> None:
        if self.state is not StoreState.READY:
            raise CoordinatorNotFoundError(f"transaction coordinator {self.tc_id} is {self.state.value}")

    async def _append(self, record: tpb.TransactionMetadataEntry) -> Position:
        position = await self.ml.add_entry(record.SerializeToString())
        self.appended += 1
        return position

    async def _next_sequence(self) -> int:
        self.sequence += 1
        sequence = self.sequence
        if sequence > self._reserved:
            async with self._reserve_lock:
                if sequence > self._reserved:
                    reserved = sequence + SEQUENCE_BATCH - 1
                    await self.ml.set_property(SEQUENCE_PROPERTY, str(reserved))
                    self._reserved = reserved
        return sequence

    async def new_txn(self, timeout_ms: int, owner: str = "") -> TxnMeta:
        """Open a transaction (Rules 1, 2, 5, 6) and return it."""
        self._check_ready()
        if self.max_active and len(self.txns) >= self.max_active:
            raise TooManyTransactionsError(
                f"New txn op reach max active txn! tcId : {self.tc_id}, activeTxns : {len(self.txns)}"
            )
        txn = TxnID(self.tc_id, await self._next_sequence())
        now = self._clock_ms()
        fields: dict[str, Any] = {"start_time": now, "timeout_ms": timeout_ms, "max_local_txn_id": txn.least_bits}
        if owner:
            fields["owner"] = owner
        position = await self._append(new_entry(Op.NEW, txn, now, **fields))
        meta = TxnMeta(txn, open_ms=now, timeout_ms=timeout_ms, owner=owner, positions=[position], last_modified_ms=now)
        self.txns[txn] = meta
        self.created += 1
        heapq.heappush(self._deadlines, (meta.timeout_at_ms, txn.least_bits))
        self._deadlines_changed.set()
        return meta

    def get(self, txn: TxnID) -> TxnMeta:
        """The transaction, or `TransactionNotFoundError` (never opened, or ended)."""
        self._check_ready()
        meta = self.txns.get(txn)
        if meta is None:
            raise TransactionNotFoundError(f"The transaction with this txdID `{txn}` not found")
        return meta

    async def add_partitions(self, txn: TxnID, partitions: list[str]) -> None:
        """Record produced partitions of an OPEN transaction (`_meta` Rule 2)."""
        meta = self.get(txn)
        async with meta.lock:
            meta.check_open()
            position = await self._append(new_entry(Op.ADD_PARTITION, txn, self._clock_ms(), partitions=partitions))
            meta.add_partitions(partitions)
            meta.positions.append(position)

    async def add_subscriptions(self, txn: TxnID, subscriptions: list[tuple[str, str]]) -> None:
        """Record acknowledged subscriptions (topic, name) of an OPEN transaction (`_meta` Rule 2)."""
        meta = self.get(txn)
        async with meta.lock:
            meta.check_open()
            subs = [{"topic": t, "subscription": s} for t, s in subscriptions]
            position = await self._append(new_entry(Op.ADD_SUBSCRIPTION, txn, self._clock_ms(), subscriptions=subs))
            meta.add_subscriptions(subscriptions)
            meta.positions.append(position)

    async def update_status(self, meta: TxnMeta, new: TxnStatus, expected: TxnStatus) -> None:
        """Move ``meta`` from ``expected`` to ``new`` (`_meta` Rules 1 and 3; a no-op when it is in
        ``new`` already). The caller holds ``meta.lock``."""
        self._check_ready()
        if meta.status == new:
            return
        meta.check_status(expected, new)
        position = await self._append(
            new_entry(Op.UPDATE, meta.txn_id, self._clock_ms(), expected_status=int(expected), new_status=int(new))
        )
        meta.status = new
        meta.positions.append(position)
        if new in FINAL:
            self.txns.pop(meta.txn_id, None)
            if new == TxnStatus.COMMITTED:
                self.committed += 1
            else:
                self.aborted += 1
            await self.cursor.delete(meta.positions)  # Rule 4

    # ------------------------------------------------------------------ timeouts (Rule 5)

    async def run_timeouts(self, abort: Callable[[TxnID], Awaitable[None]], nursery: trio.Nursery) -> None:
        """Hand every transaction still OPEN at its deadline to ``abort`` (a task of ``nursery``).
        Runs until cancelled."""
        while self.state is not StoreState.CLOSED:
            now = self._clock_ms()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, sequence = heapq.heappop(self._deadlines)
                meta = self.txns.get(TxnID(self.tc_id, sequence))
                if meta is not None and meta.status == TxnStatus.OPEN:
                    self.timed_out += 1
                    nursery.start_soon(abort, meta.txn_id)
            wait = (self._deadlines[0][0] - now) / 1000 if self._deadlines else float("inf")
            with trio.move_on_after(wait):
                await self._deadlines_changed.wait()
            self._deadlines_changed = trio.Event()

    # ------------------------------------------------------------------ upkeep

    async def trim(self) -> list[int]:
        """Rule 4: persist the log cursor, then delete the closed ledgers wholly before it."""
        await self.ml.flush_cursors()
        ids = [info.ledger_id for info in self.ml.trimmable_ledgers()]
        return await self.ml.trim(ids) if ids else []

    def low_water_mark(self) -> int:
        """Sequences at or below this one have all ended (Pulsar's low water mark)."""
        return min((t.least_bits for t in self.txns), default=self.sequence + 1) - 1

    def slow(self, older_than_ms: int) -> list[TxnMeta]:
        """The transactions open for longer than ``older_than_ms``."""
        now = self._clock_ms()
        return [m for m in self.txns.values() if now - m.open_ms > older_than_ms]

    def stats(self) -> dict[str, Any]:
        """Pulsar's TransactionCoordinatorStats."""
        return {
            "state": self.state.value,
            "leastSigBits": self.sequence,
            "lowWaterMark": self.low_water_mark(),
            "ongoingTxnSize": len(self.txns),
            "recoverStartTime": self.recover_start_ms,
            "recoverEndTime": self.recover_end_ms,
        }

    async def close(self) -> None:
        """Stop answering (requests get `CoordinatorNotFoundError`) and close the log."""
        if self.state is StoreState.CLOSED:
            return
        self.state = StoreState.CLOSED
        self._deadlines_changed.set()
        with trio.CancelScope(shield=True):
            try:
                await self.ml.close()
            except Exception as exc:
                log.warning("closing transaction log %d: %s", self.tc_id, exc)


async def open_store(
    factory: ManagedLedgerFactory, tc_id: int, *, clock_ms: Callable[[], int], max_active: int
) -> TransactionMetadataStore:
    """Open coordinator ``tc_id``'s log and recover its transactions (Rule 3); READY on return."""
    ml = await factory.open(log_topic(tc_id).managed_ledger_name)
    try:
        cursor = await ml.open_cursor(LOG_CURSOR, InitialPosition.EARLIEST)
        store = TransactionMetadataStore(tc_id, ml, cursor, clock_ms=clock_ms, max_active=max_active)
        await store._replay()
    except BaseException:
        with trio.CancelScope(shield=True):
            await ml.close()
        raise
    return store
