"""The delayed-delivery index of one subscription, bounded in memory and kept in storage.

This is Pulsar's bucket-based tracker (PIP-195) adapted to this managed ledger. The index says,
for each stored entry whose ``deliver_at_time`` had not come when the dispatcher read it, when to
deliver it. Its parts:

* the *mutable bucket*: entries offered since the last seal, in memory (a heap of `pack` keys);
* *buckets*: sealed parts of the index, each covering a range of positions ``start..end`` (an
  entry belongs to the bucket whose range holds its position). A bucket's entries are sorted by
  due time, cut into segments (`SegmentCutter`) and stored as one side ledger (segments, then a
  footer: `broker.topics._delayed_format`), named by the cursor property
  ``#pulsar.internal.delayed.bucket_{start}_{end}`` holding the ledger id, as Pulsar records its
  buckets in cursor properties. Of a bucket only its *head* (the segment being delivered) is in
  memory, with a few counters.

Rules:

* Rule 1 (offer): the dispatcher offers each entry it reads from the cursor that carries a due
  time; `offer` answers whether the index holds it (the dispatcher then does not deliver it).
  An entry whose position is *covered* is never added again: it is held when its time has not
  come (the index has it), delivered otherwise. An uncovered entry not yet due goes into the
  mutable bucket and is held; one already due is delivered.
* Rule 2 (covered): a position is covered when it lies in a bucket's range, or at or before the
  last position offered since this index was created (``seen_to``). Every entry offered is
  indexed once, so "covered and not yet due" means "in the index" (Rule 1), and a dispatcher
  that reads again from the mark-delete position (consumers left and came back, a restart)
  neither loses nor doubles an entry. After a restart the mutable bucket is gone and only the
  stored buckets cover anything: the entries it held are read again and indexed again.
* Rule 3 (seal): the mutable bucket is sealed into a bucket once it holds
  ``delayedDeliveryMinIndexCountPerBucket`` entries (Pulsar seals at the next ledger; sealing at
  any position keeps the mutable bucket's size fixed), unless a bucket is still being persisted
  or there are ``delayedDeliveryMaxNumBuckets`` + `MERGE_FAN_IN` buckets. While it is full and
  cannot be sealed, `accepting` is False and the dispatcher reads no new entries from the
  cursor (the read-ahead of delayed entries waits for the index to have room). A seal is forced
  early when the next entry would put the mutable bucket's range across another bucket's, so
  ranges never overlap.
* Rule 4 (due): `pop_due` takes, in due-time order, index entries whose time has come (never
  one whose time has not) from the mutable bucket and the heads, skipping those the dispatcher
  says are handled already (acknowledged, pending at a consumer, waiting in its replay). A head
  used up is replaced by the bucket's next segment, read from storage by the worker; until then
  that bucket's later entries wait (they are due no earlier than the head's last one). A bucket
  used up leaves the index.
* Rule 5 (persist): the worker writes a sealed bucket (its segments are in memory until then)
  into a new side ledger, then records its key in the cursor properties (compare-and-set, at
  once); only then are its segments other than the head dropped from memory.
* Rule 6 (recover): before the index is READY the worker reads the footer of every bucket the
  cursor properties name; segments whose every entry was due before now are skipped (the
  dispatcher delivers those entries when it reads them again, Rule 1), the first other one
  becomes the head. Until READY the dispatcher delivers nothing new (nothing is delivered before
  its time by a half-recovered index).
* Rule 7 (delete): a bucket used up (Rule 4), or whose range is at or before the mark-delete
  position (everything in it acknowledged), leaves the index at once; the worker removes its key
  from the cursor properties, then deletes its ledger.
* Rule 8 (merge): while more than ``delayedDeliveryMaxNumBuckets`` (> 0) buckets are stored, the
  worker merges the 2 to `MERGE_FAN_IN` adjacent stored buckets holding the fewest entries into
  one covering their ranges: it streams their remaining entries (heads from memory, later
  segments from storage, one segment of each at a time) through a k-way merge into a new ledger,
  then swaps the keys in one cursor-properties write. The merged buckets' entries are not popped
  while the merge runs; a failed merge leaves them as they were.
* Rule 9 (failures): every storage and metadata operation of the worker that fails is retried
  with a doubling delay (`Backoff`, capped); nothing is dropped from the index for a failure. A
  bucket ledger that no longer exists, or holds bytes this format refuses, is dropped (its
  entries cannot be known) with an error log. A fenced or closed cursor ends the worker.
* Rule 10 (memory): what this index holds in memory is at most `IndexSettings.memory_bound`
  bytes (a bound on the mutable bucket, one bucket being persisted, one head per bucket and a
  merge's buffers); `memory_bytes` reports what it holds now.

States (`IndexState`): RECOVERING -> READY (Rule 6) -> CLOSED (the worker ended). Buckets
(`BucketState`): PERSISTING -> STORED (Rule 5); STORED -> MERGING -> STORED (merge failed) or
DONE; any -> DONE (Rule 7: out of the index, ledger and key being deleted).

The index uses its storage only through `BucketStore` (`SideLedgerBucketStore` in a broker).
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio
from sortedcontainers import SortedKeyList

from magnetar.common.backoff import Backoff
from managed_ledger import ManagedLedgerClosed, ManagedLedgerError, ManagedLedgerFenced, Position, SideLedgerMissing

from ._delayed_format import (
    MAX_FIELD,
    BucketFooter,
    DelayedIndexFormatError,
    IndexRun,
    SegmentCutter,
    bucket_key,
    cut_keys,
    decode_footer,
    decode_segment,
    encode_footer,
    encode_segment,
    pack,
    parse_bucket_key,
    unpack,
)
from ._entries import Signal

if TYPE_CHECKING:
    from managed_ledger import ManagedCursor, ManagedLedgerFactory, SideLedgerReader, SideLedgers, SideLedgerWriter

    from .._config import BrokerConfig

__all__ = [
    "BUCKET_FACTORY",
    "IN_MEMORY_FACTORY",
    "TRACKER_FACTORIES",
    "MERGE_FAN_IN",
    "IndexSettings",
    "IndexState",
    "BucketState",
    "BucketStore",
    "BucketWriter",
    "DelayedIndex",
    "SideLedgerBucketStore",
    "delete_bucket_ledgers",
    "delete_topic_bucket_ledgers",
]

log = logging.getLogger(__name__)

BUCKET_FACTORY = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
IN_MEMORY_FACTORY = "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
TRACKER_FACTORIES = (BUCKET_FACTORY, IN_MEMORY_FACTORY)
"""``delayedDeliveryTrackerFactoryClassName`` values: the bucket tracker (index in storage,
bounded memory) and Pulsar's in-memory one (the whole index in memory, nothing stored)."""

