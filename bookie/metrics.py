"""Prometheus metrics of the bookie, one section per component.

Sections: shared helpers (bucket sets; `BatchHistogram` is `magnetar.common.batch_histogram`'s),
journal (`JournalMetrics`), ledger storage (`StorageMetrics`), bookie core and request server
(`BookieServerMetrics`), garbage collector (`GcMetrics`).

Names follow BookKeeper's where one exists (``BookKeeperServerStats``: scope ``bookie``, then a
sub-scope such as ``journal`` or ``server``, then the stat name; ``DbLedgerStorageStats``'
``write-cache-size`` becomes ``bookie_write_cache_size``; ``GarbageCollectorStats`` under
``bookie``), so existing dashboards find them. Magnetar's own additions use lower-case names
(``bookie_gc_*``, ``bookie_flush_reason``, ``bookie_server_requests``). Two adaptations: journal
and request latencies are histograms in milliseconds (BookKeeper's OpStatsLogger unit) while the
storage's flush latencies (BookKeeper's names) and the GC phase runtimes (``_seconds``) are in
seconds, and prometheus-client exposes counters with a ``_total`` suffix.

Every metric object is created on the `CollectorRegistry` its component is given (the bookie
passes its own, one per bookie, so several bookies run in one process, as in standalone); when
none is given it gets a private one, so tests that create several instances never collide.
Nothing here registers on prometheus-client's global registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from magnetar.common.batch_histogram import BatchHistogram

__all__ = [
    "BatchHistogram",
    "JournalMetrics",
    "StorageMetrics",
    "BookieServerMetrics",
    "GcMetrics",
    "GC_PHASES",
    "GC_RESULTS",
    "LATENCY_MS_BUCKETS",
    "BATCH_ENTRIES_BUCKETS",
    "BATCH_BYTES_BUCKETS",
]

# Pulsar and BookKeeper export no ``*_created`` series; prometheus-client adds one, an epoch time,
# to every counter, histogram and summary unless switched off, which it is process-wide.
disable_created_metrics()

LATENCY_MS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000)
BATCH_ENTRIES_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
BATCH_BYTES_BUCKETS = tuple(2**k for k in range(10, 27, 2))  # 1 KiB .. 64 MiB
_STORAGE_LATENCY_S_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_FLUSH_SIZE_BUCKETS = tuple(float(1 << n) for n in range(10, 32, 2))
_GC_RUNTIME_S_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600)
_GC_USAGE_BUCKETS = tuple(i / 10 for i in range(1, 11))
GC_PHASES = ("ledgers", "entry_logs", "compaction", "total")
GC_RESULTS = ("ok", "partial", "error")


# ---------------------------------------------------------------------------------------------
# Journal (bookie_journal_*)


class JournalMetrics:
    """The journal's metrics; one instance per `Journal`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        p = "bookie_journal_"
        # latencies
        self.add_entry = BatchHistogram(
            p + "JOURNAL_ADD_ENTRY", "Add latency from enqueue to acknowledgement (ms)", LATENCY_MS_BUCKETS, r
        )
        self.sync = Histogram(
            p + "JOURNAL_SYNC", "Latency of one fdatasync of the journal (ms)", buckets=LATENCY_MS_BUCKETS, registry=r
        )
        self.flush_latency = Histogram(
            p + "JOURNAL_FLUSH_LATENCY",
            "Latency of writing one batch to the file (ms)",
            buckets=LATENCY_MS_BUCKETS,
            registry=r,
        )
        self.creation_latency = Histogram(
            p + "JOURNAL_CREATION_LATENCY",
            "Latency of creating and preallocating a journal file (ms)",
            buckets=LATENCY_MS_BUCKETS,
            registry=r,
        )
        self.preallocation = Histogram(
            p + "JOURNAL_PREALLOCATION",
            "Latency of extending the preallocated space (ms)",
            buckets=LATENCY_MS_BUCKETS,
            registry=r,
        )
        # force-write grouping
        self.force_write_batch_entries = Histogram(
            p + "JOURNAL_FORCE_WRITE_BATCH_ENTRIES",
            "Records made durable by one fdatasync",
            buckets=BATCH_ENTRIES_BUCKETS,
            registry=r,
        )
        self.force_write_batch_bytes = Histogram(
            p + "JOURNAL_FORCE_WRITE_BATCH_BYTES",
            "Bytes made durable by one fdatasync",
            buckets=BATCH_BYTES_BUCKETS,
            registry=r,
        )
        # queues
        self.queue_size = Gauge(p + "JOURNAL_QUEUE_SIZE", "Records queued, not yet written", registry=r)
        self.queue_bytes = Gauge(p + "JOURNAL_QUEUE_BYTES", "Bytes queued, not yet written", registry=r)
        self.force_write_queue_size = Gauge(
            p + "JOURNAL_FORCE_WRITE_QUEUE_SIZE", "Written batches waiting for fdatasync", registry=r
        )
        # counters: one per flush reason
        self.num_flush_max_wait = Counter(
            p + "JOURNAL_NUM_FLUSH_MAX_WAIT",
            "Batches flushed because the oldest record waited journalMaxGroupWaitMSec",
            registry=r,
        )
        self.num_flush_max_outstanding_bytes = Counter(
            p + "JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_BYTES",
            "Batches flushed because they passed journalBufferedWritesThreshold",
            registry=r,
        )
        self.num_flush_max_outstanding_entries = Counter(
            p + "JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_ENTRIES",
            "Batches flushed because they passed journalBufferedEntriesThreshold",
            registry=r,
        )
        self.num_flush_empty_queue = Counter(
            p + "JOURNAL_NUM_FLUSH_EMPTY_QUEUE",
            "Batches flushed because the queue became empty (journalFlushWhenQueueEmpty)",
            registry=r,
        )
        self.num_force_writes = Counter(p + "JOURNAL_NUM_FORCE_WRITES", "fdatasync calls on journal files", registry=r)
        self.write_bytes = Counter(p + "JOURNAL_WRITE_BYTES", "Bytes written to journal files", registry=r)
        self.num_rolls = Counter(p + "JOURNAL_NUM_ROLLS", "Journal files rolled at journalMaxSizeMB", registry=r)
        self.io_errors = Counter(p + "JOURNAL_IO_ERRORS", "Write or sync errors (the journal then fails)", registry=r)
        # full disk (the journal is NO_SPACE between the two)
        self.no_space = Counter(
            p + "no_space_suspensions",
            "Times the journal stopped on ENOSPC / EDQUOT (adds refused until it resumes)",
            registry=r,
        )
        self.resumes = Counter(p + "resumes", "Times the journal resumed on a fresh file after a full disk", registry=r)


