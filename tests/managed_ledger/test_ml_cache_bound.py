"""The entry cache's byte bound holds for small entries too.

Before: the bound counted payload bytes only, so a cache of 150-byte entries held about 2.5 times
its configured bytes (each entry's key, ids, bytes header and map node cost more than its data).
"""

from __future__ import annotations

import os
import tracemalloc

from prometheus_client import CollectorRegistry

from managed_ledger._cache import EntryCache
from managed_ledger.metrics import ManagedLedgerMetrics

BOUND = 4 * 1024 * 1024


def test_a_cache_of_small_entries_stays_within_its_bound() -> None:
    cache = EntryCache(BOUND, ManagedLedgerMetrics(CollectorRegistry()))
    payloads = [os.urandom(150) for _ in range(1000)]  # made before tracing: only the cache is measured
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100_000):
            cache.put("tenant/ns/persistent/topic", 1_000_000 + i // 50_000, 100_000 + i, bytes(payloads[i % 1000]))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache) > 5_000 and cache.size <= BOUND
    assert held <= BOUND * 1.1, f"{held / BOUND:.2f} x the bound"
