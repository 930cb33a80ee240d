"""The transaction buffer of one persistent topic: transactional messages stored, held, committed
or aborted, as Pulsar's ``TopicTransactionBuffer`` keeps them.

Rules:

* Rule 1 (stored, not dispatched): a SEND carrying a transaction id is stored in the topic's
  ledgers like any other, as it arrives; the transaction is *open* on this topic from its first
  stored entry until its commit or abort marker is stored. `note_stored` sees every entry the
  topic stores, in position order (the topic's completer calls it before waking dispatchers).
* Rule 2 (max read position): while transactions are open, nothing at or after the first entry
  of the oldest open one is readable by a subscription, a reader or compaction, transactional or
  not, so plain consumers keep the topic's order behind open transactions; with none open the
  max read position is the last entry the topic has seen stored (never an entry whose add has not
  been answered). A commit or abort moves it forward.
* Rule 3 (markers): `end` appends a marker entry (``MessageMetadata.marker_type`` TXN_COMMIT 21
  or TXN_ABORT 22 with the transaction id, producer ``pulsar.txn.marker``, no payload, as
  Pulsar's ``Markers``), then forgets the transaction (commit) or remembers it as aborted
  (abort). Markers are never delivered: dispatchers acknowledge them and go on. Ending a
  transaction again the same way succeeds and changes nothing; committing an aborted one (or
  aborting a committed one this buffer remembers) is refused with InvalidTxnStatus.
* Rule 4 (aborted): an entry of an aborted transaction is never delivered (dispatchers
  acknowledge it, compaction leaves it out). Aborted transactions are remembered while the
  ledger holding their abort marker is stored (every entry of the transaction precedes it).
* Rule 5 (snapshot and recovery): the durable cursor ``pulsar.txn.buffer`` is the snapshot: its
  mark-delete position is the max read position when it was taken and its ``aborted`` property
  lists the aborted transactions with their marker positions. On load the buffer reads it, then
  replays the entries after it (their metadata name their transaction, markers end them), so
  open, committed and aborted transactions are known again after any crash. The cursor exists
  before the first transactional entry is stored (`prepare`), and being durable it keeps
  retention from trimming what a replay needs and anything after the max read position. A
  snapshot is taken after ``transactionBufferSnapshotMaxTransactionCount`` ends or once
  ``transactionBufferSnapshotMinTimeInMillis`` passed since the last one, every such interval
  while the max read position moved past the cursor (plain entries after the last end), and when
  the topic closes. A topic that never stored a transactional entry has no cursor and no replay.
* Rule 6 (bounded): the open transactions are bounded by the entries stored (one record each);
  the remembered ended ones (for Rule 3's checks and to refuse a late SEND) by
  `ENDED_MEMORY`; the aborted ones by Rule 4's trimming, and a snapshot holds at most
  `SNAPSHOT_MAX_ABORTED` of them: when more are remembered the snapshot's position stays before
  the oldest left out, so the replay finds its marker again.
"""

from __future__ import annotations

import logging
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio
from google.protobuf.message import DecodeError

from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, ManagedLedgerError, Position
from protocols.pulsar import MessageMetadata
from protocols.pulsar import pulsar_api_pb2 as pb

from ..._errors import BrokerServiceError
from .. import TxnAction, TxnID

log = logging.getLogger(__name__)

__all__ = [
    "TransactionBuffer",
    "BufferHost",
    "SNAPSHOT_CURSOR",
    "TXN_COMMIT_MARKER",
    "TXN_ABORT_MARKER",
    "marker_entry",
    "TxnInfo",
    "txn_info",
]

SNAPSHOT_CURSOR = "pulsar.txn.buffer"
ABORTED_PROPERTY = "aborted"
TXN_COMMIT_MARKER = 21
TXN_ABORT_MARKER = 22
MARKER_PRODUCER = "pulsar.txn.marker"
ENDED_MEMORY = 10_000
SNAPSHOT_MAX_ABORTED = 10_000
_REPLAY_BATCH = 500
_ENDED = {TxnAction.COMMIT: "committed", TxnAction.ABORT: "aborted"}
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class TxnInfo:
    """What the buffer needs of a stored entry's metadata: its transaction and marker type."""

    txn: TxnID | None
    marker_type: int | None


