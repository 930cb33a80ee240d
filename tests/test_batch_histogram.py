"""`magnetar.common.batch_histogram.BatchHistogram` exposes what a prometheus-client Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from magnetar.common.batch_histogram import BatchHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)
VALUES = [0.0005, 0.001, 0.002, 0.05, 0.05, 0.5, 3.0]


def _lines(registry: CollectorRegistry) -> list[str]:
    return [
        line
        for line in generate_latest(registry).decode().splitlines()
        if not line.startswith("#") and "_created" not in line
    ]


def test_same_exposition_as_prometheus_client_histogram() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batch = BatchHistogram("x_latency", "doc", BUCKETS, ours, labels={"cluster": "c1"})
    reference = Histogram("x_latency", "doc", ["cluster"], buckets=BUCKETS, registry=theirs).labels(cluster="c1")
    batch.observe(VALUES[0])
    batch.observe_many(VALUES[1:])
    for v in VALUES:
        reference.observe(v)
    assert _lines(ours) == _lines(theirs)
    assert batch.count() == len(VALUES)


def test_without_labels_and_bound_is_inclusive() -> None:
    registry = CollectorRegistry()
    batch = BatchHistogram("y", "doc", BUCKETS, registry)
    batch.observe_many([0.01, 0.01])
    batch.observe_many([])
    assert registry.get_sample_value("y_bucket", {"le": "0.01"}) == 2
    assert registry.get_sample_value("y_bucket", {"le": "0.001"}) == 0
    assert registry.get_sample_value("y_count") == 2
    assert registry.get_sample_value("y_sum") == 0.02
