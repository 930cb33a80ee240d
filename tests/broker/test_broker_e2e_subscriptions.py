"""End to end: subscription types, redelivery, seek, readers, with the official client."""

from __future__ import annotations

import time
from collections import defaultdict

import pulsar
import pytest

from tests.support.clients import RECEIVE_MS, drain, produce


def test_exclusive_refuses_second_consumer(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Shared)
    c1.close()


def test_shared_spreads_and_redelivers_on_close(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    c2 = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    produce(client, topic, 40)
    got1 = [c1.receive(RECEIVE_MS) for _ in range(5)]
    got2 = [c2.receive(RECEIVE_MS) for _ in range(5)]
    for m in got1 + got2:
        (c1 if m in got1 else c2).acknowledge(m)
    # c1 leaves holding unacked messages: they go to c2
    c1.close()
    rest = drain(c2, wait_ms=300)
    names = sorted(m.data() for m in got1 + got2 + rest)
    assert names == sorted(f"m{i}".encode() for i in range(40))
    c2.close()


def test_failover_active_consumer(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    b = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    produce(client, topic, 10)
    # delivery to a new active consumer starts activeConsumerFailoverDelayTimeMillis (1 s) after
    # the switch, as in Pulsar: wait for the first message, then drain
    got = _drain_after_switch(a)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    with pytest.raises(pulsar.Timeout):
        b.receive(300)
    # the active consumer leaves: b takes over
    a.close()
    produce(client, topic, 3)
    assert [m.data() for m in _drain_after_switch(b)] == [b"m0", b"m1", b"m2"]
    b.close()


def _drain_after_switch(consumer: pulsar.Consumer) -> list[pulsar.Message]:
    first = consumer.receive(timeout_millis=20_000)
    consumer.acknowledge(first)
    return [first, *drain(consumer, wait_ms=300)]


def test_key_shared_keeps_per_key_order(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=20)
        for _ in range(3)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(90):
        producer.send_async(f"{i % 9}:{i}".encode(), None, partition_key=f"key-{i % 9}")
    producer.flush()
    per_key: dict[str, list[int]] = defaultdict(list)
    owner: dict[str, set[int]] = defaultdict(set)
    deadline = time.monotonic() + 10
    total = 0
    while total < 90 and time.monotonic() < deadline:
        for idx, c in enumerate(consumers):
            for m in drain(c, wait_ms=100):
                key = m.partition_key()
                per_key[key].append(int(m.data().split(b":")[1]))
                owner[key].add(idx)
                total += 1
    assert total == 90
    for key, seq in per_key.items():
        assert seq == sorted(seq), key
        assert len(owner[key]) == 1, key
    assert len({next(iter(v)) for v in owner.values()}) > 1  # the keys were spread
    for c in consumers:
        c.close()


def test_key_shared_sticky_ranges(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(
        topic,
        "sticky",
        consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 32767)]),
    )
    c2 = client.subscribe(
        topic,
        "sticky",
        consumer_type=pulsar.ConsumerType.KeyShared,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(32768, 65535)]),
    )
    produce(client, topic, 30, key=lambda i: f"k{i}")
    got = drain(c1, wait_ms=300) + drain(c2, wait_ms=300)
    assert len(got) == 30
    c1.close()
    c2.close()


def test_negative_ack_redelivers_with_count(client: pulsar.Client, topic: str) -> None:
    c = client.subscribe(topic, "nack", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100)
    produce(client, topic, 1)
    m = c.receive(RECEIVE_MS)
    assert m.redelivery_count() == 0
    c.negative_acknowledge(m)
    again = c.receive(RECEIVE_MS)
    assert again.data() == m.data()
    assert again.redelivery_count() == 1
    c.acknowledge(again)
    c.close()


@pytest.mark.slow
def test_ack_timeout_redelivers(client: pulsar.Client, topic: str) -> None:
    # the client's smallest ack timeout is 10 s
    c = client.subscribe(topic, "ackto", consumer_type=pulsar.ConsumerType.Shared, unacked_messages_timeout_ms=10000)
    produce(client, topic, 2)
    first = [c.receive(RECEIVE_MS), c.receive(RECEIVE_MS)]
    c.acknowledge(first[0])
    again = c.receive(25000)
    assert again.data() == first[1].data()
    assert again.redelivery_count() >= 1
    c.acknowledge(again)
    c.close()