def txn_info(data: bytes) -> TxnInfo:
    """`TxnInfo` of a stored entry (``[metadataSize][MessageMetadata][payload]``); an entry whose
    metadata cannot be read belongs to no transaction. Never raises."""
    md = MessageMetadata()
    try:
        (size,) = _U32.unpack_from(data, 0)
        md.ParseFromString(data[4 : 4 + size])
    except (struct.error, DecodeError, ValueError):
        return TxnInfo(None, None)
    txn = TxnID(md.txnid_most_bits, md.txnid_least_bits) if md.HasField("txnid_most_bits") else None
    return TxnInfo(txn, md.marker_type if md.HasField("marker_type") else None)


def marker_entry(txn: TxnID, action: TxnAction, publish_time_ms: int) -> bytes:
    """The stored entry of a commit or abort marker (Rule 3), no payload."""
    md = MessageMetadata(
        producer_name=MARKER_PRODUCER,
        sequence_id=0,
        publish_time=publish_time_ms,
        marker_type=TXN_COMMIT_MARKER if action is TxnAction.COMMIT else TXN_ABORT_MARKER,
        txnid_most_bits=txn.most_bits,
        txnid_least_bits=txn.least_bits,
    )
    raw = md.SerializeToString()
    return _U32.pack(len(raw)) + raw


