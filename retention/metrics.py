"""Metrics of the retention service (no Pulsar names exist for these, so ``magnetar_retention_*``).

One `RetentionMetrics` per service, each with its own registry by default, so tests can create
several services in one process; the broker passes its shared registry when it exports them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["RetentionMetrics", "ERROR_STAGES"]

ERROR_STAGES = ("list", "open", "policies", "rollover", "ttl", "backlog_quota", "trim", "offload", "close")
"""Where a per-topic error happened: the ``stage`` label of ``magnetar_retention_errors_total``."""


class RetentionMetrics:
    """Counters and gauges the retention service updates."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ledgers_trimmed = Counter(
            "magnetar_retention_ledgers_trimmed", "Ledgers removed from managed ledgers by retention", registry=r
        )
        self.bytes_trimmed = Counter(
            "magnetar_retention_bytes_trimmed",
            "Bytes of the ledgers retention removed (now awaiting bookie GC)",
            registry=r,
        )
        self.runs = Counter("magnetar_retention_runs", "Passes of the retention service", registry=r)
        self.topics_checked = Counter(
            "magnetar_retention_topics_checked", "Managed ledgers checked, loaded or not", ["loaded"], registry=r
        )
        for loaded in ("true", "false"):
            self.topics_checked.labels(loaded=loaded)
        self.last_run = Gauge(
            "magnetar_retention_last_run_timestamp_seconds", "Wall time the last retention pass ended", registry=r
        )
        self.last_run_duration = Gauge(
            "magnetar_retention_last_run_duration_seconds", "Duration of the last retention pass", registry=r
        )
        self.errors = Counter("magnetar_retention_errors", "Per-topic errors, by stage", ["stage"], registry=r)
        for stage in ERROR_STAGES:
            self.errors.labels(stage=stage)
        self.idle_rollovers = Counter(
            "magnetar_retention_idle_rollovers", "Idle current ledgers rolled so retention can trim them", registry=r
        )
        self.ttl_cursor_moves = Counter(
            "magnetar_retention_ttl_cursor_moves", "Mark-delete moves made by message TTL", registry=r
        )
        self.quota_exceeded = Counter(
            "magnetar_backlog_quota_exceeded",
            "Backlog quota checks that found a quota exceeded, by type and action",
            ["type", "action"],
            registry=r,
        )
        self.quota_evictions = Counter(
            "magnetar_backlog_quota_evictions",
            "Backlog evictions (subscription moved forward), by quota type",
            ["type"],
            registry=r,
        )
