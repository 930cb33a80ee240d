"""Topic compaction: the latest message per key up to a horizon, kept in a ledger beside the topic.

As in Apache Pulsar, a compaction run reads the topic (after the previous compacted view) up to
its last entry at the start of the run, the *horizon*, and writes a new ledger (a
`managed_ledger.SideLedgers` ledger) holding, in topic order, the entries whose messages are the
latest of their key. It then records the horizon as the mark-delete position of the durable
``__compaction`` cursor and the new ledger's id as that cursor's ``CompactedTopicLedger``
property (persisted at once, so both survive a broker restart), and deletes the previous
compacted ledger. Consumers and readers subscribed with ``read_compacted`` read the compacted
ledger up to the horizon, then the topic after it (see `Dispatcher`).

States of a topic's `Compactor` (Pulsar's ``LongRunningProcessStatus``)::

    NOT_RUN --start--> RUNNING --done--> SUCCESS --start--> RUNNING ...
                               \\-fail--> ERROR (lastError) --start--> RUNNING ...

Rules:

* Rule 1 (one at a time): `start` while RUNNING is refused (`CompactionInProgress`); the run is a
  task of the topic's nursery, so unloading the topic cancels it (the cursor keeps the previous
  view; the half-written ledger is deleted).
* Rule 2 (what is kept): messages are taken one by one (a batch is split). A message without a
  key is dropped. The latest message of a key wins; when that latest message is a tombstone
  (``null_value`` set, or an empty payload) the key is dropped. A batch entry is kept when one
  of its messages is kept, rewritten uncompressed with only the kept messages. (Pulsar marks the
  others ``compacted_out`` instead, keeping batch indexes; the official C++ client, which the
  Python client wraps, does not skip such messages, so they are left out: a kept message's batch
  index in the compacted view is its index among the kept ones, its entry position unchanged.)
* Rule 3 (two phases, bounded): phase one maps each key to the position and batch index of its
  latest message (at most `MAX_KEYS` keys, else the run fails with a clear reason: the map is the
  only memory that grows with the topic); phase two reads the same messages again and writes the
  kept ones. Entries never sit in memory beyond one read batch. The ``__compaction`` cursor is
  opened at the start of the first run, so retention cannot trim what the run reads.
* Rule 4 (the view): `CompactedView` is immutable; a run swaps the topic's view only once the
  new ledger is sealed and the cursor persisted. The old ledger is deleted afterwards (a reader
  still on it fails its read once and continues on the new view, which holds every key it had).
* Rule 5 (retention): the ``__compaction`` cursor is a durable cursor whose mark-delete is the
  horizon, so it pins exactly what is not compacted yet; retention may trim ledgers behind it.
  It is a system cursor of the retention service (as in Pulsar, message TTL and backlog eviction
  never move it) and never a subscription: no client or admin request may use its name as one.
  A view loaded from the cursor (after a restart or reload) reports SUCCESS (Pulsar's broker says
  NOT_RUN until a run on the new owner; the view is there either way).
* Rule 6 (automatic): every `monitor_interval` the topic compacts itself when the namespace's
  ``compaction_threshold`` (bytes, else the broker default; 0 = off) is exceeded by the backlog
  size of the ``__compaction`` cursor (the whole topic when it has none yet), as Pulsar.

Compacted ledger entry format (Magnetar's own; the ledger is internal)::

    [ledgerId u64][entryId u64][stored entry: metadataSize u32, MessageMetadata, payload]
"""

from __future__ import annotations

import enum
import logging
import struct
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from managed_ledger import (
    Entry,
    InitialPosition,
    ManagedCursor,
    ManagedLedgerError,
    Position,
    SideLedgerReader,
)
from protocols.pulsar import MalformedBatch, MessageMetadata, build_batch, split_batch
from protocols.pulsar import pulsar_api_pb2 as pb

from ._entries import entry_info, entry_metadata

if TYPE_CHECKING:
    from managed_ledger import ManagedLedgerFactory

    from ._topic import Topic

__all__ = [
    "COMPACTION_CURSOR",
    "COMPACTED_LEDGER_PROPERTY",
    "CompactionState",
    "CompactedView",
    "Compactor",
    "CompactionInProgress",
    "MAX_KEYS",
    "THRESHOLD_POLICY",
    "compaction_threshold",
    "delete_compacted_ledger",
]

