"""Metrics of the BookKeeper client, named after BookKeeper's client stats
(``bookkeeper_client_`` + ``ADD_ENTRY``, ``READ_ENTRY``, ``NUM_ENSEMBLE_CHANGE``, ...).

Each ``BookKeeper`` client gets its own ``ClientMetrics`` on its own ``CollectorRegistry`` unless
one is passed in, so tests that start several clients never collide ("Duplicated timeseries").
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from magnetar.common.batch_histogram import BatchHistogram

__all__ = ["ClientMetrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_P = "bookkeeper_client_"


class ClientMetrics:
    """Counters and latency histograms of one client (seconds for latencies).

    ``statistics()`` gives a plain-dict snapshot for logs and tests.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # observed once per add: the batch form (one lock per acknowledged run of adds)
        self.add_latency = BatchHistogram(
            _P + "ADD_ENTRY",
            "Latency of acknowledged adds, from the call to the ack",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.add_failed = Counter(_P + "ADD_ENTRY_FAILED", "Adds that failed", registry=r)
        self.read_latency = Histogram(
            _P + "READ_ENTRY", "Latency of read(first, last) calls", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.read_entries = Counter(_P + "READ_ENTRY_COUNT", "Entries returned by reads", registry=r)
        self.read_failed = Counter(_P + "READ_ENTRY_FAILED", "read(first, last) calls that failed", registry=r)
        self.speculative_reads = Counter(
            _P + "SPECULATIVE_READ_COUNT",
            "Reads also sent to the next replica after the speculative timeout",
            registry=r,
        )
        self.read_failovers = Counter(
            _P + "READ_FAILOVER_COUNT", "Reads retried on the next replica after an error", registry=r
        )
        self.ensemble_changes = Counter(
            _P + "NUM_ENSEMBLE_CHANGE", "Ensemble changes written to ledger metadata", registry=r
        )
        self.bookie_failures = Counter(
            _P + "WRITE_BOOKIE_FAILURE", "Bookies replaced in a write ensemble, by reason", ["reason"], registry=r
        )
        self.recoveries = Histogram(
            _P + "LEDGER_RECOVER", "Duration of ledger recoveries", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.recovered_entries = Counter(
            _P + "LEDGER_RECOVER_ADD_ENTRIES", "Entries re-replicated by recovery", registry=r
        )
        self.lac_long_polls = Counter(_P + "READ_LAST_CONFIRMED_AND_ENTRY", "Long-poll LAC reads sent", registry=r)
        self.explicit_lac_writes = Counter(
            _P + "WRITE_LAC", "Explicit LAC (WRITE_LAC) rounds sent by idle writers", registry=r
        )
        self.connects = Counter(_P + "CHANNEL_CONNECT", "TCP connections opened to bookies", registry=r)
        self.connect_failures = Counter(_P + "CHANNEL_CONNECT_FAILED", "Failed or lost bookie connections", registry=r)

    def statistics(self) -> dict[str, float]:
        """A snapshot: every counter's total and every histogram's count and sum."""
        out: dict[str, float] = {}
        for metric in self.registry.collect():
            for s in metric.samples:
                if s.name.endswith(("_total", "_count", "_sum")):
                    key = s.name
                    if s.labels:
                        key += "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
                    out[key] = out.get(key, 0.0) + s.value
        return out
