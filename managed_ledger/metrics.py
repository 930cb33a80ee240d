"""Metrics of the managed ledger (Pulsar's ``pulsar_ml_*`` family, typed, with help text).

One `ManagedLedgerMetrics` per factory, each with its own registry by default, so that tests can
create several factories in one process without "Duplicated timeseries" errors. The broker
passes a shared registry when it exports them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from magnetar.common.batch_histogram import BatchHistogram

__all__ = ["ManagedLedgerMetrics", "ROLL_REASONS"]

ROLL_REASONS = ("entries", "size", "time", "inactive", "add_failure", "manual", "no_ledger")
"""Why a ledger was rolled: the ``reason`` label of ``pulsar_ml_ledger_rollovers_total``."""

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)


class ManagedLedgerMetrics:
    """The counters and histograms one factory updates (label-free except the roll reason)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        # observed once per add: the batch form (one lock per completed run of adds)
        self.add_latency = BatchHistogram(
            "pulsar_ml_add_entry_latency_seconds",
            "Time from add_entry admission to its completion",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.entries_added = Counter("pulsar_ml_entries_added", "Entries added to managed ledgers", registry=r)
        self.bytes_added = Counter("pulsar_ml_bytes_added", "Payload bytes added to managed ledgers", registry=r)
        self.add_failures = Counter("pulsar_ml_add_entry_errors", "Adds failed back to the caller", registry=r)
        self.ledger_rolls = Counter("pulsar_ml_ledger_rollovers", "Ledgers rolled, by reason", ["reason"], registry=r)
        for reason in ROLL_REASONS:
            self.ledger_rolls.labels(reason=reason)
        self.cursor_persist_latency = Histogram(
            "pulsar_ml_cursor_persist_latency_seconds",
            "Time to write a cursor's state to the metadata store",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.cursor_persist_errors = Counter(
            "pulsar_ml_cursor_persist_errors", "Cursor persists that failed", registry=r
        )
        self.cache_hits = Counter("pulsar_ml_cache_hits", "Entries read from the entry cache", registry=r)
        self.cache_misses = Counter("pulsar_ml_cache_misses", "Entries not in the cache, read from storage", registry=r)
        self.cache_evictions = Counter("pulsar_ml_cache_evictions", "Entries evicted from the cache", registry=r)
        self.cache_size = Gauge("pulsar_ml_cache_used_size_bytes", "Bytes held by the entry cache", registry=r)
        self.truncated_ranges = Counter(
            "pulsar_ml_cursor_persisted_ranges_truncated",
            "Cursor persists that kept only the first max_unacked_ranges_to_persist acked ranges",
            registry=r,
        )
        self.ledgers_trimmed = Counter("pulsar_ml_ledgers_trimmed", "Ledgers deleted by trimming", registry=r)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The current value of one sample (for tests and ``statistics()``); 0 when absent."""
        value = self.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value
