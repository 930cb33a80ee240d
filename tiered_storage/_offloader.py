"""`LedgerOffloader`: copy one closed ledger to a tier, verify it, read it back by entry range,
delete it. `BlockOffloader` implements it over any `BlobStore` in the layout of ``_format``.

Object keys, as Pulsar's block-aware offloaders name them: ``{uid}-ledger-{ledgerId}`` (data) and
``{uid}-ledger-{ledgerId}-index``. The uid is chosen by the caller and recorded in the managed
ledger's metadata *before* anything is written, so whatever an interrupted offload left behind can
be found and deleted.

Offloading one ledger (`BlockOffloader.offload`):

1. read the entries from the source in runs, cut them into blocks, stream the blocks to the data
   object (one part buffered at a time) and finish it;
2. write the index;
3. **verify**: read the index back and compare it with the one written, then read every block
   back and check it against the index (header, CRC32C of the payload). Only a ledger that passed
   is reported offloaded; on any failure both objects are deleted and `OffloadError` says why.

Reads (`OffloadedLedger.read`) fetch only the blocks holding the wanted entries, consecutive
blocks in one ranged read of at most ``max_fetch`` bytes, verify each, and keep them in the shared
`BlockCache` (bounded in bytes).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar
from uuid import UUID

import trio

from ._errors import ObjectNotFound, OffloadError, TierError
from ._format import BlockBuilder, BlockRef, LedgerIndex, blocks_for_range, decode_blocks
from ._store import BlobStore
from .metrics import TieredStorageMetrics

__all__ = [
    "BlockCache",
    "BlockOffloader",
    "EntrySource",
    "LedgerOffloader",
    "OffloadedLedger",
    "OffloadResult",
    "data_key",
    "index_key",
]

_T = TypeVar("_T")
_SOURCE_BATCH_ENTRIES = 512
_SOURCE_BATCH_BYTES = 4 * 1024 * 1024


def data_key(uid: UUID, ledger_id: int) -> str:
    """The data object's key."""
    return f"{uid}-ledger-{ledger_id}"


def index_key(uid: UUID, ledger_id: int) -> str:
    """The index object's key."""
    return f"{uid}-ledger-{ledger_id}-index"


class EntrySource(Protocol):
    """The closed ledger to offload: its entries ``0 .. last_entry_id``."""

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        ...

    @property
    def last_entry_id(self) -> int:
        """Its last entry (-1 when empty)."""
        ...

    async def read(self, first: int, last: int) -> Sequence[bytes]:
        """Entries ``first .. last``, in order, all of them."""
        ...


@dataclass(frozen=True)
class OffloadResult:
    """What one verified offload wrote."""

    ledger_id: int
    uid: UUID
    entries: int
    ledger_bytes: int
    data_bytes: int
    index_bytes: int
    blocks: int
    seconds: float


class BlockCache:
    """Verified blocks read back from the tier, LRU, at most ``max_bytes`` (0 disables it)."""

    def __init__(self, max_bytes: int, metrics: TieredStorageMetrics | None = None) -> None:
        self.max_bytes = max_bytes
        self._metrics = metrics
        self._blocks: OrderedDict[tuple[UUID, int, int], tuple[int, list[tuple[int, bytes]]]] = OrderedDict()
        self.size = 0

    def get(self, uid: UUID, ledger_id: int, offset: int) -> list[tuple[int, bytes]] | None:
        """A cached block's entries, or None."""
        key = (uid, ledger_id, offset)
        hit = self._blocks.get(key)
        if hit is None:
            if self._metrics is not None:
                self._metrics.cache_misses.inc()
            return None
        self._blocks.move_to_end(key)
        if self._metrics is not None:
            self._metrics.cache_hits.inc()
        return hit[1]

    def put(self, uid: UUID, ledger_id: int, ref: BlockRef, entries: list[tuple[int, bytes]]) -> None:
        """Keep a block, evicting the least recently used over the bound."""
        if ref.length > self.max_bytes:
            return
        key = (uid, ledger_id, ref.offset)
        old = self._blocks.pop(key, None)
        if old is not None:
            self.size -= old[0]
        self._blocks[key] = (ref.length, entries)
        self.size += ref.length
        while self.size > self.max_bytes:
            _, (n, _e) = self._blocks.popitem(last=False)
            self.size -= n
        if self._metrics is not None:
            self._metrics.cache_size.set(self.size)

    def invalidate(self, uid: UUID, ledger_id: int) -> None:
        """Drop one offloaded ledger's blocks (it was deleted)."""
        for key in [k for k in self._blocks if k[0] == uid and k[1] == ledger_id]:
            self.size -= self._blocks.pop(key)[0]
        if self._metrics is not None:
            self._metrics.cache_size.set(self.size)


