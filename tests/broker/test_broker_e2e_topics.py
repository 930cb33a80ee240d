"""End to end: namespaces, partitioned topics, pattern subscriptions, schemas, dedup, access modes,
delayed delivery and a malformed frame, with the official client."""

from __future__ import annotations

import re
import socket
import struct
import threading
import time

import pulsar
import pytest
from pulsar.schema import Integer, JsonSchema, Record, String

from broker import NamespaceName, TopicName
from tests.support.broker_thread import BrokerThread
from tests.support.clients import RECEIVE_MS, drain, produce


def _create_namespace(broker: BrokerThread, ns: str, policies: dict | None = None) -> None:
    async def go() -> None:
        name = NamespaceName.parse(ns)
        res = broker.service.namespaces
        if not await res.tenant_exists(name.tenant):
            await res.create_tenant(name.tenant)
        if policies is None:
            await res.create_namespace(name)
        else:
            from broker.resources._namespaces import default_policies

            await res.create_namespace(name, {**default_policies("standalone"), **policies})

    broker.call(go)


def test_unknown_namespace_is_refused(client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://no-such-tenant/ns/t")


def test_auto_creation_disabled_by_namespace_policy(broker: BrokerThread, client: pulsar.Client) -> None:
    _create_namespace(broker, "t-noauto/ns", {"autoTopicCreationOverride": {"allowAutoTopicCreation": False}})
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://t-noauto/ns/t")


def test_partitioned_topic(broker: BrokerThread, client: pulsar.Client, topic: str) -> None:
    broker.call(broker.service.namespaces.create_partitioned_topic, TopicName.parse(topic), 3)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "p", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    for i in range(30):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    got = drain(consumer, wait_ms=300)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(30))
    assert {m.topic_name() for m in got} == {f"{topic}-partition-{i}" for i in range(3)}
    # each id names its partition (as Pulsar's dispatcher sets it), so acks and seeks route by id
    for m in got:
        assert m.message_id().partition() == int(m.topic_name().rsplit("-", 1)[1])
    producer.close()
    consumer.close()
    reader = client.create_reader(f"{topic}-partition-1", pulsar.MessageId.earliest)
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=5000).message_id().partition() == 1
    reader.close()


def test_pattern_subscription(broker: BrokerThread, client: pulsar.Client) -> None:
    _create_namespace(broker, "public/pattern")
    for name in ("orders-a", "orders-b", "other"):
        produce(client, f"persistent://public/pattern/{name}", 1)
    consumer = client.subscribe(
        re.compile("persistent://public/pattern/orders-.*"), "pat", initial_position=pulsar.InitialPosition.Earliest
    )
    got = drain(consumer, wait_ms=1000)
    assert sorted(m.topic_name() for m in got) == [
        "persistent://public/pattern/orders-a",
        "persistent://public/pattern/orders-b",
    ]
    consumer.close()


class User(Record):
    name = String()
    age = Integer()


UserV2 = type("User", (Record,), {"name": String()})  # the client names the record after the class


def test_json_schema(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, schema=JsonSchema(User))
    consumer = client.subscribe(
        topic, "schema", schema=JsonSchema(User), initial_position=pulsar.InitialPosition.Earliest
    )
    producer.send(User(name="ann", age=3))
    msg = consumer.receive(RECEIVE_MS)
    assert msg.value().name == "ann" and msg.value().age == 3
    consumer.acknowledge(msg)
    # a different record (field 'age' dropped without a default) is refused under FULL
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(UserV2))
    producer.close()
    consumer.close()


def test_deduplication(broker: BrokerThread, client: pulsar.Client) -> None:
    _create_namespace(broker, "public/dedup", {"deduplicationEnabled": True})
    topic = "persistent://public/dedup/t"
    producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode(), sequence_id=i)
    producer.close()
    # the same producer name again: the broker reports its last sequence id and drops repeats
    producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
    assert producer.last_sequence_id() == 2
    producer.send(b"dup", sequence_id=1)
    producer.send(b"m3", sequence_id=3)
    producer.close()
    consumer = client.subscribe(topic, "d", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in drain(consumer, wait_ms=300)] == [b"m0", b"m1", b"m2", b"m3"]
    consumer.close()


def test_access_modes(client: pulsar.Client, topic: str) -> None:
    """As Pulsar's broker: a Shared or Exclusive producer next to an exclusive holder gets
    ProducerBusy / ProducerFenced; ExclusiveWithFencing takes over and the old holder is fenced."""
    exclusive = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive, send_timeout_millis=3000)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Shared)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    fencing = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    fencing.send(b"x")
    with pytest.raises(pulsar.ProducerFenced):
        exclusive.send(b"y")
    fencing.close()
    shared = client.create_producer(topic)
    shared.send(b"z")
    with pytest.raises(pulsar.ProducerFenced):  # refused next to a shared producer too
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    shared.close()


def test_wait_for_exclusive_is_queued_until_the_holder_leaves(client: pulsar.Client, topic: str) -> None:
    holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    created: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: created.append(
            client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)
        )
    )
    waiter.start()
    time.sleep(1.0)  # nothing should happen: a bounded chance for the waiter to be (wrongly) created
    assert not created  # parked while the holder is connected
    with pytest.raises(pulsar.ProducerBusy):  # a waiting exclusive producer keeps shared ones out
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Shared)
    holder.send(b"first")
    holder.close()
    waiter.join(10)
    assert created, "the WaitForExclusive producer was not promoted"
    created[0].send(b"second")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    created[0].close()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(2)] == [b"first", b"second"]
    reader.close()


