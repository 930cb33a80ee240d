"""The bookie's ledger storage: write cache -> entry logs + index, read cache, checkpoint flush.

`LedgerStorage` states the contract the bookie server relies on; `DbLedgerStorage` implements
it after BookKeeper's DbLedgerStorage (double-buffered write cache, read cache with read-ahead,
interleaved entry logs, a durable index).

Checkpoint hook. The server passes a `CheckpointSource` (the journal). A flush then runs:

    1. (retry) if a previous flush failed, write its FLUSHING half first;
    2. ``mark = source.new_checkpoint()``     -- captured BEFORE the swap, so every entry journaled
                                                  before the mark is already in the write cache;
    3. swap the write-cache halves and take the changed ledger states;
    4. write the half sorted by (ledger, entry) into entry logs, sync the logs;
    5. update the index (locations + ledger states) in one synced transaction;
    6. drop the FLUSHING half;
    7. ``await source.checkpoint_complete(mark)`` -- persist LastLogMark only now.

Any disk error in 4-5 raises `StorageIOError`, leaves the entries in the cache (readable, written
again by the next flush) and does not complete the checkpoint.

Pacing. Journal and entry logs usually share a device, and every journal fdatasync waits for the
entry-log bytes the device took before it. Step 4 of a checkpoint of the flush loop (on its timer,
``PERIODIC``, or because the active half filled, ``CACHE_FULL``) therefore writes its half in
`PACE_STEP` pieces, each synced, spread over ``flush_pace_fraction`` of the time the half took to
fill (at most the flush interval): at the rate the half filled, times 1 / fraction. So each journal
sync meets at most one piece instead of a whole checkpoint's writeback (bench/flush_entrylog_bench.py:
add p99 26-29 ms -> 3-5 ms at 12 MB/s), and the new active half, filling at the same rate, is at
most that fraction full when the checkpoint ends. A checkpoint that is wanted sooner writes the
rest at full speed, in one write and one sync per log as unpaced: the active half filled (the rate
went up), another task waits for the write lock (an explicit flush, a ledger deletion, GC,
shutdown). Other flushes are never paced. Entries stay readable from the FLUSHING half throughout,
and the checkpoint completes only after the last piece.

Rolling early (GC). `DbLedgerStorage.roll_entry_logs` rolls chosen current entry logs through
the entry logger's own roll (ledgers map, header, sync) while holding the write lock, i.e.
between flushes: every record in those logs was synced and indexed by the flush that wrote it,
and the LastLogMark only ever moves after that, so the roll changes no location and no journal
position; a crash during it leaves a log without its map, which GC measures by a scan. GC asks
for it when a current log's data is mostly dead or the log is old (`bookie.gc._gc`), after a
forced run's flush (`FlushReason.GC`) so that the decision sees every entry the cache held.

Full disk. Before step 4 the storage asks its `SpaceGuard` (`bookie._space`): a flush that would
take a ledger directory past diskUsageThreshold reports it (the bookie turns read-only at once)
and still runs; one that cannot fit in the free space at all fails at once with ENOSPC, before
any file is touched. A failed write never leaves an empty entry log behind (`bookie.storage._entry_log`
rule 6) and never touches the index, so retrying on a full disk costs one ``statvfs`` per attempt.
The flush loop retries a failed flush after 1 s, then backs off (doubling, at most the flush
interval); the owner may also call `flush` as soon as space is back.
"""

from __future__ import annotations

import enum
import errno
import logging
import math
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import trio
from prometheus_client import CollectorRegistry

from magnetar.common.backoff import Backoff
from protocols.bookkeeper import NoSuchEntry, NoSuchLedger

from .._io_priority import SyncPriority
from .._space import DiskUsage, SpaceGuard
from ..metrics import StorageMetrics
from ._entry_log import CurrentLogInfo, EntryLogger, EntryLogStats, FileOps, StorageIOError
from ._entry_log_codec import RECORD_PREFIX_SIZE, CorruptLogError
from ._index import EntryIndex, IndexStats, LedgerInfo
from ._read_cache import InOrderReaders, ReadAhead, ReadAheadStats, ReadCache, ReadCacheStats
from ._write_cache import FlushBatch, WriteCache, WriteCacheFull, WriteCacheStats