class OffloadedLedger:
    """An offloaded ledger open for reading (its index loaded and verified)."""

    def __init__(
        self,
        store: BlobStore,
        uid: UUID,
        index: LedgerIndex,
        cache: BlockCache,
        metrics: TieredStorageMetrics,
        namespace: str,
        max_fetch: int,
        limiter: trio.CapacityLimiter,
    ) -> None:
        self.uid = uid
        self.index = index
        self._store = store
        self._cache = cache
        self._metrics = metrics
        self._namespace = namespace
        self._max_fetch = max_fetch
        self._limiter = limiter

    @property
    def ledger_id(self) -> int:
        """The ledger's id."""
        return self.index.ledger_id

    @property
    def last_entry_id(self) -> int:
        """Its last entry."""
        return self.index.entry_count - 1

    async def read(self, first: int, last: int) -> list[tuple[int, bytes]]:
        """``(entry_id, bytes)`` of entries ``first .. last`` (clamped to the ledger's last entry),
        in order. Raises `TierError` (`OffloadFormatError` when a block fails its checks)."""
        index = self.index
        last = min(last, index.entry_count - 1)
        if first > last:
            return []
        i, j = blocks_for_range(index, first, last)
        out: list[tuple[int, bytes]] = []
        k = i
        while k < j:
            ref = index.blocks[k]
            cached = self._cache.get(self.uid, index.ledger_id, ref.offset)
            if cached is not None:
                out.extend(e for e in cached if first <= e[0] <= last)
                k += 1
                continue
            # a run of uncached blocks, fetched in one ranged read
            run = [ref]
            size = ref.length
            while k + len(run) < j:
                nxt = index.blocks[k + len(run)]
                if (
                    size + nxt.length > self._max_fetch
                    or self._cache.get(self.uid, index.ledger_id, nxt.offset) is not None
                ):
                    break
                run.append(nxt)
                size += nxt.length
            data = await self._fetch(run[0].offset, size)
            for r, entries in decode_blocks(data, run):
                self._cache.put(self.uid, index.ledger_id, r, entries)
                out.extend(e for e in entries if first <= e[0] <= last)
            k += len(run)
        return out

    async def _fetch(self, offset: int, length: int) -> bytes:
        started = time.perf_counter()
        try:
            async with self._limiter:
                data = await self._store.get_range(data_key(self.uid, self.index.ledger_id), offset, length)
        except TierError:
            self._metrics.read_offload_error.labels(self._namespace).inc()
            raise
        self._metrics.read_offload_data_latency.labels(self._namespace).observe((time.perf_counter() - started) * 1e6)
        self._metrics.record_read(self._namespace, length)
        return data


