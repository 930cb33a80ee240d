"""Limit policies over the admin REST (Pulsar's paths and JSON) and their enforcement, driven with
the official client: max producers and consumers (topic and subscription), max unacked messages
per consumer and topic-level deduplication."""

from __future__ import annotations

import time

import httpx
import pulsar
import pytest

from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns


def test_namespace_limit_policies_round_trip(broker: AdminBroker, http: httpx.Client, name: str) -> None:
    ns = new_tenant_ns(http, name)
    base = f"{V2}/namespaces/{ns}"
    for policy, key in [
        ("maxProducersPerTopic", "max_producers_per_topic"),
        ("maxConsumersPerTopic", "max_consumers_per_topic"),
        ("maxConsumersPerSubscription", "max_consumers_per_subscription"),
        ("maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer"),
        ("maxUnackedMessagesPerSubscription", "max_unacked_messages_per_subscription"),
    ]:
        assert http.get(f"{base}/{policy}").status_code == 204  # unset
        assert http.post(f"{base}/{policy}", json=7).status_code == 204
        assert http.get(f"{base}/{policy}").json() == 7
        assert http.get(base).json()[key] == 7  # one GET of all policies: Pulsar's Policies JSON
        assert http.post(f"{base}/{policy}", json="x").status_code == 400
        assert http.post(f"{base}/{policy}", json=-2).status_code == 400
        assert http.delete(f"{base}/{policy}").status_code == 204
        assert http.get(f"{base}/{policy}").status_code == 204  # unset

    publish = {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000}
    assert http.post(f"{base}/publishRate", json=publish).status_code == 204
    assert http.get(f"{base}/publishRate").json() == publish
    assert http.get(base).json()["publishMaxMessageRate"] == {"standalone": publish}
    dispatch = {
        "dispatchThrottlingRateInMsg": 5,
        "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 2,
    }
    for policy, key in [
        ("dispatchRate", "topicDispatchRate"),
        ("subscriptionDispatchRate", "subscriptionDispatchRate"),
    ]:
        assert http.post(f"{base}/{policy}", json=dispatch).status_code == 204
        assert http.get(f"{base}/{policy}").json() == dispatch
        assert http.get(base).json()[key] == {"standalone": dispatch}
    bad = http.post(f"{base}/dispatchRate", json={**dispatch, "ratePeriodInSecond": 0})
    assert bad.status_code == 400 and "ratePeriodInSecond" in bad.json()["reason"]
    assert http.post(f"{base}/dispatchRate", json={**dispatch, "relativeToPublishRate": True}).status_code == 400
    subscribe = {"subscribeThrottlingRatePerConsumer": 3, "ratePeriodInSecond": 30}
    assert http.post(f"{base}/subscribeRate", json=subscribe).status_code == 204
    assert http.get(f"{base}/subscribeRate").json() == subscribe
    assert http.delete(f"{base}/publishRate").status_code == 204
    assert http.get(f"{base}/publishRate").status_code == 204  # unset

    assert http.get(f"{base}/isAllowAutoUpdateSchema").json() is True
    assert http.post(f"{base}/isAllowAutoUpdateSchema", json=False).status_code == 204
    assert http.get(f"{base}/isAllowAutoUpdateSchema").json() is False
    assert http.get(base).json()["is_allow_auto_update_schema"] is False
    assert http.post(f"{base}/isAllowAutoUpdateSchema", json="no").status_code == 400
    assert http.get(f"{V2}/namespaces/{name}/missing/maxProducersPerTopic").status_code == 404


def test_topic_limit_policies_round_trip(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    client.create_producer(name).close()
    tp = f"{V2}/persistent/public/default/{name}"
    for policy in (
        "maxProducers",
        "maxConsumers",
        "maxConsumersPerSubscription",
        "maxUnackedMessagesOnConsumer",
        "maxUnackedMessagesOnSubscription",
    ):
        assert http.get(f"{tp}/{policy}").status_code == 204  # unset
        assert http.post(f"{tp}/{policy}", json=3).status_code == 204
        assert http.get(f"{tp}/{policy}").json() == 3
        assert http.get(f"{tp}/{policy}", params={"applied": "true"}).json() == 3
        assert http.delete(f"{tp}/{policy}").status_code == 204
    # applied falls back to the broker's defaults (Pulsar's: 50000 unacked per consumer)
    assert http.get(f"{tp}/maxUnackedMessagesOnConsumer", params={"applied": "true"}).json() == 50000
    assert http.get(f"{tp}/maxProducers", params={"applied": "true"}).json() == 0
    rate = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
    assert http.post(f"{tp}/publishRate", json=rate).status_code == 204
    assert http.get(f"{tp}/publishRate").json() == rate
    dispatch = {
        "dispatchThrottlingRateInMsg": 50,
        "dispatchThrottlingRateInByte": 0,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 1,
    }
    assert http.post(f"{tp}/dispatchRate", json=dispatch).status_code == 204
    assert http.get(f"{tp}/dispatchRate", params={"applied": "true"}).json() == dispatch
    assert http.post(f"{tp}/subscriptionDispatchRate", json=dispatch).status_code == 204
    assert http.post(f"{tp}/publishRate", json=[1]).status_code == 400
    assert http.get(f"{V2}/persistent/public/default/{name}-missing/maxProducers").status_code == 404
    for policy in ("publishRate", "dispatchRate", "subscriptionDispatchRate"):
        assert http.delete(f"{tp}/{policy}").status_code == 204


def test_max_producers_and_consumers_are_enforced(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"persistent://{ns}/t"
    assert http.post(f"{V2}/namespaces/{ns}/maxProducersPerTopic", json=2).status_code == 204
    p1, p2 = client.create_producer(topic), client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    # the topic level overrides the namespace: one more is allowed
    assert http.post(f"{V2}/persistent/{ns}/t/maxProducers", json=3).status_code == 204
    p3 = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    p3.close()
    client.create_producer(topic).close()  # a freed slot is usable again

    assert http.post(f"{V2}/persistent/{ns}/t/maxConsumers", json=2).status_code == 204
    c1 = client.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Shared)
    c2 = client.subscribe(topic, "b", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "c", consumer_type=pulsar.ConsumerType.Shared)
    c2.close()
    assert http.post(f"{V2}/namespaces/{ns}/maxConsumersPerSubscription", json=1).status_code == 204
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Shared)
    client.subscribe(topic, "b", consumer_type=pulsar.ConsumerType.Shared).close()
    for p in (p1, p2):
        p.close()
    c1.close()


