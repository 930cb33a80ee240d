"""Metrics of offloading and of reads from the tier.

Pulsar's ``brk_ledgeroffloader_*`` family (``LedgerOffloaderStatsImpl``: labelled by namespace,
latencies as summaries in microseconds, rates in bytes per second over the last update interval),
plus Magnetar's own totals where Pulsar keeps only a rate. One `TieredStorageMetrics` per broker,
on its own registry unless given one (the broker exports it on ``/metrics``).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary

__all__ = ["TieredStorageMetrics"]

_SECONDS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class TieredStorageMetrics:
    """Counters, summaries and gauges of the tier (``namespace`` label: ``tenant/namespace``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r, ns = self.registry, ["namespace"]
        self.offload_error = Counter("brk_ledgeroffloader_offload_error", "Ledger offloads that failed", ns, registry=r)
        self.offload_rate = Gauge("brk_ledgeroffloader_offload_rate", "Bytes offloaded per second", ns, registry=r)
        self.read_offload_error = Counter(
            "brk_ledgeroffloader_read_offload_error", "Reads from the tier that failed", ns, registry=r
        )
        self.read_offload_rate = Gauge(
            "brk_ledgeroffloader_read_offload_rate", "Bytes read from the tier per second", ns, registry=r
        )
        self.read_bytes = Counter("brk_ledgeroffloader_read_bytes", "Bytes read from the tier", ns, registry=r)
        self.write_storage_error = Counter(
            "brk_ledgeroffloader_write_storage_error", "Writes to the object store that failed", ns, registry=r
        )
        self.read_offload_index_latency = Summary(
            "brk_ledgeroffloader_read_offload_index_latency",
            "Time to read an offloaded ledger's index (microseconds)",
            ns,
            registry=r,
        )
        self.read_offload_data_latency = Summary(
            "brk_ledgeroffloader_read_offload_data_latency",
            "Time of one ranged read of offloaded blocks (microseconds)",
            ns,
            registry=r,
        )
        self.read_ledger_latency = Summary(
            "brk_ledgeroffloader_read_ledger_latency",
            "Time of one read from the bookies while offloading (microseconds)",
            ns,
            registry=r,
        )
        self.delete_offload_ops = Counter(
            "brk_ledgeroffloader_delete_offload_ops",
            "Deletions of offloaded ledgers from the tier",
            ["namespace", "status"],
            registry=r,
        )
        self.offloaded_bytes = Counter(
            "magnetar_offload_bytes", "Ledger bytes offloaded (entries' payload)", ns, registry=r
        )
        self.offloaded_ledgers = Counter("magnetar_offload_ledgers", "Ledgers offloaded and verified", ns, registry=r)
        self.offload_seconds = Histogram(
            "magnetar_offload_ledger_seconds", "Time to offload and verify one ledger", buckets=_SECONDS, registry=r
        )
        self.bookie_copies_deleted = Counter(
            "magnetar_offload_bookie_copies_deleted", "Offloaded ledgers whose bookie copy was deleted", ns, registry=r
        )
        self.cache_hits = Counter(
            "magnetar_offload_read_cache_hits", "Blocks read from the tier read cache", registry=r
        )
        self.cache_misses = Counter("magnetar_offload_read_cache_misses", "Blocks fetched from the tier", registry=r)
        self.cache_size = Gauge(
            "magnetar_offload_read_cache_size_bytes", "Bytes held by the tier read cache", registry=r
        )
        self._window: dict[str, list[float]] = {}  # namespace -> [offloaded, read] bytes since last update
        self._window_start = time.monotonic()

    def record_offloaded(self, namespace: str, nbytes: int) -> None:
        """Count bytes written to the tier."""
        self.offloaded_bytes.labels(namespace).inc(nbytes)
        self._window.setdefault(namespace, [0.0, 0.0])[0] += nbytes

    def record_read(self, namespace: str, nbytes: int) -> None:
        """Count bytes read back from the tier."""
        self.read_bytes.labels(namespace).inc(nbytes)
        self._window.setdefault(namespace, [0.0, 0.0])[1] += nbytes

    def update_rates(self) -> None:
        """Turn the bytes counted since the last call into the per-second rate gauges."""
        now = time.monotonic()
        interval = max(now - self._window_start, 1e-3)
        for namespace, (written, read) in self._window.items():
            self.offload_rate.labels(namespace).set(written / interval)
            self.read_offload_rate.labels(namespace).set(read / interval)
        self._window = {ns: [0.0, 0.0] for ns in self._window}
        self._window_start = now

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The current value of one sample (0 when absent)."""
        value = self.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value