def test_exclusive_redeliver_all_unacked(client: pulsar.Client, topic: str) -> None:
    c = client.subscribe(topic, "redeliver", consumer_type=pulsar.ConsumerType.Exclusive)
    produce(client, topic, 3)
    got = [c.receive(RECEIVE_MS).data() for _ in range(3)]
    c.redeliver_unacknowledged_messages()
    again = [c.receive(RECEIVE_MS).data() for _ in range(3)]
    assert again == got
    c.close()


def test_subscription_persists_acks(client: pulsar.Client, topic: str) -> None:
    c = client.subscribe(topic, "durable", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 4)
    for _ in range(2):
        c.acknowledge(c.receive(RECEIVE_MS))
    c.close()
    c = client.subscribe(topic, "durable")
    assert [m.data() for m in drain(c, wait_ms=300)] == [b"m2", b"m3"]
    c.close()


def test_seek_by_message_id_and_time(client: pulsar.Client, topic: str) -> None:
    c = client.subscribe(topic, "seek", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode())
        time.sleep(0.01)  # distinct publish times
    msgs = drain(c, wait_ms=300)
    assert len(msgs) == 5
    c.seek(msgs[2].message_id())
    # the broker delivers from the sought entry on; the 4.x C++ client then drops the sought
    # message itself (it treats seek ids as exclusive), so m3 comes first
    assert [m.data() for m in drain(c, wait_ms=300)] in ([b"m2", b"m3", b"m4"], [b"m3", b"m4"])
    c.seek(pulsar.MessageId.earliest)
    assert len(drain(c, wait_ms=300)) == 5
    c.seek(msgs[3].publish_timestamp())
    assert [m.data() for m in drain(c, wait_ms=300)] == [b"m3", b"m4"]
    c.close()


def test_readers(client: pulsar.Client, topic: str) -> None:
    produce(client, topic, 5)
    r = client.create_reader(topic, pulsar.MessageId.earliest)
    ids = []
    for i in range(5):
        m = r.read_next(RECEIVE_MS)
        assert m.data() == f"m{i}".encode()
        ids.append(m.message_id())
    assert not r.has_message_available()
    r.close()

    r = client.create_reader(topic, pulsar.MessageId.latest)
    assert not r.has_message_available()
    produce(client, topic, 1)
    assert r.read_next(RECEIVE_MS).data() == b"m0"
    r.close()

    r = client.create_reader(topic, ids[2])
    assert r.read_next(RECEIVE_MS).data() == b"m3"
    r.close()
    r = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert r.read_next(RECEIVE_MS).data() == b"m2"
    r.close()


def test_unsubscribe_deletes_subscription(client: pulsar.Client, topic: str) -> None:
    c = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 2)
    c.unsubscribe()
    c = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Latest)
    with pytest.raises(pulsar.Timeout):
        c.receive(300)
    c.close()


def test_key_shared_joining_consumer_waits_for_older_messages(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "join", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"a{i}".encode(), partition_key=f"k{i}")
    first = [c1.receive(RECEIVE_MS) for _ in range(20)]  # held, not acked
    c2 = client.subscribe(topic, "join", consumer_type=pulsar.ConsumerType.KeyShared)
    for i in range(20):
        producer.send(f"b{i}".encode(), partition_key=f"k{i}")
    # c2 owns half of the keys now, but their earlier messages are unacked at c1: it must wait
    with pytest.raises(pulsar.Timeout):
        c2.receive(500)
    got1 = drain(c1, wait_ms=300)
    for m in first:
        c1.acknowledge(m)
    got2 = drain(c2, wait_ms=1000)
    assert len(got1) + len(got2) == 20 and got2
    keys1 = {m.partition_key() for m in got1}
    assert not keys1 & {m.partition_key() for m in got2}
    c1.close()
    c2.close()
