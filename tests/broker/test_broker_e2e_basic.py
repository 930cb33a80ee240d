"""End to end with the official pulsar-client: connect, produce, consume."""

from __future__ import annotations

import pulsar
import pytest


@pytest.mark.parametrize("batching", [False, True])
def test_produce_consume(client: pulsar.Client, topic: str, batching: bool) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=5)
    sent = [f"msg-{i}".encode() for i in range(20)]
    if batching:
        for m in sent:
            producer.send_async(m, None)
        producer.flush()
    else:
        for m in sent:
            producer.send(m)
    got = []
    for _ in sent:
        msg = consumer.receive(timeout_millis=5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == sent
    producer.close()
    consumer.close()


def test_many_messages_in_order_with_flow_control(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", receiver_queue_size=50)
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=500, block_if_queue_full=True)
    n = 1500
    for i in range(n):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    got = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=5000)
        got.append(int(msg.data()))
        consumer.acknowledge(msg)
    assert got == list(range(n))
