"""The read cache (a ring of byte-bounded segments) and the asynchronous read-ahead feeding it.

Ring rules: entries are appended to the current segment; when it cannot take the next entry the
ring moves on to the following segment, which is emptied first (the oldest data goes, as suits
consumers that read in order). So the cache never holds more than ``max_bytes`` of payload, and
an entry bigger than one segment is simply not cached.

Read-ahead rules: a read-cache miss that had to go to the entry log asks `ReadAhead.request` to
read the records that follow it in the same log (same ledger only: flushes write each ledger's
entries contiguously and sorted). The request is queued without waiting (a full queue drops it:
read-ahead is an optimisation, never back-pressure on the reader), a fixed number of worker tasks
read in worker threads, and a request overlapping one already in flight for the same ledger is
skipped so a sequential reader does not start a read-ahead per miss. Only misses of in-order
readers read ahead (`InOrderReaders`: a miss shortly after a recent miss of the same ledger);
several readers of one ledger at different positions are each recognised. Several read-aheads of one
ledger may be in flight at once (readers at different positions), each tracked on its own until
its worker finished. The reader that missed never waits for its read-ahead; a later reader asking
for an entry that an in-flight read-ahead covers may wait for it (`ReadAhead.wait_pending`)
instead of issuing a second disk read, and is always woken when that read-ahead ends, whatever
else was requested meanwhile. The bytes read per request are estimated from the size of the entry
that missed (``batch_size`` entries like it), capped by ``max_bytes``, so random reads do not drag
in megabytes each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio

__all__ = ["ReadCache", "ReadCacheStats", "ReadAhead", "ReadAheadStats", "InOrderReaders"]


@dataclass(frozen=True, slots=True)
class ReadCacheStats:
    """Snapshot of `ReadCache` state and counters."""

    size_bytes: int
    count: int
    hits: int
    misses: int
    evicted_segments: int


class ReadCache:
    """A ring of ``segments`` segments sharing ``max_bytes`` of payload. Event-loop thread only."""

    def __init__(self, max_bytes: int, *, segments: int = 8) -> None:
        if segments < 1:
            raise ValueError("the read cache needs at least one segment")
        self._seg_max = max_bytes // segments
        self._segs: list[dict[tuple[int, int], bytes]] = [{} for _ in range(segments)]
        self._sizes = [0] * segments
        self._cur = 0
        self._where: dict[tuple[int, int], int] = {}
        self._hits = self._misses = self._evictions = 0

    def get(self, ledger_id: int, entry_id: int, *, count: bool = True) -> bytes | None:
        """The cached payload or None; counts a hit or a miss unless ``count`` is False."""
        key = (ledger_id, entry_id)
        seg = self._where.get(key)
        if seg is None:
            if count:
                self._misses += 1
            return None
        if count:
            self._hits += 1
        return self._segs[seg][key]

    def __contains__(self, key: tuple[int, int]) -> bool:
        return key in self._where

    def put(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Cache an entry, evicting the oldest segment if needed; False if it is too big to cache."""
        n = len(data)
        if n > self._seg_max:
            return False
        key = (ledger_id, entry_id)
        if key in self._where:
            return True
        cur = self._cur
        if self._sizes[cur] + n > self._seg_max:
            cur = self._cur = (cur + 1) % len(self._segs)
            old = self._segs[cur]
            if old:
                where = self._where
                for k in old:
                    del where[k]
                self._segs[cur] = {}
                self._sizes[cur] = 0
                self._evictions += 1
        self._segs[cur][key] = data
        self._sizes[cur] += n
        self._where[key] = cur
        return True

    def delete_ledger(self, ledger_id: int) -> None:
        """Drop every cached entry of a ledger."""
        for key in [k for k in self._where if k[0] == ledger_id]:
            seg = self._where.pop(key)
            self._sizes[seg] -= len(self._segs[seg].pop(key))

    def statistics(self) -> ReadCacheStats:
        """A snapshot of size and counters."""
        return ReadCacheStats(sum(self._sizes), len(self._where), self._hits, self._misses, self._evictions)


@dataclass(frozen=True, slots=True)
class ReadAheadStats:
    """Snapshot of `ReadAhead` counters."""

    requested: int
    skipped: int
    dropped: int
    batches: int
    entries_read: int
    bytes_read: int
    errors: int


# (location, ledger_id, max_entries, max_bytes) -> [(entry_id, payload)]; blocking
Reader = Callable[[int, int, int, int], list[tuple[int, bytes]]]