__all__ = [
    "LedgerStorage",
    "DbLedgerStorage",
    "CheckpointSource",
    "FlushReason",
    "StorageStats",
    "StorageIOError",
    "WriteCacheFull",
]

log = logging.getLogger(__name__)

_FLUSH_MARGIN = 64 * 1024  # free space a flush leaves for ledgers maps, lastId and the index
_RETRY_MIN_S = 1.0
_RETRY_MAX_S = 60.0
PACE_STEP = 1 << 20
"""Bytes a paced checkpoint writes and syncs at a time (module docstring, "Pacing")."""


class CheckpointSource(Protocol):
    """The journal's side of a checkpoint (see the module docstring for the order)."""

    def new_checkpoint(self) -> Any:
        """Capture the journal's current position (LastLogMark candidate). Must not block."""

    async def checkpoint_complete(self, checkpoint: Any) -> None:
        """Persist ``checkpoint`` as LastLogMark: everything journaled before it is in storage."""


class FlushReason(enum.Enum):
    """What triggered a flush (each has its own ``bookie_flush_reason`` counter)."""

    PERIODIC = "periodic"
    CACHE_FULL = "cache_full"
    EXPLICIT = "explicit"
    RETRY = "retry"  # the flush loop trying again after a failed flush
    GC = "gc"  # a forced GC run, before it decides which current logs to roll


class LedgerStorage(Protocol):
    """Contract of the bookie's ledger storage. `NoSuchLedger` and `NoSuchEntry` are the wire-level
    errors of ``protocols.bookkeeper`` (the bookie answers them with ENOLEDGER / ENOENTRY).

    Entries:
    * ``await add_entry(ledger_id, entry_id, data)`` buffers an entry (any order of entry ids; the
      same id again replaces it). It is durable only after the next `flush`; the journal covers it
      until then. Waits at most the throttle time when the cache is full, then raises `WriteCacheFull`.
    * ``await get_entry(ledger_id, entry_id)`` returns the bytes added; entry_id -1 means the
      ledger's last entry. Raises `NoSuchLedger` for an unknown ledger, `NoSuchEntry` for a missing
      entry, `StorageIOError` when the disk read fails.
    * ``last_entry_id(ledger_id)`` is the highest entry id stored (-1 if none); `NoSuchLedger`.

    Ledger state (kept in memory, written to the index at every flush; the journal replays changes
    made after the last checkpoint): ``set_master_key``/``master_key``, ``set_fenced`` (returns
    whether it was already fenced)/``is_fenced``, ``set_explicit_lac``/``explicit_lac``,
    ``ledger_exists``. Setters create the ledger; getters raise `NoSuchLedger`.

    ``await delete_ledger(ledger_id)`` (GC) removes the ledger from index and caches; its space comes
    back when GC removes or compacts the entry logs.

    ``await flush()`` is the checkpoint's storage part (module docstring); a periodic flush and a
    flush when the write cache fills run inside ``await run(task_status=...)``.
    """

    async def add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> None: ...
    async def get_entry(
        self, ledger_id: int, entry_id: int, *, limiter: trio.CapacityLimiter | None = None
    ) -> bytes: ...
    def last_entry_id(self, ledger_id: int) -> int: ...
    def set_master_key(self, ledger_id: int, master_key: bytes) -> None: ...
    def master_key(self, ledger_id: int) -> bytes: ...
    def set_fenced(self, ledger_id: int) -> bool: ...
    def is_fenced(self, ledger_id: int) -> bool: ...
    def set_explicit_lac(self, ledger_id: int, lac: bytes) -> None: ...
    def explicit_lac(self, ledger_id: int) -> bytes | None: ...
    def ledger_exists(self, ledger_id: int) -> bool: ...
    async def delete_ledger(self, ledger_id: int) -> None: ...
    async def flush(self) -> None: ...
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...


@dataclass(frozen=True, slots=True)
class StorageStats:
    """Snapshot of the whole storage."""

    ledgers: int
    flushes: int
    flush_failures: int
    write_cache: WriteCacheStats
    read_cache: ReadCacheStats
    read_ahead: ReadAheadStats
    entry_logs: EntryLogStats
    index: IndexStats


