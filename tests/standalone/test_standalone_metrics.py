"""Broker and bookie ``/metrics`` of a real standalone, driven by the official client, and the
Grafana dashboards in ``deploy/grafana/`` checked against them: every metric a dashboard queries
must be exported, or the panel would stay empty for an operator."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
_METRIC = re.compile(r"\b((?:pulsar|bookie|bookkeeper|magnetar)_[A-Za-z0-9_]+)")
_BOOKIE_HTTP = re.compile(r"bookie \S+: protocol \S+, http (http://\S+)")


def _samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def _queried_metrics(dashboard: dict) -> set[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return {m for e in exprs for m in _METRIC.findall(e)}


def _traffic(sa: Standalone, topic: str) -> pulsar.Consumer:
    """A Shared subscription left with 10 of 30 messages unacknowledged, still connected."""
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30, logger=None)
    consumer = client.subscribe(topic, "dash-sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(f"m-{i}".encode())
    for _ in range(20):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    sa._client = client  # type: ignore[attr-defined]  # kept open: the consumer's state is measured
    return consumer


def _sub_value(samples: list[tuple[str, dict[str, str], float]], name: str, topic: str) -> float | None:
    for n, labels, value in samples:
        if n == name and labels.get("topic") == topic and labels.get("subscription") == "dash-sub":
            return value
    return None


def test_dashboards_query_only_exported_metrics_and_subscription_series_are_right(tmp_path: Path) -> None:
    # at most 10 unacked per Shared consumer: the 10 the consumer prefetched block it
    sa = start_standalone(
        tmp_path / "data",
        "--set",
        "broker.exposeConsumerLevelMetricsInPrometheus=true",
        "--set",
        "broker.exposeProducerLevelMetricsInPrometheus=true",
        "--set",
        "broker.maxUnackedMessagesPerConsumer=10",
        # rates every second (Pulsar's default period is a minute)
        "--set",
        "broker.statsUpdateFrequencyInSecs=1",
        "--set",
        "broker.statsUpdateInitialDelayInSecs=1",
    )
    try:
        topic = "persistent://public/default/dash-topic"
        consumer = _traffic(sa, topic)
        match = _BOOKIE_HTTP.search(sa.log())
        assert match, sa.log()
        bookie_url = match.group(1)

        def acked_state() -> list[tuple[str, dict[str, str], float]] | None:
            s = _samples(sa.admin_url)
            ok = (
                _sub_value(s, "pulsar_subscription_back_log", topic) == 10
                and _sub_value(s, "pulsar_subscription_unacked_messages", topic) == 10
            )
            return s if ok else None

        broker = wait_until(acked_state, "backlog 10 and 10 unacked on /metrics", timeout_s=60.0)
        assert isinstance(broker, list)
        assert _sub_value(broker, "pulsar_subscription_consumers_count", topic) == 1
        # the consumer is blocked (10 per consumer), the subscription not (its own limit is 200,000)
        assert _sub_value(broker, "pulsar_consumer_blocked_on_unacked_messages", topic) == 1
        assert _sub_value(broker, "pulsar_subscription_blocked_on_unacked_messages", topic) == 0
        # a redelivery shows as a rate once the stats updater has taken the next period
        consumer.redeliver_unacknowledged_messages()
        wait_until(
            lambda: (_sub_value(_samples(sa.admin_url), "pulsar_subscription_msg_rate_redeliver", topic) or 0) > 0,
            "a redelivery rate on /metrics",
            timeout_s=60.0,
        )
        names = {n for n, _, _ in broker}
        assert {"pulsar_consumer_unacked_messages", "pulsar_producer_msg_rate_in"} <= names
        ns_backlog = [
            v
            for n, labels, v in broker
            if n == "pulsar_ml_NumberOfMessagesInBacklog" and labels["namespace"] == "public/default"
        ]
        assert ns_backlog == [10]
        assert "bookkeeper_client_ADD_ENTRY_count" in names
        conns = {n: v for n, _, v in broker if n.startswith(("pulsar_active_connections", "pulsar_connection_"))}
        assert conns["pulsar_active_connections"] >= 1
        assert conns["pulsar_connection_created_total_count"] >= conns["pulsar_active_connections"]
        assert "pulsar_connection_closed_total_count" in conns
        bookie_names = {n for n, _, _ in _samples(bookie_url)}

        missing = {}
        for path, exported in (("broker.json", names), ("topic.json", names), ("bookie.json", bookie_names)):
            dashboard = json.loads((GRAFANA / path).read_text())
            queried = _queried_metrics(dashboard)
            assert queried, path
            if absent := sorted(queried - exported):
                missing[path] = absent
        assert not missing, f"dashboards query metrics that are not exported: {missing}"
    finally:
        client = getattr(sa, "_client", None)
        if client is not None:
            client.close()
        assert sa.stop() == 0, sa.log()


def test_namespace_level_metrics_sum_topics_and_drop_subscription_series(tmp_path: Path) -> None:
    sa = start_standalone(tmp_path / "data", "--set", "broker.exposeTopicLevelMetricsInPrometheus=false")
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30, logger=None)
        try:
            for name, count in (("ns-a", 3), ("ns-b", 4)):
                client.subscribe(name, "keep")  # a durable cursor: the messages stay in the backlog
                producer = client.create_producer(name, batching_enabled=False)
                for i in range(count):
                    producer.send(f"{name}-{i}".encode())

            def summed() -> list[tuple[str, dict[str, str], float]] | None:
                s = _samples(sa.admin_url)
                values = [(labels, v) for n, labels, v in s if n == "pulsar_msg_backlog"]
                return s if values and values[0][1] == 7 else None

            samples = wait_until(summed, "namespace backlog 3 + 4 on /metrics", timeout_s=60.0)
            assert isinstance(samples, list)
            backlog = [labels for n, labels, _ in samples if n == "pulsar_msg_backlog"]
            assert backlog == [{"cluster": "standalone", "namespace": "public/default"}]
            assert not [n for n, _, _ in samples if n.startswith("pulsar_subscription_")]
            assert not [labels for _, labels, _ in samples if "topic" in labels]
            in_total = [v for n, _, v in samples if n == "pulsar_in_messages_total"]
            assert in_total == [7]
        finally:
            client.close()
    finally:
        assert sa.stop() == 0, sa.log()
