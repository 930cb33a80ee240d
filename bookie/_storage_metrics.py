"""Prometheus metrics of the bookie's ledger storage (to be merged into ``bookie/metrics.py``).

Names follow BookKeeper's DbLedgerStorageStats under the ``bookie`` scope (``write-cache-size``
becomes ``bookie_write_cache_size``); ``bookie_entry_log_count``, ``bookie_flush_reason`` and
``bookie_flush_errors`` have no BookKeeper equivalent. prometheus-client appends ``_total`` to
counters on export.

One `StorageMetrics` per storage instance, on a registry of its own by default, so tests can
create many storages without "Duplicated timeseries" errors.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["StorageMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SIZE_BUCKETS = tuple(float(1 << n) for n in range(10, 32, 2))


class StorageMetrics:
    """The storage's metric objects; gauges read live values through callbacks given to `bind`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def latency(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, buckets=_LATENCY_BUCKETS, registry=r)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, registry=r)

        self.write_cache_hits = counter("bookie_write_cache_hits", "Reads served by the write cache")
        self.write_cache_misses = counter("bookie_write_cache_misses", "Reads not in the write cache")
        self.read_cache_hits = counter("bookie_read_cache_hits", "Reads served by the read cache")
        self.read_cache_misses = counter("bookie_read_cache_misses", "Reads that missed the read cache")
        self.readahead_batch_count = counter("bookie_readahead_batch_count", "Entries read by read-ahead")
        self.readahead_batch_size = counter("bookie_readahead_batch_size", "Bytes read by read-ahead")
        self.flush = latency("bookie_flush", "Latency of flushing the write cache (checkpoint storage part)")
        self.flush_entrylog = latency("bookie_flush_entrylog", "Latency of writing and syncing entry logs")
        self.flush_locations_index = latency("bookie_flush_locations_index",
                                             "Latency of the index update of a flush")
        self.flush_size = Histogram("bookie_flush_size", "Bytes flushed from the write cache per flush",
                                    buckets=_SIZE_BUCKETS, registry=r)
        self.flush_reason = counter("bookie_flush_reason", "Flushes by what triggered them", ("reason",))
        self.flush_errors = counter("bookie_flush_errors", "Flushes that failed with an I/O error")
        self.throttled_write = counter("bookie_throttled_write",
                                       "Adds that waited because the write cache was full")
        self.rejected_write_requests = counter("bookie_rejected_write_requests",
                                               "Adds refused because the write cache stayed full")
        self.write_cache_size = gauge("bookie_write_cache_size", "Current bytes in the write cache")
        self.write_cache_count = gauge("bookie_write_cache_count", "Current entries in the write cache")
        self.read_cache_size = gauge("bookie_read_cache_size", "Current bytes in the read cache")
        self.read_cache_count = gauge("bookie_read_cache_count", "Current entries in the read cache")
        self.entry_log_count = gauge("bookie_entry_log_count", "Entry log files in the ledger directories")

    def bind(self, *, write_cache_size: Callable[[], float], write_cache_count: Callable[[], float],
             read_cache_size: Callable[[], float], read_cache_count: Callable[[], float],
             entry_log_count: Callable[[], float]) -> None:
        """Make the gauges read live values from the storage's components."""
        self.write_cache_size.set_function(write_cache_size)
        self.write_cache_count.set_function(write_cache_count)
        self.read_cache_size.set_function(read_cache_size)
        self.read_cache_count.set_function(read_cache_count)
        self.entry_log_count.set_function(entry_log_count)