MERGE_FAN_IN = 4
"""Buckets merged into one at most (Pulsar's ``MAX_MERGE_NUM``)."""

BUCKET_PURPOSE = "delayed-index-bucket"
"""The ``component`` custom metadata of a bucket's side ledger."""

_MUTABLE_ENTRY_BYTES = 68
"""Bytes per entry of the mutable bucket at most: a `pack` key of three 63-bit fields (a 52-byte
int), its list slot, and the list's over-allocation (at most 1/8)."""

_RUN_ENTRY_BYTES = 26
"""Bytes per entry of an `IndexRun` at most: 24, and an array's over-allocation (1/16)."""

_BUCKET_OVERHEAD = 1024
"""Bytes of a bucket's object, counters and heap entry (a generous round figure)."""


class IndexState(enum.Enum):
    """Lifecycle of the index (module rules)."""

    RECOVERING = "recovering"
    READY = "ready"
    CLOSED = "closed"


class BucketState(enum.Enum):
    """Lifecycle of a bucket (module rules)."""

    PERSISTING = "persisting"
    STORED = "stored"
    MERGING = "merging"
    DONE = "done"


@dataclass(frozen=True)
class IndexSettings:
    """How an index is cut and bounded, from the broker's ``delayedDelivery*`` keys."""

    persistent: bool
    """Keep the index in storage (the bucket tracker); False keeps all of it in memory."""
    min_index_count: int
    time_step_ms: int
    max_indexes_per_segment: int | None
    max_num_buckets: int
    """Merge past this many stored buckets (<= 0: never; the memory bound then has none)."""
    max_segment_bytes: int
    """A stored segment or footer is at most this big (one entry of the storage)."""
    read_batch: int
    """Entries the dispatcher offers per read at most (the mutable bucket's overshoot)."""

    @classmethod
    def from_config(cls, config: BrokerConfig, max_entry_bytes: int) -> IndexSettings:
        """The settings a broker with ``config`` uses, its storage taking entries of at most
        ``max_entry_bytes``."""
        per_segment = config.delayed_delivery_max_indexes_per_bucket_snapshot_segment
        return cls(
            persistent=config.delayed_delivery_tracker_factory_class_name == BUCKET_FACTORY,
            min_index_count=config.delayed_delivery_min_index_count_per_bucket,
            time_step_ms=config.delayed_delivery_max_time_step_per_bucket_snapshot_segment_s * 1000,
            max_indexes_per_segment=per_segment if per_segment > 0 else None,
            max_num_buckets=config.delayed_delivery_max_num_buckets,
            max_segment_bytes=max(1024, min(max_entry_bytes, 4 * 1024 * 1024)),
            read_batch=config.dispatcher_max_read_batch_size,
        )

    def cutter(self) -> SegmentCutter:
        """A fresh `SegmentCutter` with these settings."""
        return SegmentCutter(self.time_step_ms, self.max_indexes_per_segment, self.max_segment_bytes)

    @property
    def memory_bound(self) -> int | None:
        """Rule 10: the most bytes an index holds in memory; None when unbounded (the in-memory
        tracker, or no limit on the number of buckets)."""
        if not self.persistent or self.max_num_buckets <= 0:
            return None
        mutable = self.min_index_count + self.read_batch
        segment = self.cutter().max_indexes
        buckets = self.max_num_buckets + MERGE_FAN_IN + 1
        return (
            mutable * _MUTABLE_ENTRY_BYTES  # the mutable bucket
            + mutable * _RUN_ENTRY_BYTES  # a bucket being persisted, all its segments
            + buckets * segment * _RUN_ENTRY_BYTES  # one head per bucket
            + (MERGE_FAN_IN + 2) * segment * _RUN_ENTRY_BYTES  # a merge: a segment per input, output
            + buckets * _BUCKET_OVERHEAD
        )