def test_exclusive_with_fencing_fails_a_waiting_producer(client: pulsar.Client, topic: str) -> None:
    holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive)
        except BaseException as exc:  # recorded for the assertion below
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1.0)  # the waiter's request reaches the broker and is parked (no event shows it)
    fencing = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    waiter.join(10)
    assert len(errors) == 1 and isinstance(errors[0], pulsar.ProducerFenced), errors
    with pytest.raises(pulsar.ProducerFenced):
        holder.send(b"late")
    fencing.send(b"ok")
    fencing.close()


def test_topic_epoch_survives_unload(broker: BrokerThread, client: pulsar.Client, topic: str) -> None:
    """The topic epoch is stored with the managed ledger (``pulsar.topic.epoch``), so a reloaded
    topic (new owner, restart) goes on from it, and a producer fenced before still is."""
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive, send_timeout_millis=3000)
    first.send(b"a")
    assert broker.service.topics[topic].topic_epoch == 0
    fencing = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    assert broker.service.topics[topic].topic_epoch == 1

    async def unload() -> None:
        await broker.service.unload(broker.service.topics[topic])

    broker.call(unload)
    fencing.send(b"b")  # reconnects to the reloaded topic with its epoch 1: still the holder
    assert broker.service.topics[topic].topic_epoch == 1
    assert broker.service.topics[topic].ml.properties["pulsar.topic.epoch"] == "1"
    with pytest.raises(pulsar.ProducerFenced):
        first.send(b"c")
    fencing.close()
    broker.call(unload)
    again = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    assert broker.service.topics[topic].topic_epoch == 2
    again.close()


def test_delayed_delivery_shared(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "delay", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    start = time.time()
    producer.send(b"later", deliver_after=__import__("datetime").timedelta(milliseconds=800))
    producer.send(b"now")
    assert consumer.receive(RECEIVE_MS).data() == b"now"
    msg = consumer.receive(RECEIVE_MS)
    assert msg.data() == b"later"
    assert time.time() - start >= 0.7
    consumer.close()


def test_batch_messages_consumed_and_acked(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "batch", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    produce(client, topic, 10, batching=True)
    got = [consumer.receive(RECEIVE_MS) for _ in range(10)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    for m in got[:5]:
        consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "batch", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
    rest = drain(consumer, wait_ms=300)
    assert [m.data() for m in rest] == [f"m{i}".encode() for i in range(5, 10)]
    consumer.close()


def test_malformed_frame_closes_only_its_connection(broker: BrokerThread, client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(struct.pack(">II", 12, 8) + b"\xff" * 8)  # cmdSize fits, BaseCommand is garbage
        assert sock.recv(100) == b""  # the broker closed it
    producer.send(b"still fine")
    producer.close()


def test_auto_created_partitioned_topic(broker: BrokerThread, client: pulsar.Client) -> None:
    _create_namespace(
        broker,
        "public/autopart",
        {
            "autoTopicCreationOverride": {
                "allowAutoTopicCreation": True,
                "topicType": "partitioned",
                "defaultNumPartitions": 2,
            }
        },
    )
    topic = "persistent://public/autopart/t"
    producer = client.create_producer(topic)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-0", f"{topic}-partition-1"]
    producer.close()


def test_cumulative_ack(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "cumul", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 5)
    msgs = [consumer.receive(RECEIVE_MS) for _ in range(5)]
    consumer.acknowledge_cumulative(msgs[2])
    consumer.close()
    consumer = client.subscribe(topic, "cumul")
    assert [m.data() for m in drain(consumer, wait_ms=300)] == [b"m3", b"m4"]
    consumer.close()


def test_unload_and_reload_keeps_data_subscriptions_and_dedup(broker: BrokerThread, client: pulsar.Client) -> None:
    _create_namespace(broker, "public/reload", {"deduplicationEnabled": True})
    topic = "persistent://public/reload/t"
    consumer = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, producer_name="rp", batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode(), sequence_id=i)
    consumer.acknowledge(consumer.receive(RECEIVE_MS))
    consumer.close()
    producer.close()

    async def unload() -> None:
        t = broker.service.topics[topic]
        await broker.service.unload(t)

    broker.call(unload)
    assert topic not in broker.service.topics
    producer = client.create_producer(topic, producer_name="rp", batching_enabled=False)
    assert producer.last_sequence_id() == 2
    producer.send(b"dup", sequence_id=2)
    producer.send(b"m3", sequence_id=3)
    producer.close()
    consumer = client.subscribe(topic, "keep")
    assert [m.data() for m in drain(consumer, wait_ms=300)] == [b"m1", b"m2", b"m3"]
    consumer.close()


def test_topics_of_namespace_lists_partitions(broker: BrokerThread) -> None:
    _create_namespace(broker, "public/listing")
    broker.call(broker.service.namespaces.create_partitioned_topic, TopicName.parse("persistent://public/listing/p"), 2)
    names = broker.call(broker.service.topics_of_namespace, NamespaceName.parse("public/listing"))
    assert names == ["persistent://public/listing/p-partition-0", "persistent://public/listing/p-partition-1"]