class DbLedgerStorage:
    """`LedgerStorage` over entry logs in ``ledger_dirs`` and an sqlite index.

    Parameters map to BookKeeper config keys: ``log_size_limit`` (logSizeLimit),
    ``write_cache_max_bytes`` (dbStorage_writeCacheMaxSizeMb), ``read_cache_max_bytes``
    (dbStorage_readAheadCacheMaxSizeMb), ``read_ahead_batch_size``
    (dbStorage_readAheadCacheBatchSize), ``max_throttle_time_ms`` (dbStorage_maxThrottleTimeMs),
    ``flush_interval_ms`` (flushInterval). ``flush_pace_fraction`` spreads the flush loop's
    checkpoints over that fraction of the time their half took to fill (module docstring,
    "Pacing"; 0: at once, as BookKeeper). ``index_path`` defaults to ``ledger_dirs[0]/index.sqlite``.
    ``on_flush_error`` is called by the background flush loop with each `StorageIOError` (the server
    turns read-only). ``file_ops`` injects entry-log write failures in tests. ``space_guard`` checks
    every flush against the free space first (module docstring, "Full disk").

    The constructor opens files (blocking): in async code use ``await DbLedgerStorage.open(...)``.
    Close with `aclose` (it does not flush: flush first for a clean shutdown).
    """

    def __init__(
        self,
        ledger_dirs: Sequence[str | os.PathLike[str]],
        *,
        log_size_limit: int = 1 << 30,
        write_cache_max_bytes: int = 64 << 20,
        read_cache_max_bytes: int = 64 << 20,
        read_ahead_batch_size: int = 100,
        read_ahead_max_bytes: int | None = None,
        max_throttle_time_ms: float = 10_000,
        flush_interval_ms: float = 60_000,
        checkpoint_source: CheckpointSource | None = None,
        on_flush_error: Callable[[StorageIOError], None] | None = None,
        index_path: str | os.PathLike[str] | None = None,
        registry: CollectorRegistry | None = None,
        file_ops: FileOps | None = None,
        space_guard: SpaceGuard | None = None,
        flush_entrylog_bytes: int = 0,
        entry_log_per_ledger: bool = False,
        max_active_entry_logs: int = 500,
        flush_pace_fraction: float = 0.0,
    ) -> None:
        if not 0.0 <= flush_pace_fraction <= 1.0:
            raise ValueError(f"flush_pace_fraction must be in [0, 1], got {flush_pace_fraction}")
        self._guard = space_guard
        self._logger = EntryLogger(
            ledger_dirs,
            log_size_limit=log_size_limit,
            file_ops=file_ops,
            flush_entrylog_bytes=flush_entrylog_bytes,
            per_ledger=entry_log_per_ledger,
            max_active_logs=max_active_entry_logs,
        )
        self._index = EntryIndex(index_path or Path(ledger_dirs[0]) / "index.sqlite")
        self._wc = WriteCache(write_cache_max_bytes, max_throttle_time_ms=max_throttle_time_ms)
        self._rc = ReadCache(read_cache_max_bytes)
        if read_ahead_max_bytes is None:
            read_ahead_max_bytes = min(read_cache_max_bytes // 4, 4 << 20)
        self._ra = ReadAhead(
            self._rc,
            self._logger.read_following,
            batch_size=read_ahead_batch_size,
            max_bytes=read_ahead_max_bytes,
            on_batch=self._on_read_ahead,
        )
        self._in_order = InOrderReaders(2 * read_ahead_batch_size + 1)
        self._flush_interval_s = flush_interval_ms / 1000 if flush_interval_ms > 0 else math.inf
        self._pace_fraction = flush_pace_fraction
        self._last_swap: float | None = None  # trio time of the last swap (None: none yet)
        self._source = checkpoint_source
        self._on_flush_error = on_flush_error
        self._ledgers: dict[int, LedgerInfo] = self._index.load_ledgers()
        self._dirty: set[int] = set()
        self._flush_lock = trio.Lock()
        self._hurry = trio.Event()  # set: the paced checkpoint in progress goes at full speed
        self.sync_priority = SyncPriority()
        """Shared with the journal by the bookie: compaction yields its syncs to the journal's."""
        self._flushes = self._flush_failures = 0
        self.metrics = StorageMetrics(registry)
        self.metrics.bind(
            write_cache_size=lambda: self._wc.statistics().size_bytes,
            write_cache_count=lambda: self._wc.statistics().count,
            read_cache_size=lambda: self._rc.statistics().size_bytes,
            read_cache_count=lambda: self._rc.statistics().count,
            entry_log_count=lambda: self._logger.statistics().log_count,
        )

    def _on_read_ahead(self, entries: int, nbytes: int) -> None:
        self.metrics.readahead_batch_count.inc(entries)
        self.metrics.readahead_batch_size.inc(nbytes)

    @classmethod
    async def open(cls, ledger_dirs: Sequence[str | os.PathLike[str]], **kwargs: Any) -> DbLedgerStorage:
        """Construct in a worker thread (opening files and the index blocks)."""
        return await trio.to_thread.run_sync(lambda: cls(ledger_dirs, **kwargs))

    async def aclose(self) -> None:
        """Roll the entry logs (writing their ledgers maps) and close the index. Unflushed entries are
        not written (the journal still holds them)."""
        async with self._write_locked():
            try:
                await trio.to_thread.run_sync(self._logger.close)
            finally:
                await trio.to_thread.run_sync(self._index.close)

    # ------------------------------------------------------------------ components (for GC, server)

    @property
    def entry_logger(self) -> EntryLogger:
        """The entry logs (GC lists, measures, scans and removes logs through it)."""
        return self._logger

    @property
    def index(self) -> EntryIndex:
        """The location and ledger index (compaction updates locations through it)."""
        return self._index

    @property
    def write_lock(self) -> AbstractAsyncContextManager[None]:
        """The lock every flush and ledger deletion holds (``async with storage.write_lock:``; a
        paced checkpoint holding it goes at full speed once asked). GC holds it while it lists the
        logs it may compact (so no flush has records in them left to index) and while compaction
        appends, syncs and re-indexes a chunk (so a checkpoint never interleaves with it on the
        current log). Reads never take it."""
        return self._write_locked()

    async def roll_entry_logs(self, choose: Callable[[list[CurrentLogInfo]], dict[int, str]]) -> dict[int, str]:
        """Roll the current entry logs that ``choose`` picks (module docstring, "Rolling early").

        ``choose`` gets the current logs holding records and returns ``{log_id: reason}``; it runs
        on the event loop while the write lock is held, so what it saw is what is rolled. Returns
        the logs rolled with their reasons. Raises `StorageIOError` if a roll fails (that log is
        abandoned as after any failed write; its synced records stay readable)."""
        async with self._write_locked():
            logs = await trio.to_thread.run_sync(self._logger.current_logs)
            chosen = choose(logs) if logs else {}
            if not chosen:
                return {}
            rolled = await trio.to_thread.run_sync(self._logger.roll_current, list(chosen))
        return {log_id: chosen[log_id] for log_id in rolled}

    # ------------------------------------------------------------------ entries

    def try_add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """`add_entry` without waiting (the add path's common case): False when the write cache has
        no room now; nothing changed then, and `add_entry` waits for room."""
        if type(data) is not bytes:
            data = bytes(data)
        if ledger_id not in self._ledgers:
            self._ledgers[ledger_id] = LedgerInfo()
            self._dirty.add(ledger_id)
        return self._wc.try_add(ledger_id, entry_id, data)

    async def add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        """See `LedgerStorage`. Raises `WriteCacheFull` after the throttle time."""
        if type(data) is not bytes:
            data = bytes(data)
        if ledger_id not in self._ledgers:
            self._ledgers[ledger_id] = LedgerInfo()
            self._dirty.add(ledger_id)
        if self._wc.try_add(ledger_id, entry_id, data):
            return
        self.metrics.throttled_write.inc()
        try:
            await self._wc.add(ledger_id, entry_id, data)
        except WriteCacheFull:
            self.metrics.rejected_write_requests.inc()
            raise

    def hold_entry(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        """Keep an entry in the write cache past its bound: for a journal replay whose flush failed
        (a full disk); the journal holds the entry too (`bookie.storage._write_cache` rule 6)."""
        if type(data) is not bytes:
            data = bytes(data)
        if ledger_id not in self._ledgers:
            self._ledgers[ledger_id] = LedgerInfo()
            self._dirty.add(ledger_id)
        self._wc.hold(ledger_id, entry_id, data)

    async def get_entry(self, ledger_id: int, entry_id: int, *, limiter: trio.CapacityLimiter | None = None) -> bytes:
        """See `LedgerStorage`: write cache, then read cache, then the entry log (with read-ahead).
        A disk read runs in a worker thread under ``limiter`` (trio's default one when None), so a
        caller may keep a class of reads from queueing behind another."""
        info = self._ledgers.get(ledger_id)
        if info is None:
            raise NoSuchLedger(ledger_id)
        if entry_id == -1:
            entry_id = max(self._wc.last_entry(ledger_id), info.last_entry)
            if entry_id < 0:
                raise NoSuchEntry(ledger_id, -1)
        data = self._wc.get(ledger_id, entry_id)
        if data is not None:
            self.metrics.write_cache_hits.inc()
            return data
        self.metrics.write_cache_misses.inc()
        data = self._rc.get(ledger_id, entry_id)
        if data is None and await self._ra.wait_pending(ledger_id, entry_id):
            data = self._rc.get(ledger_id, entry_id, count=False)
        if data is not None:
            self.metrics.read_cache_hits.inc()
            return data
        self.metrics.read_cache_misses.inc()
        found = await trio.to_thread.run_sync(self._read_from_disk, ledger_id, entry_id, limiter=limiter)
        if found is None:
            raise NoSuchEntry(ledger_id, entry_id)
        data, location = found
        self._rc.put(ledger_id, entry_id, data)
        # read ahead only for a reader going through the ledger in order: random reads would
        # otherwise pull a batch from disk per miss for nothing
        if self._in_order.miss(ledger_id, entry_id):
            self._ra.request(ledger_id, entry_id + 1, location + RECORD_PREFIX_SIZE + len(data), len(data))
        return data

    def _read_from_disk(self, ledger_id: int, entry_id: int) -> tuple[bytes, int] | None:
        for attempt in range(2):
            try:
                location = self._index.get_location(ledger_id, entry_id)
                if location is None:
                    return None
                return self._logger.read(location, ledger_id, entry_id), location
            except FileNotFoundError as exc:
                if attempt:  # compaction moved it between lookup and read: look it up again once
                    raise StorageIOError(f"entry ({ledger_id}, {entry_id}) points at a missing entry log") from exc
            except (OSError, sqlite3.Error, CorruptLogError) as exc:
                raise StorageIOError(
                    f"reading entry ({ledger_id}, {entry_id}) failed: {exc}", getattr(exc, "errno", None)
                ) from exc
        return None  # pragma: no cover

    def last_entry_id(self, ledger_id: int) -> int:
        """See `LedgerStorage`."""
        info = self._info(ledger_id)
        return max(self._wc.last_entry(ledger_id), info.last_entry)

    # ------------------------------------------------------------------ ledger state

    def _info(self, ledger_id: int) -> LedgerInfo:
        info = self._ledgers.get(ledger_id)
        if info is None:
            raise NoSuchLedger(ledger_id)
        return info

    def _update(self, ledger_id: int, **changes: Any) -> LedgerInfo:
        old = self._ledgers.get(ledger_id) or LedgerInfo()
        self._ledgers[ledger_id] = replace(old, **changes)
        self._dirty.add(ledger_id)
        return old

    def ledger_exists(self, ledger_id: int) -> bool:
        """Whether the storage knows the ledger (entries added or state set, not deleted)."""
        return ledger_id in self._ledgers

    def set_master_key(self, ledger_id: int, master_key: bytes) -> None:
        """Store the ledger's master key (creating the ledger); the server checks keys on access."""
        self._update(ledger_id, master_key=bytes(master_key))

    def master_key(self, ledger_id: int) -> bytes:
        """The ledger's master key (b"" if never set); raises `NoSuchLedger`."""
        return self._info(ledger_id).master_key

    def set_fenced(self, ledger_id: int) -> bool:
        """Fence the ledger (creating it); returns True if it was already fenced."""
        info = self._ledgers.get(ledger_id)
        if info is not None and info.fenced:
            return True
        self._update(ledger_id, fenced=True)
        return False

    def is_fenced(self, ledger_id: int) -> bool:
        """Whether the ledger is fenced; raises `NoSuchLedger`."""
        return self._info(ledger_id).fenced

    def set_explicit_lac(self, ledger_id: int, lac: bytes) -> None:
        """Store the explicit LAC bytes sent by the client (creating the ledger)."""
        self._update(ledger_id, explicit_lac=bytes(lac))

    def explicit_lac(self, ledger_id: int) -> bytes | None:
        """The explicit LAC bytes, None if never set; raises `NoSuchLedger`."""
        return self._info(ledger_id).explicit_lac

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove a ledger from caches and index (GC). Waits for a running flush; idempotent.

        Raises `StorageIOError` if the index update fails (the ledger is gone from memory anyway
        and a later call retries the index)."""
        async with self._write_locked():
            self._wc.delete_ledger(ledger_id)
            self._rc.delete_ledger(ledger_id)
            self._ledgers.pop(ledger_id, None)
            self._dirty.discard(ledger_id)
            try:
                await trio.to_thread.run_sync(self._index.delete_ledger, ledger_id)
            except sqlite3.Error as exc:
                raise StorageIOError(f"deleting ledger {ledger_id} from the index failed: {exc}") from exc

    def ledgers(self) -> list[int]:
        """Ids of every known ledger, ascending (GC compares them with the metadata store)."""
        return sorted(self._ledgers)

    # ------------------------------------------------------------------ flush / checkpoint

    async def flush(self, reason: FlushReason = FlushReason.EXPLICIT) -> None:
        """The checkpoint's storage part, in the order of the module docstring.

        Raises `StorageIOError` on a disk error; the entries then stay cached and readable and the
        checkpoint is not completed. Concurrent calls run one after the other.
        """
        async with self._write_locked():
            start = trio.current_time()
            self.metrics.flush_reason.labels(reason.value).inc()
            try:
                if self._wc.flush_pending:
                    await self._write_batch(self._wc.pending_batch(), {})
                    await _free_in_thread(self._wc.complete_flush())
                checkpoint = self._source.new_checkpoint() if self._source is not None else None
                batch = self._wc.swap()
                pace_s = self._pace_for(reason)
                dirty = {lid: self._ledgers[lid] for lid in self._dirty if lid in self._ledgers}
                self._dirty = set()
                try:
                    await self._write_batch(batch, dirty, pace_s)
                except BaseException:
                    self._dirty.update(dirty)
                    raise
                await _free_in_thread(self._wc.complete_flush())
            except StorageIOError:
                self._flush_failures += 1
                self.metrics.flush_errors.inc()
                raise
            self._flushes += 1
            self.metrics.flush.observe(trio.current_time() - start)
            self.metrics.flush_size.observe(batch.size)
            if checkpoint is not None:
                await self._source.checkpoint_complete(checkpoint)  # type: ignore[union-attr]

    def _pace_for(self, reason: FlushReason) -> float:
        """Seconds to spread this checkpoint's writes over (module docstring, "Pacing"), called at
        its swap: 0 unless the flush loop started it."""
        now = trio.current_time()
        filled_in = self._flush_interval_s if self._last_swap is None else now - self._last_swap
        self._last_swap = now
        if reason not in (FlushReason.PERIODIC, FlushReason.CACHE_FULL) or math.isinf(self._flush_interval_s):
            return 0.0
        return self._pace_fraction * min(filled_in, self._flush_interval_s)

    async def _check_space(self, batch: FlushBatch) -> None:
        """The full-disk check before a flush writes (module docstring); raises StorageIOError
        (ENOSPC) when the batch cannot fit."""
        guard = self._guard
        if guard is None or not len(batch):
            return
        dirs = self._logger.directories

        def plan() -> list[tuple[Path, int, DiskUsage | None]]:
            need = batch.bytes_by_directory(len(dirs), RECORD_PREFIX_SIZE)
            return [(d, n, guard.usage(d)) for d, n in zip(dirs, need, strict=True) if n]

        for directory, needed, usage in await trio.to_thread.run_sync(plan):
            if usage is None:
                continue
            if usage.headroom(guard.threshold) < needed:
                guard.report_full(directory, needed, usage, "a write-cache flush")
            if usage.free < needed + _FLUSH_MARGIN:
                self.metrics.flush_no_space.inc()
                raise StorageIOError(
                    f"flush of {needed} bytes into {directory} refused: only {usage.free} bytes free", errno.ENOSPC
                )

    async def _write_batch(self, batch: FlushBatch, ledger_rows: dict[int, LedgerInfo], pace_s: float = 0.0) -> None:
        await self._check_space(batch)
        t0 = trio.current_time()
        try:
            if pace_s > 0 and batch.size > PACE_STEP:
                rows, lasts = await self._write_logs_paced(batch, pace_s)
            else:
                rows, lasts = await trio.to_thread.run_sync(self._write_logs, batch)
        except OSError as exc:
            raise StorageIOError(f"flush to entry logs failed: {exc}", exc.errno) from exc
        t1 = trio.current_time()
        self.metrics.flush_entrylog.observe(t1 - t0)
        for ledger_id, last in lasts.items():
            info = self._ledgers.get(ledger_id)
            if info is None:
                continue
            if last > info.last_entry:
                info = self._ledgers[ledger_id] = replace(info, last_entry=last)
            ledger_rows[ledger_id] = info
        try:
            await trio.to_thread.run_sync(self._put_rows, rows, ledger_rows)
        except BaseException as exc:
            self._dirty.update(ledger_rows)
            if isinstance(exc, sqlite3.Error):
                raise StorageIOError(f"index update failed: {exc}") from exc
            raise
        self.metrics.flush_locations_index.observe(trio.current_time() - t1)

    def _put_rows(self, rows: list[tuple[int, int, int]], ledger_rows: dict[int, LedgerInfo]) -> None:
        """Worker thread: the index update, then free the rows here rather than on the loop."""
        self._index.put_batch(rows, ledger_rows)
        rows.clear()

    def _write_logs(self, batch: FlushBatch) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
        """Worker thread: sort, append, sync; returns index rows and the last entry per ledger."""
        entries = batch.sorted_entries()
        if not entries:
            return [], {}
        return _rows_and_lasts(entries, self._append_synced(entries))

    async def _write_logs_paced(
        self, batch: FlushBatch, pace_s: float
    ) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
        """`_write_logs` in synced `PACE_STEP` pieces spread over ``pace_s`` (module docstring,
        "Pacing"): piece k is not started before ``k / pieces`` of ``pace_s`` has passed, unless
        the checkpoint is wanted sooner (``_hurry``). Each piece is one worker-thread call; the
        wait between them is on the loop."""
        entries, bounds = await trio.to_thread.run_sync(_sorted_in_pieces, batch)
        locations: list[int] = []
        start = trio.current_time()
        for k, (i, j) in enumerate(bounds):
            if self._flush_lock.statistics().tasks_waiting:
                self._hurry.set()  # queued before this holder took the lock (its signal was fresh)
            if k and not self._hurry.is_set():
                await self._until_due_or_hurried(start + pace_s * k / len(bounds))
            if self._hurry.is_set():
                # full speed means one sync for the rest, as unpaced: a sync per piece cost about
                # 10 % of the max-rate throughput (bench/RESULTS.md, "Paced checkpoints at the
                # broker's max rate")
                locations += await trio.to_thread.run_sync(self._append_synced, entries[i:])
                break
            locations += await trio.to_thread.run_sync(self._append_synced, entries[i:j])
        return await trio.to_thread.run_sync(_rows_and_lasts, entries, locations)

    async def _until_due_or_hurried(self, due: float) -> None:
        """Wait until ``due`` (trio time), or until the checkpoint is wanted sooner: the active
        half filled, or another task asked for the write lock (`_write_locked` sets ``_hurry``)."""
        hurry = self._hurry
        with trio.move_on_at(due):
            async with trio.open_nursery() as nursery:

                async def cache_filled() -> None:
                    await self._wc.wait_flush_wanted()
                    hurry.set()

                nursery.start_soon(cache_filled)
                await hurry.wait()
                nursery.cancel_scope.cancel()

    def _append_synced(self, entries: list[tuple[int, int, bytes]]) -> list[int]:
        """Worker thread: append ``entries`` and sync the logs; their locations."""
        locations = self._logger.append(entries)
        self._logger.sync()
        return locations

    @asynccontextmanager
    async def _write_locked(self) -> AsyncIterator[None]:
        """Hold the write lock; a paced checkpoint holding it now finishes at full speed."""
        if self._flush_lock.locked():
            self._hurry.set()
        async with self._flush_lock:
            # a fresh signal per holder: one set for an earlier holder must not hurry this one;
            # tasks already queued are seen by the paced writer itself (`_write_logs_paced`)
            self._hurry = trio.Event()
            yield

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run read-ahead workers and the flush loop (every ``flush_interval_ms`` and whenever the
        active write-cache half fills) until cancelled. Flush errors are logged, reported to
        ``on_flush_error`` and retried after 1 s, backing off up to the flush interval; they do
        not end this task."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._ra.run)
            nursery.start_soon(self._flush_loop)
            task_status.started()

    async def _flush_loop(self) -> None:
        cap = min(self._flush_interval_s, _RETRY_MAX_S)
        backoff = Backoff(min(_RETRY_MIN_S, cap), cap)
        failed = False
        while True:
            if failed:
                reason = FlushReason.RETRY
                await trio.sleep(backoff.next())
            else:
                reason = FlushReason.PERIODIC
                with trio.move_on_after(self._flush_interval_s):
                    await self._wc.wait_flush_wanted()
                    reason = FlushReason.CACHE_FULL
            try:
                await self.flush(reason)
                failed = False
                backoff.reset()
            except StorageIOError as exc:
                failed = True
                log.error(
                    "ledger storage flush failed (attempt %d; the write cache keeps the entries): %s",
                    backoff.failures + 1,
                    exc,
                )
                if self._on_flush_error is not None:
                    self._on_flush_error(exc)

    def statistics(self) -> StorageStats:
        """A snapshot of every component."""
        return StorageStats(
            ledgers=len(self._ledgers),
            flushes=self._flushes,
            flush_failures=self._flush_failures,
            write_cache=self._wc.statistics(),
            read_cache=self._rc.statistics(),
            read_ahead=self._ra.statistics(),
            entry_logs=self._logger.statistics(),
            index=self._index.statistics(),
        )


async def _free_in_thread(entries: dict[tuple[int, int], bytes]) -> None:
    """Free a flushed write-cache half in a worker thread: dropping ~100,000 entries took tens of
    milliseconds of the event loop (27 ms measured by bench/loop_stall_bench.py)."""
    if len(entries) > 1000:
        await trio.to_thread.run_sync(entries.clear)


def _rows_and_lasts(
    entries: list[tuple[int, int, bytes]], locations: list[int]
) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
    """Index rows ``(ledger, entry, location)`` and the last entry per ledger of sorted ``entries``."""
    rows = [(lid, eid, loc) for (lid, eid, _), loc in zip(entries, locations, strict=True)]
    lasts = {lid: eid for lid, eid, _ in entries}  # sorted, so the last one wins
    return rows, lasts


def _sorted_in_pieces(batch: FlushBatch) -> tuple[list[tuple[int, int, bytes]], list[tuple[int, int]]]:
    """Worker thread: the batch's entries sorted, and ``(start, end)`` index bounds cutting them
    into pieces of about `PACE_STEP` payload bytes (a piece takes at least one entry)."""
    entries = batch.sorted_entries()
    bounds: list[tuple[int, int]] = []
    i = size = 0
    for j, (_, _, data) in enumerate(entries):
        size += len(data)
        if size >= PACE_STEP:
            bounds.append((i, j + 1))
            i, size = j + 1, 0
    if i < len(entries):
        bounds.append((i, len(entries)))
    return entries, bounds
