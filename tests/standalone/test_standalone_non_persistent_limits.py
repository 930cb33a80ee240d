"""Namespace limits and rates on a non-persistent topic of a real standalone process, with the
official client: max producers refused as on persistent topics, the publish rate pausing the
producer (its pauses counted in the stats and on ``/metrics``) without losing a message, and the
topic's series on ``/metrics`` with the counts of what was sent and delivered."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.standalone import Standalone, start_standalone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    sa = start_standalone(tmp_path_factory.mktemp("np-limits") / "data")
    try:
        yield sa
    finally:
        sa.stop()


def _metric(sa: Standalone, name: str, topic: str) -> float:
    text = httpx.get(f"{sa.admin_url}/metrics", timeout=10).text
    found = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and s.labels.get("topic") == topic
    ]
    assert len(found) == 1, (name, found)
    return found[0]


def test_limits_rates_and_metrics_of_a_non_persistent_topic(standalone: Standalone) -> None:
    sa = standalone
    v2 = f"{sa.admin_url}/admin/v2"
    assert httpx.put(f"{v2}/tenants/npl", timeout=10).status_code == 204
    assert httpx.put(f"{v2}/namespaces/npl/ns", timeout=10).status_code == 204
    rate, total = 5, 15
    for policy, body in (
        ("maxProducersPerTopic", 1),
        ("publishRate", {"publishThrottlingRateInMsg": rate, "publishThrottlingRateInByte": -1}),
    ):
        r = httpx.post(f"{v2}/namespaces/npl/ns/{policy}", json=body, timeout=10)
        assert r.status_code == 204, r.text
    topic = "non-persistent://npl/ns/t"
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
        producer = client.create_producer(
            topic, batching_enabled=False, max_pending_messages=total, block_if_queue_full=True
        )
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        results: list[pulsar.Result] = []
        for i in range(total):
            producer.send_async(f"m{i}".encode(), lambda res, _id: results.append(res))
        producer.flush()
        assert results == [pulsar.Result.Ok] * total
        got = []
        while len(got) < total:
            m = consumer.receive(timeout_millis=20_000)
            consumer.acknowledge(m)
            got.append(m.data())
        assert got == [f"m{i}".encode() for i in range(total)]  # slowed, nothing lost
        stats = httpx.get(f"{v2}/non-persistent/npl/ns/t/stats", timeout=10).json()
        # a pause per full window of `rate` messages (the last one may still be under way)
        assert stats["publishRateLimitedTimes"] >= total // rate - 1
        assert stats["subscriptions"]["s"]["msgDropCounter"] == 0
        assert _metric(sa, "pulsar_publish_rate_limit_times", topic) == stats["publishRateLimitedTimes"]
        assert _metric(sa, "pulsar_in_messages_total", topic) == total
        assert _metric(sa, "pulsar_out_messages_total", topic) == total
        assert _metric(sa, "pulsar_producers_count", topic) == 1
        assert _metric(sa, "pulsar_subscriptions_count", topic) == 1
        producer.close()
        consumer.close()
    finally:
        client.close()