# ---------------------------------------------------------------------------------------- storage


class BucketWriter(Protocol):
    """A new bucket ledger being written (`BucketStore.create`)."""

    @property
    def ledger_id(self) -> int:
        """The ledger's id (known from creation)."""
        ...

    async def add(self, data: bytes) -> None:
        """Append the next entry (ids 0, 1, ...). Raises `ManagedLedgerError`."""
        ...

    async def close(self) -> None:
        """Wait until every entry is durable and seal the ledger. Raises `ManagedLedgerError`."""
        ...


class BucketStore(Protocol):
    """Where an index keeps its buckets: ledgers for their contents, the cursor's properties
    for their keys. Every failure is a `ManagedLedgerError`: `SideLedgerMissing` for a ledger that
    does not exist, `ManagedLedgerFenced` / `ManagedLedgerClosed` for a cursor that can no longer
    be written."""

    def properties(self) -> Mapping[str, str]:
        """The cursor's properties now."""
        ...

    async def update_properties(self, put: Mapping[str, str], remove: Iterable[str]) -> None:
        """Set and remove cursor properties in one persisted change."""
        ...

    async def create(self) -> BucketWriter:
        """A new, empty bucket ledger."""
        ...

    async def last_entry_id(self, ledger_id: int) -> int:
        """The id of a bucket ledger's last entry (its footer)."""
        ...

    async def read(self, ledger_id: int, entry_id: int) -> bytes:
        """One entry of a bucket ledger."""
        ...

    async def delete(self, ledger_id: int) -> None:
        """Delete a bucket ledger (one already gone is fine)."""
        ...


class _SideWriter:
    """`BucketWriter` over a `SideLedgerWriter`."""

    def __init__(self, writer: SideLedgerWriter) -> None:
        self._writer = writer

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id

    async def add(self, data: bytes) -> None:
        await self._writer.add(data)

    async def close(self) -> None:
        await self._writer.close()


class SideLedgerBucketStore:
    """`BucketStore` over the factory's `SideLedgers` and the subscription's cursor. Keeps up to
    ``max_readers`` bucket ledgers open for reading (least recently used closed first)."""

    def __init__(self, side: SideLedgers, cursor: ManagedCursor, owner: str, max_readers: int = 16) -> None:
        self._side = side
        self._cursor = cursor
        self._owner = owner
        self._max_readers = max_readers
        self._readers: OrderedDict[int, SideLedgerReader] = OrderedDict()

    def properties(self) -> Mapping[str, str]:
        return self._cursor.cursor_properties

    async def update_properties(self, put: Mapping[str, str], remove: Iterable[str]) -> None:
        await self._cursor.update_cursor_properties(put, remove)

    async def create(self) -> BucketWriter:
        return _SideWriter(await self._side.create(self._owner, BUCKET_PURPOSE))

    async def _reader(self, ledger_id: int) -> SideLedgerReader:
        reader = self._readers.get(ledger_id)
        if reader is not None:
            self._readers.move_to_end(ledger_id)
            return reader
        reader = await self._side.open(ledger_id)
        self._readers[ledger_id] = reader
        while len(self._readers) > self._max_readers:
            _, old = self._readers.popitem(last=False)
            await old.close()
        return reader

    async def last_entry_id(self, ledger_id: int) -> int:
        return (await self._reader(ledger_id)).last_entry_id

    async def read(self, ledger_id: int, entry_id: int) -> bytes:
        (data,) = await (await self._reader(ledger_id)).read(entry_id, entry_id)
        return data

    async def delete(self, ledger_id: int) -> None:
        reader = self._readers.pop(ledger_id, None)
        if reader is not None:
            await reader.close()
        await self._side.delete(ledger_id)

    async def close(self) -> None:
        """Close the open readers."""
        readers = list(self._readers.values())
        self._readers.clear()
        for r in readers:
            await r.close()