class LedgerOffloader(Protocol):
    """What the managed ledger needs of an offloader (`BlockOffloader` is the implementation for
    every driver). Every method raises `TierError` subclasses only (and cancellation)."""

    @property
    def driver_name(self) -> str:
        """The driver (``filesystem``, ``aws-s3``, ``S3``), recorded with each offloaded ledger."""
        ...

    @property
    def driver_metadata(self) -> Mapping[str, str]:
        """Where it writes (bucket, region, endpoint or directory), recorded with each offloaded
        ledger so it stays readable after the configuration changes."""
        ...

    @property
    def location(self) -> str:
        """Where it writes, for messages."""
        ...

    async def offload(
        self, source: EntrySource, uid: UUID, extra_metadata: Mapping[str, str], *, namespace: str = ""
    ) -> OffloadResult:
        """Copy, then verify, the whole ledger (see the module docstring); `OffloadError` on failure
        (nothing of ``uid`` is left in the tier then, as far as the store can be reached)."""
        ...

    async def open(self, ledger_id: int, uid: UUID, *, namespace: str = "") -> OffloadedLedger:
        """The offloaded ledger for reading; `ObjectNotFound` when it is not there."""
        ...

    async def delete(self, ledger_id: int, uid: UUID, *, namespace: str = "") -> None:
        """Remove both objects (absent ones are fine)."""
        ...