# ---------------------------------------------------------------------------------------------
# Ledger storage: entry logs, index, caches (bookie_* after DbLedgerStorageStats)


class StorageMetrics:
    """The ledger storage's metrics (latencies in seconds); one instance per `DbLedgerStorage`.
    Gauges read live values through the callbacks given to `bind`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def latency(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, buckets=_STORAGE_LATENCY_S_BUCKETS, registry=r)

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
        self.flush_locations_index = latency("bookie_flush_locations_index", "Latency of the index update of a flush")
        self.flush_size = Histogram(
            "bookie_flush_size", "Bytes flushed from the write cache per flush", buckets=_FLUSH_SIZE_BUCKETS, registry=r
        )
        self.flush_reason = counter("bookie_flush_reason", "Flushes by what triggered them", ("reason",))
        self.flush_errors = counter("bookie_flush_errors", "Flushes that failed with an I/O error")
        self.flush_no_space = counter(
            "bookie_flush_no_space",
            "Flushes refused before writing because a ledger directory lacks the free space for the batch",
        )
        self.throttled_write = counter("bookie_throttled_write", "Adds that waited because the write cache was full")
        self.rejected_write_requests = counter(
            "bookie_rejected_write_requests", "Adds refused because the write cache stayed full"
        )
        self.write_cache_size = gauge("bookie_write_cache_size", "Current bytes in the write cache")
        self.write_cache_count = gauge("bookie_write_cache_count", "Current entries in the write cache")
        self.read_cache_size = gauge("bookie_read_cache_size", "Current bytes in the read cache")
        self.read_cache_count = gauge("bookie_read_cache_count", "Current entries in the read cache")
        self.entry_log_count = gauge("bookie_entry_log_count", "Entry log files in the ledger directories")

    def bind(
        self,
        *,
        write_cache_size: Callable[[], float],
        write_cache_count: Callable[[], float],
        read_cache_size: Callable[[], float],
        read_cache_count: Callable[[], float],
        entry_log_count: Callable[[], float],
    ) -> None:
        """Make the gauges read live values from the storage's components."""
        self.write_cache_size.set_function(write_cache_size)
        self.write_cache_count.set_function(write_cache_count)
        self.read_cache_size.set_function(read_cache_size)
        self.read_cache_count.set_function(read_cache_count)
        self.entry_log_count.set_function(entry_log_count)