async def delete_bucket_ledgers(side: SideLedgers, properties: Mapping[str, str]) -> list[int]:
    """Delete every bucket ledger that the cursor ``properties`` name (the subscription or its
    topic is being deleted); the ids deleted. Failures are logged and skipped (a leaked ledger is
    tagged with its owner and purpose in its custom metadata)."""
    deleted = []
    for key, value in properties.items():
        try:
            if parse_bucket_key(key) is None:
                continue
            ledger_id = int(value)
        except ValueError:
            continue
        try:
            await side.delete(ledger_id)
        except ManagedLedgerError as exc:
            log.warning("cannot delete delayed-index bucket ledger %d (%s): %s", ledger_id, key, exc)
            continue
        deleted.append(ledger_id)
    return deleted


async def delete_topic_bucket_ledgers(factory: ManagedLedgerFactory, ml_name: str) -> list[int]:
    """Delete the bucket ledgers of every subscription of a managed ledger about to be deleted
    (their ids live in its cursors' properties, which go with it); the ids deleted."""
    deleted = []
    for info in (await factory.stored_cursors(ml_name)).values():
        deleted += await delete_bucket_ledgers(factory.side_ledgers, info.cursor_properties)
    return deleted


# ---------------------------------------------------------------------------------------- buckets


_seq = itertools.count()


@dataclass(eq=False)
class _Bucket:
    start: Position
    end: Position
    state: BucketState
    n_segments: int
    remaining: int
    """Entries not popped yet (acknowledged ones included)."""
    ledger_id: int | None = None
    pending: list[IndexRun] | None = None
    """Every segment, while PERSISTING."""
    head: IndexRun | None = None
    offset: int = 0
    next_segment: int = 0
    seq: int = field(default_factory=lambda: next(_seq))

    @property
    def key(self) -> str:
        return bucket_key(self.start, self.end)

    def head_key(self) -> int | None:
        head = self.head
        return head.key(self.offset) if head is not None and self.offset < len(head) else None

    @property
    def needs_load(self) -> bool:
        return self.state is BucketState.STORED and self.head is None and self.next_segment < self.n_segments


class _Source:
    """One merge input (Rule 8): a bucket's head from its offset, then its later segments."""

    def __init__(self, store: BucketStore, bucket: _Bucket) -> None:
        self._store = store
        self._ledger_id = bucket.ledger_id
        self.run = bucket.head
        self.offset = bucket.offset
        self._next = bucket.next_segment
        self._n = bucket.n_segments

    async def peek(self) -> int | None:
        while self.run is None or self.offset >= len(self.run):
            if self._next >= self._n:
                self.run = None
                return None
            assert self._ledger_id is not None
            self.run = decode_segment(await self._store.read(self._ledger_id, self._next))
            self.offset = 0
            self._next += 1
        return self.run.key(self.offset)


class _Stop(Exception):
    """The cursor was fenced or closed: the worker ends."""


# ---------------------------------------------------------------------------------------- index