def test_max_unacked_messages_per_consumer_blocks_dispatch(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    client.create_producer(name).close()
    tp = f"{V2}/persistent/public/default/{name}"
    assert http.post(f"{tp}/maxUnackedMessagesOnConsumer", json=3).status_code == 204
    consumer = client.subscribe(name, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(name, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    held = [consumer.receive(timeout_millis=10000) for _ in range(3)]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1000)  # blocked at 3 unacked
    stats = http.get(f"{tp}/stats").json()["subscriptions"]["s"]
    assert stats["unackedMessages"] == 3
    for m in held:
        consumer.acknowledge(m)
    got = [consumer.receive(timeout_millis=10000) for _ in range(3)]  # acks unblock the next three
    assert [m.data() for m in held + got] == [f"m{i}".encode() for i in range(6)]
    consumer.close()
    producer.close()


def test_topic_level_deduplication(broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str) -> None:
    client.create_producer(name).close()
    tp = f"{V2}/persistent/public/default/{name}"
    assert http.get(f"{tp}/deduplicationEnabled").status_code == 204  # unset
    assert http.get(f"{tp}/deduplicationEnabled", params={"applied": "true"}).json() is False
    assert http.post(f"{tp}/deduplicationEnabled", json=True).status_code == 204
    assert http.get(f"{tp}/deduplicationEnabled", params={"applied": "true"}).json() is True
    producer = client.create_producer(name, producer_name="dup", batching_enabled=False)
    producer.send(b"a", sequence_id=5)
    producer.send(b"again", sequence_id=5)  # a duplicate: acknowledged, not stored
    producer.close()
    reader = client.create_reader(name, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=10000).data() == b"a"
    with pytest.raises(pulsar.Timeout):
        reader.read_next(timeout_millis=1000)
    reader.close()
    assert http.post(f"{tp}/deduplicationEnabled", json="yes").status_code == 400
    assert http.delete(f"{tp}/deduplicationEnabled").status_code == 204


def test_subscribe_rate_per_consumer(broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str) -> None:
    from protocols.pulsar import pulsar_api_pb2 as pb
    from tests.support.raw_pulsar import RawPeer

    client.create_producer(name).close()
    tp = f"{V2}/persistent/public/default/{name}"
    rate = {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 600}
    assert http.post(f"{tp}/subscribeRate", json=rate).status_code == 204
    assert http.get(f"{tp}/subscribeRate", params={"applied": "true"}).json() == rate
    peer = RawPeer(broker.port)
    try:
        peer.connect()
        topic = f"persistent://public/default/{name}"
        answers = []
        for request_id in range(1, 4):  # the same consumer (host, name, id) subscribing again and again
            peer.send(
                "SUBSCRIBE",
                topic=topic,
                subscription="s",
                subType=0,
                consumer_id=1,
                request_id=2 * request_id,
                consumer_name="c1",
            )
            answers.append(peer.recv())
            peer.send("CLOSE_CONSUMER", consumer_id=1, request_id=2 * request_id + 1)
            assert peer.recv().type == pb.BaseCommand.SUCCESS  # type: ignore[union-attr]
        assert [a.type for a in answers if a is not None] == [
            pb.BaseCommand.SUCCESS,
            pb.BaseCommand.SUCCESS,
            pb.BaseCommand.ERROR,
        ]
        error = answers[2].error  # type: ignore[union-attr]
        assert error.error == pb.NotAllowedError and "subscribe rate" in error.message
        # another consumer id is another consumer: the official client's new consumers subscribe freely
        client.subscribe(name, "other").close()
        client.subscribe(name, "other").close()
        client.subscribe(name, "other").close()
    finally:
        peer.close()
    assert http.delete(f"{tp}/subscribeRate").status_code == 204


def test_max_unacked_messages_per_subscription_blocks_dispatch(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    client.create_producer(name).close()
    tp = f"{V2}/persistent/public/default/{name}"
    assert http.post(f"{tp}/maxUnackedMessagesOnSubscription", json=4).status_code == 204
    consumers = [client.subscribe(name, "s", consumer_type=pulsar.ConsumerType.Shared) for _ in range(2)]
    producer = client.create_producer(name, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())

    def drain() -> list[pulsar.Message]:
        got = []
        for c in consumers:
            while True:
                try:
                    got.append((c, c.receive(timeout_millis=1000)))
                except pulsar.Timeout:
                    break
        return got

    first = drain()
    assert len(first) == 4  # both consumers together hold no more than the subscription's limit
    for c, m in first:
        c.acknowledge(m)
    seen = len(first)
    deadline = time.monotonic() + 30
    while seen < 10 and time.monotonic() < deadline:
        batch = drain()
        assert len(batch) <= 4
        for c, m in batch:
            c.acknowledge(m)
        seen += len(batch)
    assert seen == 10
    for c in consumers:
        c.close()
    producer.close()
