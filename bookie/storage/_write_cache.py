"""The write cache: a double buffer of entries waiting to be flushed into entry logs.

States of the two halves (rules):

1. There is always one ACTIVE half; adds go into it. There is at most one FLUSHING half.
2. `WriteCache.swap` (called only by the storage's flush, after it captured the journal mark)
   turns ACTIVE into FLUSHING and starts a fresh ACTIVE. It is refused while a FLUSHING half exists.
3. `WriteCache.complete_flush` drops the FLUSHING half, after its entries are in the entry logs
   and the index, and hands its entries to the caller to free off the event loop. Until then
   the flush's worker thread reads the FLUSHING half in place (`FlushBatch`), so nothing changes
   it except `delete_ledger`, which the storage calls only under its flush lock. A failed flush
   leaves the FLUSHING half in place (still readable) so that the next flush writes it again
   before swapping: nothing acknowledged is ever dropped.
4. An add that would take ACTIVE past half the cache size marks a flush as wanted and waits (at
   most ``max_throttle_time_ms``) for a swap to free space; then it raises `WriteCacheFull`. An
   entry bigger than a half can never fit and is refused at once. Memory is thus bounded by the
   configured size (payload bytes), and an add never waits on anything but a flush that the
   storage's flush loop performs independently, so it cannot deadlock.
5. Reads see both halves (ACTIVE first: an entry re-added during recovery is newest there).
6. The one exception to the bound: `hold` adds past it, for a journal replay that cannot flush
   because the disk is full. What it holds is what the journal holds after the LastLogMark, so it
   is bounded by the journal; without it a bookie on a full disk could not start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import trio

from .._errors import BookieException

__all__ = ["WriteCache", "WriteCacheFull", "WriteCacheStats", "FlushBatch"]


class WriteCacheFull(BookieException):
    """The write cache stayed full for longer than the throttle time (or the entry can never fit).

    The server answers the add with ETOOMANYREQUESTS; the client retries or picks another bookie.
    """


@dataclass(frozen=True, slots=True)
class WriteCacheStats:
    """Snapshot of `WriteCache` state and counters."""

    size_bytes: int
    count: int
    active_bytes: int
    flushing_bytes: int
    throttled_adds: int
    rejected_adds: int


class _Half:
    __slots__ = ("entries", "size", "last")

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], bytes] = {}
        self.size = 0
        self.last: dict[int, int] = {}


class FlushBatch:
    """The entries of a FLUSHING half, read by the flush's worker thread.

    It wraps the half's dict without copying it: a FLUSHING half is never changed on the event
    loop until the flush completes (rules 2-3; `WriteCache.delete_ledger` runs under the storage's
    flush lock), and copying or freeing ~100,000 entries on the loop stalled every connection of
    the process for tens of milliseconds (bench/loop_stall_bench.py).
    """

    __slots__ = ("_entries", "size")

    def __init__(self, entries: dict[tuple[int, int], bytes], size: int) -> None:
        self._entries = entries
        self.size = size

    def __len__(self) -> int:
        return len(self._entries)

    def bytes_by_directory(self, directories: int, record_overhead: int) -> list[int]:
        """Bytes the batch takes in each of ``directories`` ledger directories (ledger % count),
        counting ``record_overhead`` per entry. CPU work for a large batch: call it in a worker thread."""
        if directories == 1:
            return [self.size + len(self._entries) * record_overhead]
        out = [0] * directories
        for (ledger_id, _), data in self._entries.items():
            out[ledger_id % directories] += len(data) + record_overhead
        return out

    def sorted_entries(self) -> list[tuple[int, int, bytes]]:
        """``(ledger, entry, payload)`` sorted by (ledger, entry). CPU work: call it in a worker thread."""
        return [(k[0], k[1], v) for k, v in sorted(self._entries.items(), key=_first)]


def _first(item: tuple[tuple[int, int], bytes]) -> tuple[int, int]:
    return item[0]


class WriteCache:
    """Two halves of ``max_bytes // 2`` payload bytes each; see the module rules.

    Not thread-safe: use it from the trio thread only.
    """

    def __init__(self, max_bytes: int, *, max_throttle_time_ms: float = 10_000) -> None:
        if max_bytes < 2:
            raise ValueError("write cache size must be at least 2 bytes")
        self._half_max = max_bytes // 2
        self._throttle_s = max_throttle_time_ms / 1000 if max_throttle_time_ms >= 0 else math.inf
        self._active = _Half()
        self._flushing: _Half | None = None
        self._space = trio.Event()
        self._flush_wanted = trio.Event()
        self._throttled = 0
        self._rejected = 0

    @property
    def half_size(self) -> int:
        """The byte bound of one half."""
        return self._half_max

    def try_add(self, ledger_id: int, entry_id: int, data: bytes) -> bool:
        """Add without waiting; False when the active half has no room (a flush is then wanted)."""
        a = self._active
        n = len(data)
        size = a.size + n
        if size > self._half_max and a.entries:
            self._flush_wanted.set()
            return False
        key = (ledger_id, entry_id)
        entries = a.entries
        old = entries.get(key)
        entries[key] = data
        a.size = size if old is None else size - len(old)
        last = a.last
        if entry_id > last.get(ledger_id, -1):
            last[ledger_id] = entry_id
        if a.size >= self._half_max:
            self._flush_wanted.set()
        return True

    def hold(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        """Add to ACTIVE whatever its size (rule 6: journal replay on a full disk only)."""
        a = self._active
        entries = a.entries
        key = (ledger_id, entry_id)
        old = entries.get(key)
        entries[key] = data
        a.size += len(data) - (len(old) if old is not None else 0)
        if entry_id > a.last.get(ledger_id, -1):
            a.last[ledger_id] = entry_id
        if a.size >= self._half_max:
            self._flush_wanted.set()

    async def add(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        """Add an entry, waiting at most the throttle time for room (rule 4).

        Raises `WriteCacheFull` if there is still no room after that, or at once for an entry larger
        than half the cache. The cache keeps a reference to ``data`` (pass immutable bytes).
        """
        if len(data) > self._half_max:
            self._rejected += 1
            raise WriteCacheFull(f"entry of {len(data)} bytes exceeds the write cache half of {self._half_max}")
        if self.try_add(ledger_id, entry_id, data):
            return
        self._throttled += 1
        with trio.move_on_after(self._throttle_s):
            while True:
                await self._space.wait()
                if self.try_add(ledger_id, entry_id, data):
                    return
        self._rejected += 1
        raise WriteCacheFull("write cache is full: flush is not keeping up")

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The cached payload of an entry (either half), or None."""
        key = (ledger_id, entry_id)
        data = self._active.entries.get(key)
        if data is None and self._flushing is not None:
            data = self._flushing.entries.get(key)
        return data

    def last_entry(self, ledger_id: int) -> int:
        """The highest cached entry id of a ledger, -1 when none is cached."""
        last = self._active.last.get(ledger_id, -1)
        if self._flushing is not None:
            last = max(last, self._flushing.last.get(ledger_id, -1))
        return last

    def has_ledger(self, ledger_id: int) -> bool:
        """Whether any entry of the ledger is cached."""
        fl = self._flushing
        return ledger_id in self._active.last or (fl is not None and ledger_id in fl.last)

    @property
    def flush_pending(self) -> bool:
        """Whether a FLUSHING half exists (a previous flush failed or is in progress)."""
        return self._flushing is not None

    @property
    def flush_wanted(self) -> bool:
        """Whether the active half filled up since the last swap."""
        return self._flush_wanted.is_set()

    async def wait_flush_wanted(self) -> None:
        """Return once the active half has filled (used by the storage's flush loop). A swap by
        another flush meanwhile does not lose the wait: it goes on for the new active half."""
        while not self._flush_wanted.is_set():
            await self._flush_wanted.wait()  # set by a fill, or by a swap (then wait again)

    def swap(self) -> FlushBatch:
        """Rule 2: ACTIVE becomes FLUSHING; returns its entries. Raises RuntimeError if one is pending."""
        if self._flushing is not None:
            raise RuntimeError("a flushing half is still pending")
        self._flushing = self._active
        self._active = _Half()
        swapped, self._flush_wanted = self._flush_wanted, trio.Event()
        swapped.set()  # wakes a wait_flush_wanted of the old half, to wait on the new one
        self._space.set()
        self._space = trio.Event()
        return self.pending_batch()

    def pending_batch(self) -> FlushBatch:
        """The entries of the FLUSHING half (to retry a failed flush). Raises RuntimeError if none."""
        if self._flushing is None:
            raise RuntimeError("no flushing half")
        return FlushBatch(self._flushing.entries, self._flushing.size)

    def complete_flush(self) -> dict[tuple[int, int], bytes]:
        """Rule 3: the FLUSHING half is durable elsewhere; drop it.

        Returns its entries, no longer referenced by the cache, so that the caller can free them
        off the event loop (``dict.clear`` in a worker thread)."""
        if self._flushing is None:
            return {}
        entries, self._flushing = self._flushing.entries, None
        return entries

    def delete_ledger(self, ledger_id: int) -> None:
        """Drop every cached entry of a ledger from both halves (GC of a deleted ledger)."""
        for half in (self._active, self._flushing):
            if half is None or half.last.pop(ledger_id, None) is None:
                continue
            for key in [k for k in half.entries if k[0] == ledger_id]:
                half.size -= len(half.entries.pop(key))

    def statistics(self) -> WriteCacheStats:
        """A snapshot of sizes and counters."""
        fl = self._flushing
        return WriteCacheStats(
            size_bytes=self._active.size + (fl.size if fl else 0),
            count=len(self._active.entries) + (len(fl.entries) if fl else 0),
            active_bytes=self._active.size,
            flushing_bytes=fl.size if fl else 0,
            throttled_adds=self._throttled,
            rejected_adds=self._rejected,
        )