class DelayedIndex:
    """The index of one subscription (module rules). The dispatcher calls `offer`, `pop_due`,
    `next_due_ms` and reads `accepting`, `count`; `run` is its worker task (in the topic's nursery,
    cancelled when the subscription closes). ``listener`` is called when entries may have become
    poppable without a clock tick (recovered, a head loaded, a merge done) or the index has room
    for more again (a bucket stored)."""

    def __init__(
        self,
        name: str,
        store: BucketStore,
        settings: IndexSettings,
        *,
        acked_up_to: Callable[[], Position],
        backoff: Backoff,
        clock_ms: Callable[[], float],
        idle_check_s: float = 5.0,
    ) -> None:
        self.name = name
        self.store = store
        self.settings = settings
        self._acked_up_to = acked_up_to
        self._backoff = backoff
        self._clock_ms = clock_ms
        self._idle_check_s = idle_check_s
        self.state = IndexState.RECOVERING
        self.listener: Callable[[], None] | None = None
        self._ready = trio.Event()
        self._work = Signal()
        self._mutable: list[int] = []
        self._mutable_bytes = 0
        self._mutable_start: Position | None = None
        self._mutable_end: Position | None = None
        self._buckets: Any = SortedKeyList(key=lambda b: b.start)
        self._live: dict[int, _Bucket] = {}
        self._heads: list[tuple[int, int]] = []  # (pack key of a head's next entry, bucket seq)
        self._seen_to: Position | None = None
        self._doomed: list[tuple[str | None, int | None]] = []  # (key to remove, ledger to delete)
        self._merge: tuple[list[_Source], SegmentCutter, list[IndexRun]] | None = None
        self.counters = {"create": 0, "load": 0, "delete": 0, "merge": 0, "failed": 0}
        """Storage operations done (Pulsar's bucket op types) and retries after failures."""

    # ------------------------------------------------------------------ what the dispatcher uses

    @property
    def ready(self) -> bool:
        """Recovered (Rule 6): offers and pops are allowed."""
        return self.state is IndexState.READY

    async def wait_ready(self) -> None:
        """Return once the index is READY (Rule 6), or CLOSED (its worker ended first)."""
        await self._ready.wait()

    @property
    def accepting(self) -> bool:
        """Rule 3: the mutable bucket has room (the dispatcher may read new entries)."""
        return not self.settings.persistent or len(self._mutable) < self.settings.min_index_count

    @property
    def count(self) -> int:
        """Entries in the index (acknowledged ones not popped yet included, as Pulsar counts)."""
        return len(self._mutable) + sum(b.remaining for b in self._buckets)

    @property
    def buckets(self) -> int:
        """Buckets in the index (stored or being persisted), without the mutable one."""
        return len(self._buckets)

    @property
    def loaded(self) -> int:
        """Entries held in memory: the mutable bucket and the heads' entries not popped yet."""
        n = len(self._mutable)
        for b in self._buckets:
            if b.head is not None:
                n += len(b.head) - b.offset
        return n

    def covered(self, pos: Position) -> bool:
        """Rule 2."""
        if self._seen_to is not None and pos <= self._seen_to:
            return True
        i = self._buckets.bisect_key_right(pos)
        return i > 0 and pos <= self._buckets[i - 1].end

    def offer(self, pos: Position, deliver_at_ms: int, now_ms: float) -> bool:
        """Rule 1: True when the index holds the entry at ``pos`` (do not deliver it now)."""
        if self.covered(pos):
            return deliver_at_ms > now_ms
        self._seen_to = pos
        if deliver_at_ms <= now_ms:
            return False
        self._add(pos, min(int(deliver_at_ms), MAX_FIELD))
        return True

    def next_due_ms(self) -> int | None:
        """The earliest due time among the entries in memory (None when there are none)."""
        best = self._mutable[0] if self._mutable else None
        head = self._top_head()
        if head is not None and (best is None or head[0] < best):
            best = head[0]
        return None if best is None else unpack(best)[0]

    def pop_due(self, now_ms: float, limit: int, handled: Callable[[Position], bool]) -> list[Position]:
        """Rule 4: up to ``limit`` positions whose time has come, earliest first; entries for
        which ``handled`` is true leave the index without being returned (at most a few times
        ``limit`` of them per call, so a call stays short)."""
        out: list[Position] = []
        budget = 4 * limit + 1000
        while len(out) < limit and budget > 0:
            m = self._mutable[0] if self._mutable else None
            h = self._top_head()
            if h is not None and (m is None or h[0] < m):
                key = h[0]
                if unpack(key)[0] > now_ms:
                    break
                heapq.heappop(self._heads)
                self._advance(h[1])
            elif m is not None:
                key = m
                if unpack(key)[0] > now_ms:
                    break
                heapq.heappop(self._mutable)
                self._mutable_bytes -= sys.getsizeof(key) + 8
                if not self._mutable:
                    self._mutable_start = self._mutable_end = None
            else:
                break
            budget -= 1
            _, ledger_id, entry_id = unpack(key)
            pos = Position(ledger_id, entry_id)
            if not handled(pos):
                out.append(pos)
        return out

    def memory_bytes(self) -> int:
        """Rule 10: bytes the index holds in memory now (its arrays and keys, by their sizes)."""
        total = self._mutable_bytes + sys.getsizeof(self._mutable) + sys.getsizeof(self._heads)
        for b in self._buckets:
            total += _BUCKET_OVERHEAD
            if b.pending is not None:
                total += sum(r.nbytes for r in b.pending)
            elif b.head is not None:
                total += b.head.nbytes
        if self._merge is not None:
            sources, cutter, kept = self._merge
            total += cutter.pending.nbytes + sum(r.nbytes for r in kept)
            total += sum(s.run.nbytes for s in sources if s.run is not None)
        return total

    # ------------------------------------------------------------------ the mutable bucket

    def _add(self, pos: Position, ts: int) -> None:
        persistent = self.settings.persistent
        if persistent and self._mutable_end is not None:
            i = self._buckets.bisect_key_right(self._mutable_end)
            if i < len(self._buckets) and self._buckets[i].start < pos:
                self._seal()  # Rule 3: never across another bucket's range
        key = pack(ts, pos.ledger_id, pos.entry_id)
        heapq.heappush(self._mutable, key)
        self._mutable_bytes += sys.getsizeof(key) + 8
        if self._mutable_start is None:
            self._mutable_start = pos
        if self._mutable_end is None or pos > self._mutable_end:
            self._mutable_end = pos
        if persistent and len(self._mutable) >= self.settings.min_index_count and self._can_seal():
            self._seal()

    def _can_seal(self) -> bool:
        if any(b.state is BucketState.PERSISTING for b in self._buckets):
            return False
        limit = self.settings.max_num_buckets
        return limit <= 0 or len(self._buckets) < limit + MERGE_FAN_IN

    def _seal(self) -> None:
        """Rule 3: the mutable bucket becomes a PERSISTING bucket (the worker writes it)."""
        if not self._mutable:
            return
        assert self._mutable_start is not None and self._mutable_end is not None
        keys = sorted(self._mutable)
        self._mutable = []
        self._mutable_bytes = 0
        runs = list(cut_keys(keys, self.settings.cutter()))
        bucket = _Bucket(
            self._mutable_start,
            self._mutable_end,
            BucketState.PERSISTING,
            n_segments=len(runs),
            remaining=len(keys),
            pending=runs,
        )
        self._mutable_start = self._mutable_end = None
        self._install(bucket)
        self._set_head(bucket, runs[0], 0)
        bucket.next_segment = 1
        self._work.fire()

    def _maybe_seal(self) -> None:
        if self.settings.persistent and len(self._mutable) >= self.settings.min_index_count and self._can_seal():
            self._seal()

    # ------------------------------------------------------------------ buckets in memory

    def _install(self, bucket: _Bucket) -> None:
        self._buckets.add(bucket)
        self._live[bucket.seq] = bucket

    def _set_head(self, bucket: _Bucket, run: IndexRun, offset: int) -> None:
        bucket.head, bucket.offset = run, offset
        key = bucket.head_key()
        if key is not None:
            heapq.heappush(self._heads, (key, bucket.seq))

    def _top_head(self) -> tuple[int, int] | None:
        heads = self._heads
        while heads:
            key, seq = heads[0]
            b = self._live.get(seq)
            if b is not None and b.state in (BucketState.PERSISTING, BucketState.STORED) and b.head_key() == key:
                return key, seq
            heapq.heappop(heads)  # stale: the bucket moved on, merges or left
        return None

    def _advance(self, seq: int) -> None:
        b = self._live[seq]
        b.offset += 1
        b.remaining -= 1
        key = b.head_key()
        if key is not None:
            heapq.heappush(self._heads, (key, seq))
            return
        b.head = None
        if b.next_segment >= b.n_segments:
            self._retire(b, "delivered")
        elif b.pending is not None:  # not stored yet: its segments are all here
            run = b.pending[b.next_segment]
            b.next_segment += 1
            self._set_head(b, run, 0)
        else:
            self._work.fire()  # Rule 4: the worker loads the next segment

    def _retire(self, bucket: _Bucket, why: str) -> None:
        """Rule 7: out of the index now; its key and ledger go in the worker."""
        previous = bucket.state
        bucket.state = BucketState.DONE
        bucket.head = None
        bucket.pending = None
        self._buckets.discard(bucket)
        self._live.pop(bucket.seq, None)
        if previous is not BucketState.PERSISTING:  # a PERSISTING one's writer cleans up after itself
            self._doomed.append((bucket.key, bucket.ledger_id))
        log.debug("delayed index %s: bucket %s leaves the index (%s)", self.name, bucket.key, why)
        self._work.fire()

    def _notify(self) -> None:
        if self.listener is not None:
            self.listener()

    # ------------------------------------------------------------------ the worker

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Recover, then persist, load, trim, merge and delete buckets until cancelled (or the
        cursor is fenced or closed). Never raises for a storage failure (Rule 9)."""
        task_status.started()
        try:
            await self._retrying("recover", self._recover)
            self.state = IndexState.READY
            self._ready.set()
            self._notify()
            while True:
                wake = self._work.current()
                if not await self._step():
                    with trio.move_on_after(self._idle_check_s):
                        await wake.wait()
        except _Stop:
            pass
        finally:
            self.state = IndexState.CLOSED
            self._ready.set()  # a waiting dispatcher sees CLOSED

    async def _retrying(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Rule 9: ``await fn(*args)`` until it does not fail with a storage error."""
        while True:
            try:
                result = await fn(*args)
            except (ManagedLedgerFenced, ManagedLedgerClosed) as exc:
                log.info("delayed index %s: %s stopped: %s", self.name, what, exc)
                raise _Stop() from exc
            except ManagedLedgerError as exc:
                self.counters["failed"] += 1
                delay = self._backoff.next()
                log.warning("delayed index %s: %s failed (%s); retrying in %.1f s", self.name, what, exc, delay)
                await trio.sleep(delay)
                continue
            self._backoff.reset()
            return result

    async def _step(self) -> bool:
        """One unit of work; False when there was nothing to do."""
        if self._doomed:
            await self._retrying("delete", self._delete_doomed)
            return True
        for b in self._buckets:
            if b.state is BucketState.PERSISTING:
                await self._persist(b)
                return True
        for b in self._buckets:
            if b.needs_load:
                await self._retrying("load", self._load_next, b)
                return True
        acked = self._acked_up_to()
        trimmed = [b for b in self._buckets if b.end <= acked and b.state is not BucketState.MERGING]
        for b in trimmed:
            self._retire(b, "acknowledged")
        if trimmed:
            return True
        group = self._merge_group()
        if group:
            await self._retrying("merge", self._merge_buckets, group)
            return True
        before = len(self._buckets)
        self._maybe_seal()
        return len(self._buckets) != before

    async def _delete_doomed(self) -> None:
        doomed = list(self._doomed)
        keys = [k for k, _ in doomed if k is not None and k in self.store.properties()]
        if keys:
            await self.store.update_properties({}, keys)
        for key, ledger_id in doomed:
            if ledger_id is not None:
                try:
                    await self.store.delete(ledger_id)
                except SideLedgerMissing:
                    pass
                self.counters["delete"] += 1
            self._doomed.remove((key, ledger_id))

    async def _abandon(self, ledger_id: int) -> None:
        """Delete a ledger whose bucket will not be recorded: now (even when cancelled, for at most
        10 s), else by the worker later (Rule 9)."""
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            try:
                await self.store.delete(ledger_id)
                return
            except ManagedLedgerError as exc:
                log.warning(
                    "delayed index %s: cannot delete abandoned bucket ledger %d now: %s", self.name, ledger_id, exc
                )
        self._doomed.append((None, ledger_id))

    async def _write(self, runs: Sequence[IndexRun], start: Position, end: Position) -> int:
        writer = await self.store.create()
        try:
            for run in runs:
                await writer.add(encode_segment(run))
            await writer.add(encode_footer(BucketFooter(start, end, tuple(r.info() for r in runs))))
            await writer.close()
        except BaseException:
            await self._abandon(writer.ledger_id)
            raise
        return writer.ledger_id

    async def _persist(self, b: _Bucket) -> None:
        """Rule 5."""
        runs = b.pending
        assert runs is not None
        ledger_id = await self._retrying("create", self._write, runs, b.start, b.end)
        if b.state is not BucketState.PERSISTING:  # used up while being written
            await self._abandon(ledger_id)
            return
        try:
            await self._retrying("record", self.store.update_properties, {b.key: str(ledger_id)}, ())
        except BaseException:
            await self._abandon(ledger_id)
            raise
        self.counters["create"] += 1
        b.ledger_id = ledger_id
        if b.state is not BucketState.PERSISTING:  # used up while its key was being written
            self._doomed.append((b.key, ledger_id))
            return
        b.state = BucketState.STORED
        b.pending = None
        self._maybe_seal()
        self._notify()  # the mutable bucket may have room again (Rule 3)

    async def _load_next(self, b: _Bucket) -> None:
        """Rule 4: read the bucket's next segment as its head."""
        if not b.needs_load:
            return
        assert b.ledger_id is not None
        i = b.next_segment
        try:
            run = decode_segment(await self.store.read(b.ledger_id, i))
        except (SideLedgerMissing, DelayedIndexFormatError) as exc:
            log.error("delayed index %s: bucket %s (ledger %d) is lost: %s", self.name, b.key, b.ledger_id, exc)
            self._retire(b, "lost")
            return
        self.counters["load"] += 1
        if not b.needs_load or b.next_segment != i:
            return  # left or changed meanwhile
        b.next_segment = i + 1
        self._set_head(b, run, 0)
        self._notify()

    # ------------------------------------------------------------------ recovery (Rule 6)

    async def _recover(self) -> None:
        self._doomed = []  # a retried recovery starts over
        found: list[tuple[Position, Position, str, int]] = []
        bad: list[str] = []
        for key, value in self.store.properties().items():
            try:
                rng = parse_bucket_key(key)
                if rng is None:
                    continue
                found.append((rng[0], rng[1], key, int(value)))
            except ValueError as exc:
                log.error("delayed index %s: ignoring cursor property %s=%r: %s", self.name, key, value, exc)
                bad.append(key)
        found.sort()
        kept: list[tuple[Position, Position, str, int]] = []
        for item in found:
            if kept and item[0] <= kept[-1][1]:
                # Overlapping ranges (not written by this index; a copy or a hand edit): keep the
                # one that holds the other, else the earlier one.
                other = kept[-1]
                encloses = item[0] == other[0] and item[1] >= other[1]
                loser = other if encloses else item
                log.warning(
                    "delayed index %s: buckets %s and %s overlap; dropping %s", self.name, other[2], item[2], loser[2]
                )
                self._doomed.append((loser[2], loser[3]))
                if encloses:
                    kept[-1] = item
                continue
            kept.append(item)
        now = self._clock_ms()
        buckets = []
        for start, end, key, ledger_id in kept:
            try:
                last = await self.store.last_entry_id(ledger_id)
                footer = decode_footer(await self.store.read(ledger_id, last))
                if (footer.start, footer.end) != (start, end) or last != len(footer.segments):
                    raise DelayedIndexFormatError(
                        f"footer covers {footer.start}..{footer.end} in {len(footer.segments)} segments"
                    )
            except (SideLedgerMissing, DelayedIndexFormatError) as exc:
                log.error("delayed index %s: bucket %s (ledger %d) is lost: %s", self.name, key, ledger_id, exc)
                self._doomed.append((key, None))
                continue
            skip = 0
            while skip < len(footer.segments) and footer.segments[skip].max_ts <= now:
                skip += 1
            remaining = sum(s.count for s in footer.segments[skip:])
            bucket = _Bucket(
                start,
                end,
                BucketState.STORED,
                n_segments=len(footer.segments),
                remaining=remaining,
                ledger_id=ledger_id,
                next_segment=skip,
            )
            buckets.append(bucket)
        for key in bad:
            self._doomed.append((key, None))
        for bucket in buckets:
            self._install(bucket)
            if bucket.next_segment >= bucket.n_segments:
                self._retire(bucket, "due before the restart")
        log.info("delayed index %s: recovered %d buckets holding %d entries", self.name, len(self._buckets), self.count)

    # ------------------------------------------------------------------ merging (Rule 8)

    def _merge_group(self) -> list[_Bucket]:
        limit = self.settings.max_num_buckets
        stored = [b for b in self._buckets if b.state is BucketState.STORED]
        if limit <= 0 or len(stored) <= limit:
            return []
        buckets = list(self._buckets)
        footer_room = (self.settings.max_segment_bytes - 64) // 20
        for k in range(MERGE_FAN_IN, 1, -1):
            best: list[_Bucket] = []
            best_count = -1
            for i in range(len(buckets) - k + 1):
                window = buckets[i : i + k]
                if any(b.state is not BucketState.STORED for b in window):
                    continue
                if sum(b.n_segments - b.next_segment + 1 for b in window) > footer_room:
                    continue
                n = sum(b.remaining for b in window)
                if best_count < 0 or n < best_count:
                    best, best_count = window, n
            if best:
                return best
        return []

    async def _merge_buckets(self, group: list[_Bucket]) -> None:
        if any(b.state is not BucketState.STORED for b in group):
            return
        for b in group:
            b.state = BucketState.MERGING  # their heads leave the heap (Rule 8)
        sources = [_Source(self.store, b) for b in group]
        cutter = self.settings.cutter()
        kept: list[IndexRun] = []  # the merged bucket's first segment, its head afterwards
        infos = []
        total = 0
        writer: BucketWriter | None = None
        self._merge = (sources, cutter, kept)
        try:
            writer = await self.store.create()
            heap = []
            for i, s in enumerate(sources):
                k = await s.peek()
                if k is not None:
                    heap.append((k, i))
            heapq.heapify(heap)

            async def flush(run: IndexRun | None) -> None:
                nonlocal total
                if run is None:
                    return
                assert writer is not None
                await writer.add(encode_segment(run))
                infos.append(run.info())
                total += len(run)
                if not kept:
                    kept.append(run)

            while heap:
                k, i = heapq.heappop(heap)
                await flush(cutter.add(*unpack(k)))
                src = sources[i]
                src.offset += 1
                nk = await src.peek()
                if nk is not None:
                    heapq.heappush(heap, (nk, i))
            await flush(cutter.finish())
            start, end = group[0].start, group[-1].end
            await writer.add(encode_footer(BucketFooter(start, end, tuple(infos))))
            await writer.close()
            merged = _Bucket(
                start,
                end,
                BucketState.STORED,
                n_segments=len(infos),
                remaining=total,
                ledger_id=writer.ledger_id,
                next_segment=1,
            )
            await self.store.update_properties({merged.key: str(writer.ledger_id)}, [b.key for b in group])
        except BaseException:
            if writer is not None:
                await self._abandon(writer.ledger_id)
            for b in group:
                if b.state is BucketState.MERGING:
                    b.state = BucketState.STORED
                    key = b.head_key()
                    if key is not None:
                        heapq.heappush(self._heads, (key, b.seq))
            raise
        finally:
            self._merge = None
        self.counters["merge"] += 1
        for b in group:
            b.state = BucketState.DONE
            b.head = None
            self._buckets.discard(b)
            self._live.pop(b.seq, None)
            self._doomed.append((None, b.ledger_id))  # keys went with the merge's property write
        if total == 0:
            self._doomed.append((merged.key, merged.ledger_id))
        else:
            self._install(merged)
            self._set_head(merged, kept[0], 0)
        self._notify()
