"""Prometheus metrics of the bookie, one section per component.

Names follow BookKeeper's (``BookKeeperServerStats``: scope ``bookie``, sub-scope ``journal``,
then the stat name), so existing dashboards find them. Two adaptations: latencies are histograms
in milliseconds (BookKeeper's OpStatsLogger unit), and prometheus-client exposes counters with a
``_total`` suffix.

Each component instance takes a `CollectorRegistry` (the bookie server passes its own); when none
is given it gets a private one, so tests that create several instances never collide.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily

__all__ = ["JournalMetrics", "BatchHistogram", "LATENCY_MS_BUCKETS", "BATCH_ENTRIES_BUCKETS",
           "BATCH_BYTES_BUCKETS"]

LATENCY_MS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000)
BATCH_ENTRIES_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
BATCH_BYTES_BUCKETS = tuple(2 ** k for k in range(10, 27, 2))  # 1 KiB .. 64 MiB


class BatchHistogram:
    """A histogram that takes many observations in one call, for per-record latencies.

    prometheus-client's Histogram costs a lock and a bucket search per observation; at tens of
    thousands of adds per second that is a measurable share of the event loop. This one counts a
    whole batch with `bisect` under one lock and is exposed like any other histogram.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self._name = name
        self._doc = documentation
        self._bounds = sorted(float(b) for b in buckets)
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.observe_many((value,))

    def observe_many(self, values: Iterable[float]) -> None:
        """Count every value of `values` (a bucket's bound is inclusive, as in Prometheus)."""
        bounds, counts, total = self._bounds, self._counts, 0.0
        with self._lock:
            for v in values:
                counts[bisect.bisect_left(bounds, v)] += 1
                total += v
            self._sum += total

    def count(self) -> int:
        """How many values were observed."""
        return sum(self._counts)

    def describe(self) -> list[HistogramMetricFamily]:
        """The metric family without samples (for the registry's name check)."""
        return [HistogramMetricFamily(self._name, self._doc)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        """The cumulative buckets, sum and count, as Prometheus expects."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, n in zip([*self._bounds, float("inf")], counts):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        yield HistogramMetricFamily(self._name, self._doc, buckets=buckets, sum_value=total)


# ---------------------------------------------------------------------------------------------
# Journal (bookie_journal_*)

class JournalMetrics:
    """The journal's metrics; one instance per `Journal`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        p = "bookie_journal_"
        # latencies
        self.add_entry = BatchHistogram(p + "JOURNAL_ADD_ENTRY",
                                        "Add latency from enqueue to acknowledgement (ms)",
                                        LATENCY_MS_BUCKETS, r)
        self.sync = Histogram(p + "JOURNAL_SYNC", "Latency of one fdatasync of the journal (ms)",
                              buckets=LATENCY_MS_BUCKETS, registry=r)
        self.flush_latency = Histogram(p + "JOURNAL_FLUSH_LATENCY",
                                       "Latency of writing one batch to the file (ms)",
                                       buckets=LATENCY_MS_BUCKETS, registry=r)
        self.creation_latency = Histogram(p + "JOURNAL_CREATION_LATENCY",
                                          "Latency of creating and preallocating a journal file (ms)",
                                          buckets=LATENCY_MS_BUCKETS, registry=r)
        self.preallocation = Histogram(p + "JOURNAL_PREALLOCATION",
                                       "Latency of extending the preallocated space (ms)",
                                       buckets=LATENCY_MS_BUCKETS, registry=r)
        # force-write grouping
        self.force_write_batch_entries = Histogram(p + "JOURNAL_FORCE_WRITE_BATCH_ENTRIES",
                                                   "Records made durable by one fdatasync",
                                                   buckets=BATCH_ENTRIES_BUCKETS, registry=r)
        self.force_write_batch_bytes = Histogram(p + "JOURNAL_FORCE_WRITE_BATCH_BYTES",
                                                 "Bytes made durable by one fdatasync",
                                                 buckets=BATCH_BYTES_BUCKETS, registry=r)
        # queues
        self.queue_size = Gauge(p + "JOURNAL_QUEUE_SIZE", "Records queued, not yet written", registry=r)
        self.queue_bytes = Gauge(p + "JOURNAL_QUEUE_BYTES", "Bytes queued, not yet written", registry=r)
        self.force_write_queue_size = Gauge(p + "JOURNAL_FORCE_WRITE_QUEUE_SIZE",
                                            "Written batches waiting for fdatasync", registry=r)
        # counters: one per flush reason
        self.num_flush_max_wait = Counter(p + "JOURNAL_NUM_FLUSH_MAX_WAIT",
                                          "Batches flushed because the oldest record waited "
                                          "journalMaxGroupWaitMSec", registry=r)
        self.num_flush_max_outstanding_bytes = Counter(
            p + "JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_BYTES",
            "Batches flushed because they passed journalBufferedWritesThreshold", registry=r)
        self.num_flush_max_outstanding_entries = Counter(
            p + "JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_ENTRIES",
            "Batches flushed because they passed journalBufferedEntriesThreshold", registry=r)
        self.num_flush_empty_queue = Counter(p + "JOURNAL_NUM_FLUSH_EMPTY_QUEUE",
                                             "Batches flushed because the queue became empty "
                                             "(journalFlushWhenQueueEmpty)", registry=r)
        self.num_force_writes = Counter(p + "JOURNAL_NUM_FORCE_WRITES", "fdatasync calls on journal files",
                                        registry=r)
        self.write_bytes = Counter(p + "JOURNAL_WRITE_BYTES", "Bytes written to journal files", registry=r)
        self.num_rolls = Counter(p + "JOURNAL_NUM_ROLLS", "Journal files rolled at journalMaxSizeMB",
                                 registry=r)
        self.io_errors = Counter(p + "JOURNAL_IO_ERRORS", "Write or sync errors (the journal then fails)",
                                 registry=r)


# ---------------------------------------------------------------------------------------------
# Ledger storage (entry logs, index, caches): added by the storage component.