# ---------------------------------------------------------------------------------------------
# Bookie core and request server (bookie_server_*, bookie_SERVER_STATUS, disks)


class BookieServerMetrics:
    """Request, state and disk metrics of one bookie; one instance per `Bookie`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        p = "bookie_server_"
        self.add_request = BatchHistogram(
            p + "ADD_ENTRY_REQUEST", "Add latency, request read to response queued (ms)", LATENCY_MS_BUCKETS, r
        )
        self.read_request = BatchHistogram(
            p + "READ_ENTRY_REQUEST", "Read latency, request read to response queued (ms)", LATENCY_MS_BUCKETS, r
        )
        self.requests = Counter(
            p + "requests", "Requests answered, by operation and status", ["operation", "status"], registry=r
        )
        self.add_bytes = Counter(p + "ADD_ENTRY_BYTES", "Entry bytes acknowledged", registry=r)
        self.read_bytes = Counter(p + "READ_ENTRY_BYTES", "Entry bytes returned by reads", registry=r)
        self.connections = Gauge(p + "connections", "Open client connections", registry=r)
        self.malformed_frames = Counter(
            p + "malformed_frames", "Connections closed because of a malformed or oversized frame", registry=r
        )
        self.in_flight_requests = Gauge(p + "in_flight_requests", "Requests read and not yet answered", registry=r)
        self.long_poll_waiters = Gauge(p + "long_poll_waiters", "Long-poll reads waiting for the LAC", registry=r)
        self.server_status = Gauge(
            "bookie_SERVER_STATUS", "1 when the bookie is writable, 0 when read-only", registry=r
        )
        self.read_only_reasons = Gauge(
            "bookie_read_only_reason", "Read-only reasons in force (1 = set)", ["reason"], registry=r
        )
        self.disk_usage = Gauge(
            "bookie_disk_usage", "Used fraction of the file system of each directory", ["dir"], registry=r
        )
        self.state_changes = Counter("bookie_state_changes", "Transitions between writable and read-only", registry=r)
        self.disk_full_early = Counter(
            "bookie_disk_full_before_allocation",
            "Times an allocation (journal preallocation, write-cache flush) would "
            "have passed diskUsageThreshold and turned the bookie read-only "
            "before the disk checker saw it",
            registry=r,
        )


# ---------------------------------------------------------------------------------------------
# Garbage collection and compaction (bookie_* after GarbageCollectorStats, bookie_gc_*)


class GcMetrics:
    """The garbage collector's metrics; one instance per `GarbageCollector`. Ledger-count gauges read
    live values through `bind`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        self.major_compactions = Counter("bookie_MAJOR_COMPACTION_COUNT", "Major compaction runs", registry=r)
        self.minor_compactions = Counter("bookie_MINOR_COMPACTION_COUNT", "Minor compaction runs", registry=r)
        self.reclaimed_compaction = Counter(
            "bookie_RECLAIMED_COMPACTION_SPACE_BYTES",
            "Disk bytes given back by compacting entry logs (old file size minus bytes copied)",
            registry=r,
        )
        self.reclaimed_deletion = Counter(
            "bookie_RECLAIMED_DELETION_SPACE_BYTES",
            "Disk bytes given back by deleting entry logs whose ledgers were all deleted",
            registry=r,
        )
        self.deleted_ledgers = Counter(
            "bookie_DELETED_LEDGER_COUNT", "Ledgers deleted from this bookie by GC", ["reason"], registry=r
        )
        self.deleted_logs = Counter("bookie_gc_deleted_entry_logs", "Entry logs removed", ["how"], registry=r)
        self.active_logs = Gauge("bookie_ACTIVE_ENTRY_LOG_COUNT", "Entry logs on disk at the last GC run", registry=r)
        self.active_log_bytes = Gauge(
            "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES", "Bytes of entry log files at the last GC run", registry=r
        )
        self.active_ledgers = Gauge("bookie_ACTIVE_LEDGER_COUNT", "Ledgers stored on this bookie", registry=r)
        self.runtime = Histogram(
            "bookie_gc_phase_runtime_seconds",
            "Runtime of each GC phase",
            ["phase"],
            buckets=_GC_RUNTIME_S_BUCKETS,
            registry=r,
        )
        self.runs = Counter("bookie_gc_runs", "GC runs by result", ["result"], registry=r)
        self.last_run = Gauge("bookie_gc_last_run_timestamp_seconds", "Wall-clock end of the last GC run", registry=r)
        self.last_result = Gauge(
            "bookie_gc_last_run_result", "1 for the result of the last GC run, 0 for the others", ["result"], registry=r
        )
        self.logs_skipped = Counter(
            "bookie_gc_logs_skipped", "Entry logs left alone by a run, by reason", ["reason"], registry=r
        )
        self.errors = Counter("bookie_gc_errors", "Errors met by GC, by phase", ["phase"], registry=r)
        self.compaction_read_bytes = Counter(
            "bookie_gc_compaction_read_bytes", "Bytes compaction scanned (live and dead entries)", registry=r
        )
        self.compaction_written_bytes = Counter(
            "bookie_gc_compaction_written_bytes", "Bytes compaction copied into new logs", registry=r
        )
        self.compaction_entries = Counter("bookie_gc_compaction_entries", "Entries compaction copied", registry=r)
        self.log_usage = Gauge(
            "bookie_gc_entry_logs_by_usage",
            "Rolled entry logs at the last GC run whose live share is at most "
            "usage_le (and above the next lower bucket)",
            ["usage_le"],
            registry=r,
        )
        self.early_rolls = Counter(
            "bookie_gc_entry_log_early_rolls",
            "Current entry logs GC rolled before logSizeLimit, by why (dead: live share "
            "under the run's compaction threshold or none; age)",
            ["why"],
            registry=r,
        )
        self.forced = Gauge("bookie_gc_force_compacting", "1 while a forced GC run is in progress", registry=r)
        for phase in GC_PHASES:
            self.runtime.labels(phase)
        for why in ("dead", "age"):
            self.early_rolls.labels(why)
        for bound in _GC_USAGE_BUCKETS:
            self.log_usage.labels(f"{bound:.1f}").set(0)
        for result in GC_RESULTS:
            self.runs.labels(result)
            self.last_result.labels(result).set(0)

    def bind(self, *, active_ledgers: Callable[[], float]) -> None:
        """Read the ledger count live from the storage."""
        self.active_ledgers.set_function(active_ledgers)

    def set_usage_distribution(self, usages: Iterable[float]) -> None:
        """Publish how many rolled logs fall into each tenth of usage."""
        counts = [0] * len(_GC_USAGE_BUCKETS)
        for u in usages:
            counts[min(len(counts) - 1, max(0, math.ceil(u * 10 - 1e-9) - 1))] += 1
        for bound, n in zip(_GC_USAGE_BUCKETS, counts, strict=True):
            self.log_usage.labels(f"{bound:.1f}").set(n)

    def record_result(self, result: str, wall_time_s: float) -> None:
        """Count a finished run and mark it as the last one."""
        self.runs.labels(result).inc()
        self.last_run.set(wall_time_s)
        for r in GC_RESULTS:
            self.last_result.labels(r).set(1 if r == result else 0)
