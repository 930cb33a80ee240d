"""Non-persistent topics under the limits, rates and metrics of persistent ones, driven with the
official client against a broker with its admin REST: limits set at the namespace, topic and
broker levels refused with the same errors, the publish rate pausing the producer's connection
(nothing dropped), the dispatch rates dropping and counting what is over them, and the topic,
subscription, consumer and producer series on ``/metrics``.

Rates use long windows (``ratePeriodInSecond``) where the assertion is a count, so no window can
roll during a test and every count is exact; the publish rate (one-second windows, as Pulsar's)
is checked by what the limiter counted (reads paused), never by elapsed time.
"""

from __future__ import annotations

import httpx
import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker import BrokerConfig
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns
from tests.support.clients import drain, pulsar_client
from tests.support.waiting import wait_until


def _post(http: httpx.Client, path: str, body: object) -> None:
    r = http.post(f"{V2}/{path}", json=body)
    assert r.status_code == 204, r.text


def _stats(http: httpx.Client, topic: str) -> dict:
    r = http.get(f"{V2}/non-persistent/{topic.removeprefix('non-persistent://')}/stats")
    assert r.status_code == 200, r.text
    return r.json()


def _data(consumer: pulsar.Consumer) -> list[bytes]:
    return [m.data() for m in drain(consumer)]