class BlockOffloader:
    """`LedgerOffloader` over a `BlobStore` (see the module docstring).

    ``block_size``: payload bytes per block (the read unit; Pulsar's read buffer size).
    ``offload_limiter``: ledgers offloaded at once (``managedLedgerOffloadMaxThreads``), which
    bounds the memory of buffered parts. ``read_limiter``: ranged reads in flight.
    """

    def __init__(
        self,
        store: BlobStore,
        driver_name: str,
        driver_metadata: Mapping[str, str],
        *,
        block_size: int,
        cache: BlockCache,
        metrics: TieredStorageMetrics,
        offload_limiter: trio.CapacityLimiter,
        read_limiter: trio.CapacityLimiter,
        max_fetch: int = 8 * 1024 * 1024,
    ) -> None:
        self.store = store
        self._driver_name = driver_name
        self._driver_metadata = dict(driver_metadata)
        self.block_size = block_size
        self._cache = cache
        self._metrics = metrics
        self._offload_limiter = offload_limiter
        self._read_limiter = read_limiter
        self._max_fetch = max(max_fetch, block_size)

    @property
    def driver_name(self) -> str:
        """See `LedgerOffloader`."""
        return self._driver_name

    @property
    def driver_metadata(self) -> Mapping[str, str]:
        """See `LedgerOffloader`."""
        return dict(self._driver_metadata)

    @property
    def location(self) -> str:
        """See `LedgerOffloader`."""
        return self.store.location

    async def offload(
        self, source: EntrySource, uid: UUID, extra_metadata: Mapping[str, str], *, namespace: str = ""
    ) -> OffloadResult:
        """See `LedgerOffloader.offload`."""
        lid = source.ledger_id
        started = time.monotonic()
        async with self._offload_limiter:
            try:
                index = await self._write(source, uid, extra_metadata, namespace)
                index_bytes = await self._verify(uid, index)
            except BaseException as exc:
                with trio.CancelScope(shield=True):
                    await self._delete_quietly(lid, uid)
                if isinstance(exc, TierError):
                    self._metrics.offload_error.labels(namespace).inc()
                    raise OffloadError(f"offload of ledger {lid} to {self.location} failed: {exc}") from exc
                if isinstance(exc, Exception):
                    self._metrics.offload_error.labels(namespace).inc()
                    raise OffloadError(f"offload of ledger {lid} failed while reading it: {exc}") from exc
                raise
        seconds = time.monotonic() - started
        self._metrics.offloaded_ledgers.labels(namespace).inc()
        self._metrics.offload_seconds.observe(seconds)
        return OffloadResult(
            lid, uid, index.entry_count, index.ledger_bytes, index.data_length, index_bytes, len(index.blocks), seconds
        )

    async def _write(
        self, source: EntrySource, uid: UUID, extra_metadata: Mapping[str, str], namespace: str
    ) -> LedgerIndex:
        lid = source.ledger_id
        builder = BlockBuilder(lid, self.block_size)
        upload = await self._storing(namespace, self.store.begin_upload(data_key(uid, lid)))
        try:
            first = 0
            batch = _SOURCE_BATCH_ENTRIES
            while first <= source.last_entry_id:
                last = min(source.last_entry_id, first + batch - 1)
                t0 = time.perf_counter()
                entries = await source.read(first, last)
                self._metrics.read_ledger_latency.labels(namespace).observe((time.perf_counter() - t0) * 1e6)
                if len(entries) != last - first + 1:
                    raise OffloadError(f"ledger {lid}: read {len(entries)} entries of {first}..{last}")
                out = bytearray()
                nbytes = 0
                for i, data in enumerate(entries):
                    out += builder.add(first + i, data)
                    nbytes += len(data)
                if out:
                    await self._storing(namespace, upload.write(bytes(out)))
                self._metrics.record_offloaded(namespace, nbytes)
                # keep a batch near _SOURCE_BATCH_BYTES whatever the entry size
                avg = max(1, nbytes // max(1, len(entries)))
                batch = max(1, min(_SOURCE_BATCH_ENTRIES, _SOURCE_BATCH_BYTES // avg))
                first = last + 1
            meta = {k: v.encode() for k, v in extra_metadata.items()}
            tail, index = builder.finish(meta)
            if tail:
                await self._storing(namespace, upload.write(tail))
            await self._storing(namespace, upload.complete())
        except BaseException:
            with trio.CancelScope(shield=True):
                await upload.abort()
            raise
        await self._storing(namespace, self.store.put(index_key(uid, lid), index.encode()))
        return index

    async def _storing(self, namespace: str, op: Awaitable[_T]) -> _T:
        try:
            return await op
        except TierError:
            self._metrics.write_storage_error.labels(namespace).inc()
            raise

    async def _verify(self, uid: UUID, written: LedgerIndex) -> int:
        lid = written.ledger_id
        raw = await self.store.get(index_key(uid, lid))
        if LedgerIndex.decode(raw) != written:
            raise OffloadError(f"ledger {lid}: the index read back differs from the one written")
        size = await self.store.size(data_key(uid, lid))
        if size != written.data_length:
            raise OffloadError(f"ledger {lid}: the data object has {size} bytes, {written.data_length} were written")
        blocks = written.blocks
        k = 0
        while k < len(blocks):
            run = [blocks[k]]
            total = blocks[k].length
            while k + len(run) < len(blocks) and total + blocks[k + len(run)].length <= self._max_fetch:
                total += blocks[k + len(run)].length
                run.append(blocks[k + len(run)])
            data = await self.store.get_range(data_key(uid, lid), run[0].offset, total)
            for _ref, _entries in decode_blocks(data, run):
                pass  # decoding checks every header and payload CRC against the index
            k += len(run)
        return len(raw)

    async def open(self, ledger_id: int, uid: UUID, *, namespace: str = "") -> OffloadedLedger:
        """See `LedgerOffloader.open`."""
        started = time.perf_counter()
        try:
            async with self._read_limiter:
                index = LedgerIndex.decode(await self.store.get(index_key(uid, ledger_id)))
        except TierError:
            self._metrics.read_offload_error.labels(namespace).inc()
            raise
        if index.ledger_id != ledger_id:
            raise OffloadError(f"{index_key(uid, ledger_id)} indexes ledger {index.ledger_id}")
        self._metrics.read_offload_index_latency.labels(namespace).observe((time.perf_counter() - started) * 1e6)
        return OffloadedLedger(
            self.store, uid, index, self._cache, self._metrics, namespace, self._max_fetch, self._read_limiter
        )

    async def delete(self, ledger_id: int, uid: UUID, *, namespace: str = "") -> None:
        """See `LedgerOffloader.delete`."""
        self._cache.invalidate(uid, ledger_id)
        try:
            await self.store.delete(index_key(uid, ledger_id))
            await self.store.delete(data_key(uid, ledger_id))
        except TierError:
            self._metrics.delete_offload_ops.labels(namespace, "failed").inc()
            raise
        self._metrics.delete_offload_ops.labels(namespace, "succeed").inc()

    async def _delete_quietly(self, ledger_id: int, uid: UUID) -> None:
        for key in (index_key(uid, ledger_id), data_key(uid, ledger_id)):
            try:
                await self.store.delete(key)
            except (ObjectNotFound, TierError):
                pass  # the uid is recorded: the next attempt or retention deletes it