class ReadAhead:
    """Reads ahead into a `ReadCache` from worker tasks started by `run`.

    ``reader`` is a blocking function (normally `EntryLogger.read_following`) run in worker
    threads. At most ``concurrency`` reads run at once and ``max_pending`` requests wait.
    ``on_batch(entries, bytes)`` is called after each read-ahead (metrics).
    """

    def __init__(
        self,
        cache: ReadCache,
        reader: Reader,
        *,
        batch_size: int = 100,
        max_bytes: int = 4 << 20,
        concurrency: int = 2,
        max_pending: int = 64,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        self._cache = cache
        self._reader = reader
        self._batch = batch_size
        self._max_bytes = max_bytes
        self._concurrency = concurrency
        self._on_batch = on_batch
        self._tx, self._rx = trio.open_memory_channel[tuple[int, int, int, int]](max_pending)
        # ledger -> its in-flight read-aheads (first entry, end, done); a few per ledger at most,
        # and no more in all than the queue plus the workers hold
        self._inflight: dict[int, list[tuple[int, int, trio.Event]]] = {}
        self._running = False
        self._requested = self._skipped = self._dropped = 0
        self._batches = self._entries = self._bytes = self._errors = 0

    @property
    def enabled(self) -> bool:
        """Whether read-ahead is configured to read anything and its workers are running."""
        return self._running and self._batch > 0 and self._max_bytes > 0

    def request(self, ledger_id: int, first_entry_id: int, location: int, entry_size_hint: int = 0) -> None:
        """Ask for the records from ``location`` on (expected to start at ``first_entry_id``, each
        about ``entry_size_hint`` bytes). Never waits."""
        if not self.enabled:
            return
        self._requested += 1
        if self._covering(ledger_id, first_entry_id) is not None:
            self._skipped += 1
            return
        nbytes = self._max_bytes
        if entry_size_hint > 0:
            nbytes = min(nbytes, max(64 * 1024, self._batch * (entry_size_hint + 20)))
        try:
            self._tx.send_nowait((ledger_id, first_entry_id, location, nbytes))
        except trio.WouldBlock:
            self._dropped += 1
            return
        self._inflight.setdefault(ledger_id, []).append((first_entry_id, first_entry_id + self._batch, trio.Event()))

    def _covering(self, ledger_id: int, entry_id: int) -> tuple[int, int, trio.Event] | None:
        for span in self._inflight.get(ledger_id, ()):
            if span[0] <= entry_id < span[1]:
                return span
        return None

    async def wait_pending(self, ledger_id: int, entry_id: int) -> bool:
        """If an in-flight read-ahead covers the entry, wait until it ended (filled the cache or
        failed) and return True; else False."""
        span = self._covering(ledger_id, entry_id)
        if span is None:
            return False
        await span[2].wait()
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the read-ahead workers until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(self._concurrency):
                    nursery.start_soon(self._worker)
                self._running = True
                task_status.started()
        finally:
            self._running = False
            for spans in self._inflight.values():
                for span in spans:
                    span[2].set()  # nobody will fill these: release waiting readers
            self._inflight.clear()

    async def _worker(self) -> None:
        async for ledger_id, first, location, nbytes in self._rx:
            items: list[tuple[int, bytes]] = []
            try:
                items = await trio.to_thread.run_sync(self._reader, location, ledger_id, self._batch, nbytes)
            except (OSError, ValueError):
                # the log may have been compacted away meanwhile: read-ahead is best effort
                self._errors += 1
            finally:
                # fill the cache before waking waiters (no checkpoint in between)
                size = 0
                for entry_id, data in items:
                    self._cache.put(ledger_id, entry_id, data)
                    size += len(data)
                self._finished(ledger_id, first)
            self._batches += 1
            self._entries += len(items)
            self._bytes += size
            if self._on_batch is not None:
                self._on_batch(len(items), size)

    def _finished(self, ledger_id: int, first: int) -> None:
        """Forget the read-ahead of ``ledger_id`` from ``first`` and wake whoever waits for it
        (``first`` is unique among a ledger's in-flight spans: `request` skips a covered one)."""
        spans = self._inflight.get(ledger_id, [])
        for i, span in enumerate(spans):
            if span[0] == first:
                del spans[i]
                span[2].set()
                break
        if not spans:
            self._inflight.pop(ledger_id, None)

    def statistics(self) -> ReadAheadStats:
        """A snapshot of the counters."""
        return ReadAheadStats(
            self._requested, self._skipped, self._dropped, self._batches, self._entries, self._bytes, self._errors
        )


class InOrderReaders:
    """Tells, from a ledger's read-cache misses, whether a miss comes from a reader going through
    the ledger in order: one whose miss lands at most ``window`` entries after a recent miss of the
    same ledger. Up to ``streams`` recent miss positions are kept per ledger, so readers at
    different positions of one ledger (two subscriptions catching up) are each recognised instead
    of breaking each other's run; a miss that continues none of them starts a new one in place of
    the least recently continued. At most ``max_ledgers`` ledgers are remembered (all are forgotten
    when that is reached), so the memory is bounded whatever the number of ledgers read.
    """

    __slots__ = ("_window", "_streams", "_max_ledgers", "_recent")

    def __init__(self, window: int, *, streams: int = 4, max_ledgers: int = 4096) -> None:
        if window < 1 or streams < 1 or max_ledgers < 1:
            raise ValueError("window, streams and max_ledgers must be positive")
        self._window = window
        self._streams = streams
        self._max_ledgers = max_ledgers
        self._recent: dict[int, list[int]] = {}  # ledger -> recent miss positions, least recent first

    def miss(self, ledger_id: int, entry_id: int) -> bool:
        """Record a miss of ``(ledger_id, entry_id)``; True when it continues an in-order run."""
        recent = self._recent.get(ledger_id)
        if recent is None:
            if len(self._recent) >= self._max_ledgers:
                self._recent.clear()
            self._recent[ledger_id] = [entry_id]
            return False
        for i, prev in enumerate(recent):
            if 0 < entry_id - prev <= self._window:
                del recent[i]
                recent.append(entry_id)
                return True
        recent.append(entry_id)
        if len(recent) > self._streams:
            del recent[0]
        return False