def _samples(http: httpx.Client) -> list[tuple[str, dict[str, str], float]]:
    text = http.get("/metrics").text
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def _value(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    found = [v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


# ------------------------------------------------------------------ count limits


def test_namespace_max_producers_and_consumers_refused_as_on_persistent_topics(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    _post(http, f"namespaces/{ns}/maxProducersPerTopic", 2)
    _post(http, f"namespaces/{ns}/maxConsumersPerTopic", 3)
    _post(http, f"namespaces/{ns}/maxConsumersPerSubscription", 2)
    # both kinds of topic answer the same: the policies are read when the topic loads
    for topic in (f"non-persistent://{ns}/t", f"persistent://{ns}/t"):
        producers = [client.create_producer(topic), client.create_producer(topic)]
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        producers.pop().close()
        producers.append(client.create_producer(topic))  # a freed slot is usable again
        shared = pulsar.ConsumerType.Shared
        consumers = [
            client.subscribe(topic, "a", consumer_type=shared),
            client.subscribe(topic, "a", consumer_type=shared),
        ]
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "a", consumer_type=shared)  # the subscription's limit
        consumers.append(client.subscribe(topic, "b", consumer_type=shared))
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "c", consumer_type=shared)  # the topic's limit
        if topic.startswith("non-persistent"):
            # a subscription made only for the refused consumer does not linger (it has none)
            assert sorted(_stats(http, topic)["subscriptions"]) == ["a", "b"]
        for x in (*producers, *consumers):
            x.close()


def test_limits_changed_while_a_non_persistent_topic_is_loaded(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"non-persistent://{ns}/t"
    first = client.create_producer(topic)  # loaded with no limit
    second = client.create_producer(topic)
    _post(http, f"namespaces/{ns}/maxProducersPerTopic", 2)  # applied to the loaded topic at once
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    assert http.delete(f"{V2}/namespaces/{ns}/maxProducersPerTopic").status_code == 204
    third = client.create_producer(topic)
    for p in (first, second, third):
        p.close()


def test_topic_level_policies_of_a_non_persistent_topic(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"non-persistent://{ns}/t"
    tp = f"{V2}/non-persistent/{ns}/t"
    assert http.post(f"{tp}/maxProducers", json=1).status_code == 404  # not loaded: it does not exist
    _post(http, f"namespaces/{ns}/maxProducersPerTopic", 1)
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    # the topic's own value overrides the namespace's, on the loaded topic at once
    assert http.post(f"{tp}/maxProducers", json=2).status_code == 204
    assert http.get(f"{tp}/maxProducers").json() == 2
    assert http.get(f"{tp}/maxProducers", params={"applied": "true"}).json() == 2
    second = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    assert http.post(f"{tp}/maxProducers", json="x").status_code == 400
    rate = {
        "dispatchThrottlingRateInMsg": 2,
        "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 600,
    }
    assert http.post(f"{tp}/dispatchRate", json=rate).status_code == 204
    assert http.get(f"{tp}/dispatchRate", params={"applied": "true"}).json() == rate
    consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
    for i in range(4):
        first.send(f"m{i}".encode())
    assert _data(consumer) == [b"m0", b"m1"]
    assert _stats(http, topic)["subscriptions"]["s"]["msgDropCounter"] == 2
    assert http.delete(f"{tp}/dispatchRate").status_code == 204
    assert http.delete(f"{tp}/maxProducers").status_code == 204
    for x in (first, second, consumer):
        x.close()


def test_deleting_a_non_persistent_topic_drops_its_topic_level_policies(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    topic, tp = f"non-persistent://{ns}/t", f"{V2}/non-persistent/{ns}/t"
    producer = client.create_producer(topic)
    assert http.post(f"{tp}/maxProducers", json=1).status_code == 204
    assert http.delete(tp, params={"force": "true"}).status_code == 204
    producer.close()
    # created anew under the same name, the topic no longer carries the deleted one's limit
    producers = [client.create_producer(topic), client.create_producer(topic)]
    r = http.get(f"{tp}/maxProducers")
    assert r.status_code == 204, (r.status_code, r.text)  # nothing set on the topic
    for p in producers:
        p.close()

    # a partitioned topic: the partitions' overrides and its own go with it
    assert http.put(f"{V2}/non-persistent/{ns}/pt/partitions", json=2).status_code == 204
    part = f"non-persistent://{ns}/pt-partition-1"
    first = client.create_producer(part)
    assert http.post(f"{V2}/non-persistent/{ns}/pt-partition-1/maxProducers", json=1).status_code == 204
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(part)
    # refused while a client is attached; a partition left loaded by closed clients is no obstacle
    assert http.delete(f"{V2}/non-persistent/{ns}/pt/partitions").status_code == 412
    first.close()
    assert http.delete(f"{V2}/non-persistent/{ns}/pt/partitions").status_code == 204
    assert http.put(f"{V2}/non-persistent/{ns}/pt/partitions", json=2).status_code == 204
    again = [client.create_producer(part), client.create_producer(part)]
    for p in again:
        p.close()


def test_broker_config_limits_apply_to_non_persistent_topics() -> None:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        max_producers_per_topic=1,
        max_consumers_per_subscription=1,
    )
    with AdminBroker(config) as b, pulsar_client(b.url) as client:
        topic = "non-persistent://public/default/cfg"
        producer = client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        consumer.close()
        producer.close()


# ------------------------------------------------------------------ rates


def test_publish_rate_pauses_the_producer_and_loses_nothing(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    rate, total = 5, 20
    _post(http, f"namespaces/{ns}/publishRate", {"publishThrottlingRateInMsg": rate, "publishThrottlingRateInByte": -1})
    topic = f"non-persistent://{ns}/t"
    consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
    producer = client.create_producer(
        topic, batching_enabled=False, max_pending_messages=total, block_if_queue_full=True
    )
    np_topic = broker.service.np_topics[topic]  # type: ignore[union-attr]
    assert np_topic.publish_limiter.max_msgs == rate
    results: list[pulsar.Result] = []
    for i in range(total):
        producer.send_async(f"m{i}".encode(), lambda res, _id: results.append(res))
    producer.flush()
    assert results == [pulsar.Result.Ok] * total
    # the connection's reads paused once per full window: the producer was slowed ...
    assert np_topic.publish_limiter.throttled >= total // rate - 1
    # ... and nothing it sent was dropped on the way
    assert _data(consumer) == [f"m{i}".encode() for i in range(total)]
    stats = _stats(http, topic)
    assert stats["msgInCounter"] == total and stats["subscriptions"]["s"]["msgDropCounter"] == 0
    # the pauses are visible as in Pulsar: the stats' count and its Prometheus series
    paused = np_topic.publish_limiter.throttled
    assert stats["publishRateLimitedTimes"] == paused
    assert _value(_samples(http), "pulsar_publish_rate_limit_times", topic=topic) == paused
    producer.close()
    consumer.close()


def test_topic_dispatch_rate_drops_and_counts_the_excess(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    # a window far longer than the test: the counts below are exact
    _post(
        http,
        f"namespaces/{ns}/dispatchRate",
        {
            "dispatchThrottlingRateInMsg": 5,
            "dispatchThrottlingRateInByte": -1,
            "relativeToPublishRate": False,
            "ratePeriodInSecond": 600,
        },
    )
    topic = f"non-persistent://{ns}/t"
    a = client.subscribe(topic, "a", receiver_queue_size=1000)
    b = client.subscribe(topic, "b", receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got_a, got_b = _data(a), _data(b)
    # the topic's rate bounds what all its subscriptions get together
    assert len(got_a) + len(got_b) == 5
    subs = _stats(http, topic)["subscriptions"]
    assert subs["a"]["msgDropCounter"] == 10 - len(got_a) and subs["b"]["msgDropCounter"] == 10 - len(got_b)
    assert subs["a"]["msgOutCounter"] == len(got_a) and subs["b"]["msgOutCounter"] == len(got_b)
    # lifting the rate lets the next messages through to both
    assert http.delete(f"{V2}/namespaces/{ns}/dispatchRate").status_code == 204
    producer.send(b"after")
    assert _data(a) == [b"after"] and _data(b) == [b"after"]
    for x in (producer, a, b):
        x.close()


def test_subscription_dispatch_rate_applies_per_subscription(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"non-persistent://{ns}/t"
    a = client.subscribe(topic, "a", receiver_queue_size=1000)
    b = client.subscribe(topic, "b", receiver_queue_size=1000)
    # set while the topic and its subscriptions are loaded: they take it at once
    _post(
        http,
        f"namespaces/{ns}/subscriptionDispatchRate",
        {
            "dispatchThrottlingRateInMsg": 3,
            "dispatchThrottlingRateInByte": -1,
            "relativeToPublishRate": False,
            "ratePeriodInSecond": 600,
        },
    )
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(8):
        producer.send(f"m{i}".encode())
    expected = [f"m{i}".encode() for i in range(3)]
    assert _data(a) == expected and _data(b) == expected
    subs = _stats(http, topic)["subscriptions"]
    assert subs["a"]["msgDropCounter"] == 5 and subs["b"]["msgDropCounter"] == 5
    for x in (producer, a, b):
        x.close()


# ------------------------------------------------------------------ metrics


def test_topic_metrics_of_non_persistent_topics(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"non-persistent://{ns}/t"
    a = client.subscribe(topic, "a", receiver_queue_size=1000)
    b = client.subscribe(topic, "b", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(7):
        producer.send(f"m{i}".encode(), partition_key="k")
    assert len(_data(a)) == 7 and len(_data(b)) == 7
    size = _stats(http, topic)["bytesInCounter"]
    s = _samples(http)
    labels = {"cluster": "standalone", "namespace": ns, "topic": topic}
    assert _value(s, "pulsar_in_messages_total", **labels) == 7
    assert _value(s, "pulsar_in_bytes_total", **labels) == size
    for sub in ("a", "b"):  # per subscription, as Pulsar exports them
        assert _value(s, "pulsar_out_messages_total", **labels, subscription=sub) == 7
        assert _value(s, "pulsar_out_bytes_total", **labels, subscription=sub) == size
    assert _value(s, "pulsar_producers_count", **labels) == 1
    assert _value(s, "pulsar_consumers_count", **labels) == 2
    assert _value(s, "pulsar_subscriptions_count", **labels) == 2
    assert _value(s, "pulsar_msg_backlog", **labels) == 0 and _value(s, "pulsar_storage_size", **labels) == 0
    assert _value(s, "pulsar_publish_rate_limit_times", **labels) == 0  # no publish rate set
    for sub in ("a", "b"):
        assert _value(s, "pulsar_subscription_consumers_count", **labels, subscription=sub) == 1
        assert _value(s, "pulsar_subscription_back_log", **labels, subscription=sub) == 0
        _value(s, "pulsar_subscription_msg_rate_out", **labels, subscription=sub)
        _value(s, "pulsar_subscription_msg_drop_rate", **labels, subscription=sub)
    _value(s, "pulsar_rate_in", **labels)
    _value(s, "pulsar_rate_out", **labels)
    assert _value(s, "pulsar_topics_count", cluster="standalone", namespace=ns) == 1
    # no managed ledger: not in the namespace's managed-ledger gauges
    assert not [v for n, lab, v in s if n == "pulsar_ml_AddEntryMessagesRate" and lab.get("namespace") == ns]
    # the closed consumer's subscription is gone, and its series with it; the topic's total stays
    b.close()
    wait_until(lambda: _value(_samples(http), "pulsar_subscriptions_count", **labels) == 1, "b to go")
    assert not [
        lab
        for n, lab, _ in _samples(http)
        if n == "pulsar_out_messages_total" and lab.get("subscription") == "b" and lab.get("topic") == topic
    ]
    assert _value(_samples(http), "pulsar_out_messages_total", **labels, subscription="a") == 7
    assert _stats(http, topic)["msgOutCounter"] == 14
    producer.close()
    a.close()


def test_namespace_level_metrics_sum_both_kinds_of_topic() -> None:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        expose_topic_level_metrics_in_prometheus=False,
    )
    with AdminBroker(config) as b, pulsar_client(b.url) as client, httpx.Client(base_url=b.http, timeout=10) as http:
        for topic, n in (("non-persistent://public/default/np", 4), ("persistent://public/default/p", 3)):
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(n):
                producer.send(f"m{i}".encode())
            producer.close()
        s = _samples(http)
        labels = {"cluster": "standalone", "namespace": "public/default"}
        assert _value(s, "pulsar_in_messages_total", **labels) == 7
        assert _value(s, "pulsar_topics_count", **labels) == 2
        assert not [lab for n, lab, _ in s if n == "pulsar_in_messages_total" and "topic" in lab]


async def _update_rates(b: AdminBroker) -> None:
    assert b.service is not None
    b.service.stats.update()


def test_consumer_and_producer_level_metrics_of_non_persistent_topics() -> None:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        expose_consumer_level_metrics_in_prometheus=True,
        expose_producer_level_metrics_in_prometheus=True,
    )
    with AdminBroker(config) as b, pulsar_client(b.url) as client, httpx.Client(base_url=b.http, timeout=10) as http:
        topic = "non-persistent://public/default/levels"
        consumer = client.subscribe(topic, "s", consumer_name="c1", receiver_queue_size=1000)
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        assert len(_data(consumer)) == 3
        b.call(_update_rates, b)  # rates are the stats updater's (`broker.topics._stats` Rule 3)
        s = _samples(http)
        base = {"cluster": "standalone", "namespace": "public/default", "topic": topic}
        size = _stats(http, topic)["bytesInCounter"]
        assert _value(s, "pulsar_producer_msg_average_Size", **base, producer_name="p1") == size / 3
        c_labels = {**base, "subscription": "s", "consumer_name": "c1"}
        assert _value(s, "pulsar_consumer_unacked_messages", **c_labels) == 0
        _value(s, "pulsar_consumer_msg_rate_out", **c_labels)
        assert _value(s, "pulsar_consumer_available_permits", **c_labels) > 0
        producer.close()
        consumer.close()