class BufferHost(Protocol):
    """What a transaction buffer uses of its topic."""

    @property
    def ml(self) -> ManagedLedger:
        """The topic's managed ledger."""
        ...

    def wake_dispatchers(self) -> None:
        """Readable entries may have appeared: let every dispatcher run a round."""
        ...

    async def start_task(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``fn(*args, task_status=...)`` in the topic's nursery (it ends with the topic)."""
        ...


def _encode_aborted(aborted: dict[TxnID, Position]) -> str:
    return ",".join(f"{t.most_bits}:{t.least_bits}:{p.ledger_id}:{p.entry_id}" for t, p in aborted.items())


def _decode_aborted(text: str) -> dict[TxnID, Position]:
    out: dict[TxnID, Position] = {}
    for item in filter(None, text.split(",")):
        most, least, ledger, entry = (int(x) for x in item.split(":"))
        out[TxnID(most, least)] = Position(ledger, entry)
    return out


class TransactionBuffer:
    """See the module rules. Owned by its topic; `recover` runs before the topic serves anyone."""

    def __init__(
        self, host: BufferHost, *, snapshot_every: int, snapshot_min_interval_s: float, clock: Callable[[], float]
    ) -> None:
        self._host = host
        self._clock = clock
        self._snapshot_every = max(1, snapshot_every)
        self._snapshot_min_interval_s = snapshot_min_interval_s
        self.ongoing: dict[TxnID, Position] = {}  # open transactions, by their first position (Rule 2)
        self.aborted: dict[TxnID, Position] = {}  # aborted transactions and their markers (Rule 4)
        self._ended: OrderedDict[TxnID, TxnAction] = OrderedDict()  # Rule 6
        self._last_seen: Position = host.ml.last_confirmed_entry
        self._cursor: ManagedCursor | None = None
        self._lock = trio.Lock()  # ends and snapshots one at a time
        self._prepare_lock = trio.Lock()
        self._ends_since_snapshot = 0
        self._last_snapshot_at = clock()  # for the snapshot rules: the buffer's creation before any
        self._snapshot_taken_ms = 0  # when this buffer last took one (stats)
        self.committed_count = 0
        self.aborted_count = 0
        self._recovered_ms = (0, 0)  # when the last recovery started and ended (epoch ms; 0: none)

    # ------------------------------------------------------------------ reading (Rules 2, 4)

    @property
    def active(self) -> bool:
        """The topic has stored transactional entries (it has the snapshot cursor)."""
        return self._cursor is not None

    @property
    def max_read_position(self) -> Position:
        """Rule 2: the last position a reader may read (the managed ledger's last entry on a
        topic that never stored a transactional entry)."""
        for first in self.ongoing.values():
            return Position(first.ledger_id, first.entry_id - 1)
        if self._cursor is None:
            return self._host.ml.last_confirmed_entry
        return self._last_seen

    def held_entries(self) -> int:
        """Entries stored after the max read position (Rule 2): no subscription can read them
        yet, so no backlog counts them."""
        if not self.ongoing:
            return 0
        limit = self.max_read_position
        last = self._host.ml.last_confirmed_entry
        if last <= limit:
            return 0
        if last.ledger_id == limit.ledger_id:
            return last.entry_id - limit.entry_id
        held = last.entry_id + 1
        for info in self._host.ml.ledgers:
            if info.ledger_id == limit.ledger_id:
                held += max(0, info.entries - limit.entry_id - 1)
            elif limit.ledger_id < info.ledger_id < last.ledger_id:
                held += info.entries
        return held

    def skips(self, marker_type: int | None, txn: TxnID | None) -> bool:
        """Whether an entry (its metadata's marker type and transaction) is never delivered: a
        marker (Rule 3) or an entry of an aborted transaction (Rule 4)."""
        return marker_type is not None or (txn is not None and txn in self.aborted)

    # ------------------------------------------------------------------ writing (Rules 1, 3)

    async def prepare(self, txn: TxnID) -> None:
        """Before a SEND of ``txn`` is stored: refuse it when the transaction ended here already
        (NotAllowed: its marker is stored), and create the snapshot cursor on first use (Rule 5)."""
        if txn in self._ended or txn in self.aborted:
            raise BrokerServiceError(f"transaction {txn} already ended on this topic", pb.NotAllowedError)
        if self._cursor is None:
            async with self._prepare_lock:
                if self._cursor is None:
                    self._cursor = await self._host.ml.open_cursor(SNAPSHOT_CURSOR, InitialPosition.LATEST)
                    await self._host.start_task(self._snapshot_loop)

    def note_stored(self, pos: Position, txn: TxnID | None) -> None:
        """Rule 1: an entry is stored at ``pos`` (called in position order)."""
        if txn is not None and txn not in self.ongoing and txn not in self._ended:
            self.ongoing[txn] = pos
        if pos > self._last_seen:
            self._last_seen = pos

    async def end(self, txn: TxnID, action: TxnAction) -> None:
        """Rule 3: store the transaction's marker and commit or abort it here."""
        async with self._lock:
            previous = self._ended.get(txn)
            if previous is None and txn in self.aborted:
                previous = TxnAction.ABORT
            if previous is action:
                return
            if previous is not None:
                raise BrokerServiceError(f"transaction {txn} was {_ENDED[previous]} on this topic", pb.InvalidTxnStatus)
            if self._cursor is None:
                # nothing transactional was ever stored here (`prepare` comes first): no marker
                self._remember(txn, action)
                return
            data = marker_entry(txn, action, int(self._clock() * 1000))
            pos = await self._host.ml.add_entry(data)
            self.ongoing.pop(txn, None)
            if action is TxnAction.ABORT:
                self.aborted[txn] = pos
                self.aborted_count += 1
            else:
                self.committed_count += 1
            self._remember(txn, action)
            if pos > self._last_seen:
                self._last_seen = pos
            self._ends_since_snapshot += 1
            self._host.wake_dispatchers()
            due = (
                self._ends_since_snapshot >= self._snapshot_every
                or self._clock() - self._last_snapshot_at >= self._snapshot_min_interval_s
            )
            if due:
                try:
                    await self._snapshot()
                except ManagedLedgerError as exc:  # the end is stored: the next snapshot covers it
                    log.warning("transaction buffer snapshot of %s failed: %s", self._host.ml.name, exc)

    def _remember(self, txn: TxnID, action: TxnAction) -> None:
        self._ended[txn] = action
        self._ended.move_to_end(txn)
        while len(self._ended) > ENDED_MEMORY:
            self._ended.popitem(last=False)

    # ------------------------------------------------------------------ snapshots (Rule 5)

    async def snapshot(self) -> None:
        """Take a snapshot now (a no-op on a topic that never stored a transactional entry)."""
        async with self._lock:
            await self._snapshot()

    async def _snapshot(self) -> None:
        cursor = self._cursor
        if cursor is None:
            return
        ml = self._host.ml
        first = next((info.ledger_id for info in ml.ledgers), None)
        if first is not None:  # Rule 4: aborts whose marker's ledger is gone are forgotten
            for txn in [t for t, p in self.aborted.items() if p.ledger_id < first]:
                del self.aborted[txn]
        kept = dict(sorted(self.aborted.items(), key=lambda kv: kv[1])[-SNAPSHOT_MAX_ABORTED:])
        target = min(self.max_read_position, ml.last_confirmed_entry)
        left_out = [p for t, p in self.aborted.items() if t not in kept]
        if left_out:  # Rule 6: the replay must find the markers left out
            oldest = min(left_out)
            target = min(target, Position(oldest.ledger_id, oldest.entry_id - 1))
        if target > cursor.mark_delete_position:
            await cursor.mark_delete(target)
        await cursor.update_cursor_properties({ABORTED_PROPERTY: _encode_aborted(kept)})
        self._ends_since_snapshot = 0
        self._last_snapshot_at = self._clock()
        self._snapshot_taken_ms = int(self._last_snapshot_at * 1000)

    async def _snapshot_loop(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rule 5: while no transaction ends, plain entries still move the max read position; a
        snapshot every ``snapshot_min_interval_s`` when it moved keeps the cursor from pinning
        them for good."""
        task_status.started()
        while True:
            await trio.sleep(self._snapshot_min_interval_s)
            cursor = self._cursor
            if cursor is None or min(self.max_read_position, self._host.ml.last_confirmed_entry) <= (
                cursor.mark_delete_position
            ):
                continue
            try:
                await self.snapshot()
            except ManagedLedgerError as exc:  # closing or fenced: the topic goes, or the next one retries
                log.warning("transaction buffer snapshot of %s failed: %s", self._host.ml.name, exc)

    async def recover(self) -> None:
        """Rule 5: rebuild the state from the snapshot cursor and the entries after it."""
        ml = self._host.ml
        cursor = ml.cursors.get(SNAPSHOT_CURSOR)
        self._last_seen = ml.last_confirmed_entry
        if cursor is None:
            return
        started_ms = int(time.time() * 1000)
        cursor = await ml.open_cursor(SNAPSHOT_CURSOR)
        self._cursor = cursor
        await self._host.start_task(self._snapshot_loop)
        self.aborted = _decode_aborted(cursor.cursor_properties.get(ABORTED_PROPERTY, ""))
        end = ml.last_confirmed_entry
        reader = ml.new_non_durable_cursor(cursor.mark_delete_position, inclusive=False)
        replayed = 0
        try:
            while True:
                entries = await reader.read_entries(_REPLAY_BATCH)
                if not entries:
                    break
                for entry in entries:
                    if entry.position > end:
                        break
                    replayed += 1
                    info = txn_info(entry.data)
                    if info.txn is None:
                        continue
                    if info.marker_type == TXN_COMMIT_MARKER:
                        self.ongoing.pop(info.txn, None)
                        self._remember(info.txn, TxnAction.COMMIT)
                    elif info.marker_type == TXN_ABORT_MARKER:
                        self.ongoing.pop(info.txn, None)
                        self.aborted[info.txn] = entry.position
                        self._remember(info.txn, TxnAction.ABORT)
                    elif info.txn not in self.ongoing and info.txn not in self._ended:
                        self.ongoing[info.txn] = entry.position
        finally:
            await reader.close()
        self._recovered_ms = (started_ms, int(time.time() * 1000))
        log.info(
            "transaction buffer of %s recovered: %d entries replayed, %d open, %d aborted",
            ml.name,
            replayed,
            len(self.ongoing),
            len(self.aborted),
        )

    # ------------------------------------------------------------------ stats

    def stats(self) -> dict[str, object]:
        """Pulsar's ``TransactionBufferStats`` fields this buffer has."""
        return {
            "state": "Ready" if self._cursor is not None else "NoSnapshot",
            "maxReadPosition": str(self.max_read_position),
            "lastSnapshotTimestamps": self._snapshot_taken_ms,
            "lowWaterMarks": {},  # Pulsar's per-coordinator low watermarks: this buffer keeps none
            "snapshotStats": None,  # segmented snapshots only
            "ongoingTxnSize": len(self.ongoing),
            "recoverStartTime": self._recovered_ms[0],
            "recoverEndTime": self._recovered_ms[1],
        }
