"""The entry cache: recently added and read entries, bounded in bytes, shared by the managed
ledgers of one factory. Evicts least recently used entries first, so tailing readers (who read
what was just added) hit it and a slow reader's cold reads cannot grow it past the bound.

The bound counts what an entry costs in memory, not only its payload: small entries (a 100-byte
message) cost more in bookkeeping than in data, and counting payload alone let a 64 MiB cache
hold some 170 MiB (bench/RESULTS.md, "Delayed delivery: broker memory")."""

from __future__ import annotations

from collections import OrderedDict

from managed_ledger.metrics import ManagedLedgerMetrics

__all__ = ["EntryCache"]

_Key = tuple[str, int, int]  # managed ledger name, ledger id, entry id

ENTRY_OVERHEAD = 240
"""Bytes a cached entry costs beyond its payload: its key tuple and entry id, the bytes object's
header and the map's node (measured with tracemalloc on CPython 3.11: 384 bytes for a 150-byte
entry, 234 of them overhead)."""


class EntryCache:
    """An LRU map of entries costing at most ``max_bytes`` (payload and `ENTRY_OVERHEAD` each; 0
    disables caching)."""

    def __init__(self, max_bytes: int, metrics: ManagedLedgerMetrics) -> None:
        self.max_bytes = max_bytes
        self._metrics = metrics
        self._entries: OrderedDict[_Key, bytes] = OrderedDict()
        self.size = 0

    def get(self, name: str, ledger_id: int, entry_id: int) -> bytes | None:
        """The cached bytes (counted as a hit) or None (the caller counts misses per entry it
        then reads from storage)."""
        key = (name, ledger_id, entry_id)
        data = self._entries.get(key)
        if data is None:
            return None
        self._entries.move_to_end(key)
        self._metrics.cache_hits.inc()
        return data

    def count_misses(self, n: int) -> None:
        """Count ``n`` entries that had to be read from storage."""
        self._metrics.cache_misses.inc(n)

    def put(self, name: str, ledger_id: int, entry_id: int, data: bytes) -> None:
        """Insert an entry, evicting the least recently used ones over the bound (which counts
        each entry's payload plus `ENTRY_OVERHEAD`)."""
        if len(data) + ENTRY_OVERHEAD > self.max_bytes:
            return
        key = (name, ledger_id, entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= len(old) + ENTRY_OVERHEAD
        self._entries[key] = data
        self.size += len(data) + ENTRY_OVERHEAD
        while self.size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.size -= len(evicted) + ENTRY_OVERHEAD
            self._metrics.cache_evictions.inc()
        self._metrics.cache_size.set(self.size)

    def invalidate(self, name: str, ledger_id: int | None = None) -> None:
        """Drop the entries of one managed ledger (or of one of its ledgers)."""
        doomed = [k for k in self._entries if k[0] == name and (ledger_id is None or k[1] == ledger_id)]
        for k in doomed:
            self.size -= len(self._entries.pop(k)) + ENTRY_OVERHEAD
        self._metrics.cache_size.set(self.size)

    def __len__(self) -> int:
        return len(self._entries)
