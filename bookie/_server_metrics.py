"""Prometheus metrics of the bookie core and its request server (to merge into ``bookie/metrics.py``).

Names follow BookKeeper's BookKeeperServerStats where one exists: ``bookie_server_ADD_ENTRY_REQUEST``
(add latency from the request arriving to its response being queued), ``READ_ENTRY_REQUEST``,
``bookie_SERVER_STATUS`` (1 writable, 0 read-only). Latencies are in milliseconds and use the
batch histogram of ``bookie.metrics`` so that tens of thousands of adds per second cost one lock
per batch of responses, not one per add.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from .metrics import LATENCY_MS_BUCKETS, BatchHistogram

__all__ = ["BookieServerMetrics"]


class BookieServerMetrics:
    """Request, state and disk metrics of one bookie; one instance per `Bookie`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        p = "bookie_server_"
        self.add_request = BatchHistogram(p + "ADD_ENTRY_REQUEST", "Add latency, request read to response queued (ms)",
                                          LATENCY_MS_BUCKETS, r)
        self.read_request = BatchHistogram(p + "READ_ENTRY_REQUEST",
                                           "Read latency, request read to response queued (ms)",
                                           LATENCY_MS_BUCKETS, r)
        self.requests = Counter(p + "requests", "Requests answered, by operation and status",
                                ["operation", "status"], registry=r)
        self.add_bytes = Counter(p + "ADD_ENTRY_BYTES", "Entry bytes acknowledged", registry=r)
        self.read_bytes = Counter(p + "READ_ENTRY_BYTES", "Entry bytes returned by reads", registry=r)
        self.connections = Gauge(p + "connections", "Open client connections", registry=r)
        self.malformed_frames = Counter(p + "malformed_frames",
                                        "Connections closed because of a malformed or oversized frame",
                                        registry=r)
        self.in_flight_requests = Gauge(p + "in_flight_requests", "Requests read and not yet answered",
                                        registry=r)
        self.long_poll_waiters = Gauge(p + "long_poll_waiters", "Long-poll reads waiting for the LAC",
                                       registry=r)
        self.server_status = Gauge("bookie_SERVER_STATUS", "1 when the bookie is writable, 0 when read-only",
                                   registry=r)
        self.read_only_reasons = Gauge("bookie_read_only_reason", "Read-only reasons in force (1 = set)",
                                       ["reason"], registry=r)
        self.disk_usage = Gauge("bookie_disk_usage", "Used fraction of the file system of each directory",
                                ["dir"], registry=r)
        self.state_changes = Counter("bookie_state_changes", "Transitions between writable and read-only",
                                     registry=r)