log = logging.getLogger(__name__)

COMPACTION_CURSOR = "__compaction"
"""The durable cursor whose mark-delete position is the compaction horizon (Pulsar's name)."""

COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
"""The ``__compaction`` cursor property holding the compacted ledger's id (Pulsar's name)."""

THRESHOLD_POLICY = "compaction_threshold"
"""The key of the namespace policy in Pulsar's Policies JSON (REST: ``compactionThreshold``)."""

MAX_KEYS = 2_000_000
"""The most distinct keys one run maps (Rule 3); a topic with more fails compaction clearly."""

_READ_BATCH = 100  # entries per read in both phases
_HEADER = struct.Struct(">QQ")


class CompactionInProgress(Exception):
    """`Compactor.start` while a run is going on (Rule 1)."""


class CompactionState(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus.Status``."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


# ------------------------------------------------------------------ message parsing (pure)


@dataclass(frozen=True, slots=True)
class _Message:
    key: str | None
    tombstone: bool


def _decompress(md: MessageMetadata, payload: bytes) -> bytes:
    """The uncompressed payload of an entry (Pulsar's codecs; LZ4/ZSTD/SNAPPY need cramjam)."""
    codec = md.compression
    size = md.uncompressed_size
    if codec == pb.NONE:
        return payload
    if codec == pb.ZLIB:
        return zlib.decompress(payload)
    try:
        import cramjam  # imported on first use: only compressed batches need it
    except ImportError:  # pragma: no cover - a dependency of the package; clear if it was left out
        raise ValueError(f"{pb.CompressionType.Name(codec)} payloads need the cramjam package") from None
    if codec == pb.LZ4:
        return bytes(cramjam.lz4.decompress_block(payload, output_len=size)) if size else b""
    if codec == pb.ZSTD:
        return bytes(cramjam.zstd.decompress(payload))
    if codec == pb.SNAPPY:
        return bytes(cramjam.snappy.decompress_raw(payload))
    raise ValueError(f"unknown compression {codec}")


def _split_entry(data: bytes) -> tuple[MessageMetadata, bytes]:
    md = entry_metadata(data)
    (size,) = struct.unpack_from(">I", data, 0)
    return md, data[4 + size :]


def entry_messages(data: bytes) -> list[_Message]:
    """The messages of a stored entry in batch-index order (one for a non-batched entry).

    Raises ``ValueError`` for an entry that cannot be parsed or decompressed."""
    md, payload = _split_entry(data)
    if not md.HasField("num_messages_in_batch"):
        key = md.partition_key if md.HasField("partition_key") else None
        empty = md.uncompressed_size == 0 if md.compression != pb.NONE else not payload
        return [_Message(key, md.null_value or empty)]
    try:
        singles = split_batch(_decompress(md, payload), md.num_messages_in_batch)
    except MalformedBatch as exc:
        raise ValueError(str(exc)) from exc
    return [
        _Message(s.partition_key if s.HasField("partition_key") else None, s.null_value or not body)
        for s, body in singles
    ]


def rewrite_batch(data: bytes, keep: set[int]) -> bytes:
    """A batch entry holding only the messages at ``keep``, in order, stored uncompressed (Rule 2)."""
    md, payload = _split_entry(data)
    singles = split_batch(_decompress(md, payload), md.num_messages_in_batch)
    kept = [(single, body) for i, (single, body) in enumerate(singles) if i in keep]
    new_md = MessageMetadata()
    new_md.CopyFrom(md)
    new_md.ClearField("compression")
    new_md.ClearField("uncompressed_size")
    new_md.num_messages_in_batch = len(kept)
    raw = new_md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + build_batch(kept)


def encode_compacted(pos: Position, data: bytes) -> bytes:
    """One compacted-ledger entry: the original position, then the stored entry."""
    return _HEADER.pack(pos.ledger_id, pos.entry_id) + data


def decode_compacted(raw: bytes) -> Entry:
    """The topic entry a compacted-ledger entry holds (with its original position)."""
    if len(raw) < _HEADER.size:
        raise ValueError("compacted entry too short")
    ledger_id, entry_id = _HEADER.unpack_from(raw, 0)
    return Entry(Position(ledger_id, entry_id), raw[_HEADER.size :])


def _decode_read(raw: bytes, ledger_id: int) -> Entry:
    # a readable (digest-checked) entry of ours that does not decode: report it as a storage
    # error, which the dispatcher logs and retries, rather than crash the topic's tasks
    try:
        return decode_compacted(raw)
    except ValueError as exc:
        raise ManagedLedgerError(f"compacted ledger {ledger_id}: {exc}") from exc


# ------------------------------------------------------------------ the view


class CompactedView:
    """A sealed compacted ledger and its horizon (immutable, Rule 4).

    Entries hold positions in increasing order, so lookups are binary searches over reads."""

    def __init__(self, horizon: Position, reader: SideLedgerReader) -> None:
        self.horizon = horizon
        self.reader = reader

    @property
    def ledger_id(self) -> int:
        """The compacted ledger's id."""
        return self.reader.ledger_id

    @property
    def entries(self) -> int:
        """How many entries the compacted ledger holds."""
        return self.reader.last_entry_id + 1

    async def _position_at(self, index: int) -> Position:
        (raw,) = await self.reader.read(index, index)
        return _decode_read(raw, self.ledger_id).position

    async def first_index_at_or_after(self, pos: Position) -> int:
        """The index of the first entry whose position is >= ``pos`` (``entries`` if none)."""
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) // 2
            if await self._position_at(mid) < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def read_from(self, pos: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries at or after ``pos`` (and at or before the horizon)."""
        first = await self.first_index_at_or_after(pos)
        last = min(self.entries, first + max_entries) - 1
        if first > last:
            return []
        return [_decode_read(raw, self.ledger_id) for raw in await self.reader.read(first, last)]

    async def last_entry(self) -> Entry | None:
        """The view's last entry, None when it is empty."""
        if self.entries == 0:
            return None
        (raw,) = await self.reader.read(self.entries - 1, self.entries - 1)
        return _decode_read(raw, self.ledger_id)

    async def entry_at(self, pos: Position) -> Entry | None:
        """The compacted entry of ``pos``, None when compaction dropped it."""
        i = await self.first_index_at_or_after(pos)
        if i >= self.entries:
            return None
        (raw,) = await self.reader.read(i, i)
        entry = _decode_read(raw, self.ledger_id)
        return entry if entry.position == pos else None


# ------------------------------------------------------------------ the compactor


class Compactor:
    """Compacts one topic (see the module rules); created by its `Topic`."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.state = CompactionState.NOT_RUN
        self.last_error: str | None = None
        self.view: CompactedView | None = None
        # statistics since the topic was loaded (Pulsar's CompactionStats and compaction metrics)
        self.succeeded = 0
        self.failed = 0
        self.removed_events = 0  # messages left out of the view, summed over the runs
        self.last_removed_events = 0
        self.last_succeed_ms = 0
        self.last_failed_ms = 0
        self.last_duration_ms = 0

    @property
    def _ml(self):
        return self.topic.ml

    @property
    def cursor(self) -> ManagedCursor | None:
        """The ``__compaction`` cursor, None before the first run."""
        return dict(getattr(self._ml, "cursors", {}) or {}).get(COMPACTION_CURSOR)

    @property
    def running(self) -> bool:
        """A run is going on (the topic is then not idle: unloading would cancel it)."""
        return self.state is CompactionState.RUNNING

    def status(self) -> dict[str, str | None]:
        """Pulsar's ``LongRunningProcessStatus`` JSON."""
        return {"status": self.state.value, "lastError": self.last_error or ""}

    async def load(self) -> None:
        """Open the compacted view the ``__compaction`` cursor names (after a restart or reload).
        A ledger that cannot be opened leaves no view and the state ERROR with the reason."""
        cursor = self.cursor
        if cursor is None:
            return
        ledger_id = cursor.properties.get(COMPACTED_LEDGER_PROPERTY)
        if ledger_id is None:
            return
        try:
            reader = await self.topic.service.factory.side_ledgers.open(ledger_id)
        except ManagedLedgerError as exc:
            self.state, self.last_error = CompactionState.ERROR, f"cannot open compacted ledger: {exc}"
            log.warning("topic %s: %s", self.topic.name, self.last_error)
            return
        self.view = CompactedView(cursor.mark_delete_position, reader)
        self.state = CompactionState.SUCCESS

    def start(self) -> None:
        """Start a run in the topic's nursery (Rule 1). Raises `CompactionInProgress`."""
        if self.state is CompactionState.RUNNING:
            raise CompactionInProgress(f"compaction of {self.topic.name} is already in progress")
        nursery = self.topic._nursery
        if nursery is None or self.topic.closed:
            raise ManagedLedgerError(f"topic {self.topic.name} is not loaded")
        self.state, self.last_error = CompactionState.RUNNING, None
        nursery.start_soon(self._run)

    async def _run(self) -> None:
        clock = self.topic.service.clock
        started = clock()
        try:
            removed = await self._compact()
        except Exception as exc:
            self._failed(f"{type(exc).__name__}: {exc}", started)
            log.warning("compaction of %s failed: %s", self.topic.name, self.last_error)
        except BaseException:
            self._failed("cancelled: the topic was unloaded", started)
            raise
        else:
            self.state = CompactionState.SUCCESS
            now = clock()
            self.succeeded += 1
            self.last_removed_events = removed
            self.removed_events += removed
            self.last_succeed_ms = int(now * 1000)
            self.last_duration_ms = int((now - started) * 1000)

    def _failed(self, why: str, started: float) -> None:
        now = self.topic.service.clock()
        self.state, self.last_error = CompactionState.ERROR, why
        self.failed += 1
        self.last_failed_ms = int(now * 1000)
        self.last_duration_ms = int((now - started) * 1000)

    def stats(self) -> dict[str, int]:
        """Pulsar's ``CompactionStats`` of the topic stats (``compaction``)."""
        return {
            "lastCompactionRemovedEventCount": self.last_removed_events,
            "lastCompactionSucceedTimestamp": self.last_succeed_ms,
            "lastCompactionFailedTimestamp": self.last_failed_ms,
            "lastCompactionDurationTimeInMills": self.last_duration_ms,
        }

    async def _messages(
        self, old: CompactedView | None, start: Position | InitialPosition, horizon: Position
    ) -> AsyncIterator[tuple[Entry, list[_Message]]]:
        """The entries of the previous view, then the topic's from ``start`` to ``horizon``."""
        if old is not None:
            i = 0
            while i < old.entries:
                last = min(old.entries, i + _READ_BATCH) - 1
                for raw in await old.reader.read(i, last):
                    entry = _decode_read(raw, old.ledger_id)
                    yield entry, _parse(entry)
                i = last + 1
        if isinstance(start, Position) and start > horizon:
            return
        cursor = self._ml.new_non_durable_cursor(start, inclusive=True)
        try:
            while True:
                batch = await cursor.read_entries(_READ_BATCH)
                if not batch:
                    return
                for entry in batch:
                    if entry.position > horizon:
                        return
                    info = entry_info(entry.data)
                    if self.topic.txn_buffer.skips(info.marker_type, info.txn):
                        yield entry, []  # a marker or an aborted transaction's entry: never kept
                        continue
                    yield entry, _parse(entry)
        finally:
            await cursor.close()

    async def _compact(self) -> int:
        """One run; returns how many of the messages it read it left out of the view."""
        ml = self._ml
        horizon = min(ml.last_confirmed_entry, self.topic.max_read_position)  # `_topic` Rule 9
        old = self.view
        start: Position | InitialPosition = (
            self.topic.next_position(old.horizon) if old is not None else InitialPosition.EARLIEST
        )
        if old is not None and horizon <= old.horizon:
            return 0  # nothing written since the last run: the view stands
        # The cursor exists from the first run on, so that retention cannot trim what the run
        # reads between its two phases (its mark-delete is the previous horizon, or before all).
        cursor = self.cursor or await ml.open_cursor(COMPACTION_CURSOR, InitialPosition.EARLIEST)
        # phase one: key -> (position, batch index) of its latest message (Rule 3)
        latest: dict[str, tuple[Position, int]] = {}
        async for entry, messages in self._messages(old, start, horizon):
            for i, m in enumerate(messages):
                if m.key is not None:
                    latest[m.key] = (entry.position, i)
                    if len(latest) > MAX_KEYS:
                        raise ValueError(f"more than {MAX_KEYS} distinct keys: too many to compact")
        # phase two: write the kept messages' entries (Rule 2)
        side = self.topic.service.factory.side_ledgers
        writer = await side.create(ml.name, "compacted-topic")
        done = False
        kept = 0
        n = 0
        try:
            async for entry, messages in self._messages(old, start, horizon):
                keep = {
                    i
                    for i, m in enumerate(messages)
                    if m.key is not None and not m.tombstone and latest.get(m.key) == (entry.position, i)
                }
                n += len(messages)
                kept += len(keep)
                if not keep:
                    continue
                data = entry.data
                if entry_metadata(data).HasField("num_messages_in_batch") and len(keep) < len(messages):
                    data = rewrite_batch(data, keep)
                await writer.add(encode_compacted(entry.position, data))
            await writer.close()
            reader = await side.open(writer.ledger_id)
            await cursor.mark_delete(horizon, {COMPACTED_LEDGER_PROPERTY: writer.ledger_id})
            await cursor.persist()  # the horizon and ledger id survive a crash from now on (Rule 4)
            done = True
        finally:
            if not done:
                with trio.CancelScope(shield=True):
                    try:
                        await side.delete(writer.ledger_id)
                    except ManagedLedgerError as exc:
                        log.warning(
                            "compaction of %s: could not delete the unfinished ledger: %s", self.topic.name, exc
                        )
        self.view = CompactedView(horizon, reader)
        log.info(
            "compacted %s up to %s into ledger %d (%d entries)",
            self.topic.name,
            horizon,
            writer.ledger_id,
            writer.entries,
        )
        if old is not None:
            await old.reader.close()
            try:
                await side.delete(old.ledger_id)
            except ManagedLedgerError as exc:
                log.warning(
                    "compaction of %s: could not delete the old compacted ledger %d: %s",
                    self.topic.name,
                    old.ledger_id,
                    exc,
                )
        return n - kept

    # ------------------------------------------------------------------ automatic (Rule 6)

    def backlog_bytes(self) -> int:
        """What the threshold is compared with: the ``__compaction`` cursor's backlog size, or
        the topic's whole size before the first run."""
        cursor = self.cursor
        return cursor.backlog_size if cursor is not None else self._ml.total_size

    async def check_threshold(self) -> bool:
        """Start a run when the threshold is exceeded; True when one was started."""
        threshold = await compaction_threshold(self.topic)
        if threshold <= 0 or self.state is CompactionState.RUNNING:
            return False
        if self.backlog_bytes() <= threshold:
            return False
        log.info(
            "topic %s: compaction backlog %d bytes over the threshold %d: compacting",
            self.topic.name,
            self.backlog_bytes(),
            threshold,
        )
        self.start()
        return True

    async def monitor(self) -> None:
        """Check the threshold every ``compaction_monitor_interval_s`` until the topic closes."""
        interval = self.topic.service.config.compaction_monitor_interval_s
        while True:
            await trio.sleep(interval)
            try:
                await self.check_threshold()
            except Exception as exc:
                log.warning("compaction check of %s failed: %s", self.topic.name, exc)

    async def close(self) -> None:
        """Release the view's read handle (the topic is closing)."""
        if self.view is not None:
            await self.view.reader.close()


async def delete_compacted_ledger(factory: ManagedLedgerFactory, ml_name: str) -> int | None:
    """Delete the compacted ledger of a managed ledger about to be deleted (its id lives in the
    ``__compaction`` cursor, which goes with it); the id deleted, None when there was none."""
    props = await factory.stored_cursor_properties(ml_name, COMPACTION_CURSOR)
    ledger_id = (props or {}).get(COMPACTED_LEDGER_PROPERTY)
    if ledger_id is None:
        return None
    await factory.side_ledgers.delete(ledger_id)
    return ledger_id


async def compaction_threshold(topic: Topic) -> int:
    """The namespace's ``compaction_threshold`` policy (bytes), else the broker's
    ``brokerServiceCompactionThresholdInBytes``; 0 turns automatic compaction off."""
    policies = await topic.service.namespaces.get_policies(topic.name.namespace_name) or {}
    value = policies.get(THRESHOLD_POLICY)
    return int(value) if value is not None else topic.service.config.compaction_threshold_bytes


def _parse(entry: Entry) -> list[_Message]:
    try:
        return entry_messages(entry.data)
    except ValueError as exc:
        # an entry no client could read: it holds no key we could keep
        log.warning("compaction: skipping unreadable entry %s: %s", entry.position, exc)
        return [_Message(None, False)]
