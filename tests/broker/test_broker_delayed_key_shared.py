"""Delayed delivery on Key_Shared subscriptions and client-driven redelivery, with the official client.

Delayed messages (``deliver_after`` / ``deliver_at``) on Key_Shared are held by the broker until
due, then go to the consumer that owns their key; messages of the key sent without a delay are
not held back by them (Pulsar's behaviour). Negative-ack and ack-timeout redelivery timing comes
from the client: the installed ``pulsar-client`` exposes only the fixed
``negative_ack_redelivery_delay_ms`` and ``unacked_messages_timeout_ms`` (no backoff objects), and
both work against Magnetar here.
"""

from __future__ import annotations

import datetime
import time

import pulsar

RECEIVE_MS = 10_000


def _key_shared(client: pulsar.Client, topic: str, name: str, **kw: object) -> pulsar.Consumer:
    return client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name, **kw)  # type: ignore[arg-type]


def _drain(consumers: dict[str, pulsar.Consumer], want: int, bound_s: float = 30.0) -> list[tuple[str, pulsar.Message]]:
    """Receive ``want`` messages from any of ``consumers`` (acking each), in arrival order."""
    got: list[tuple[str, pulsar.Message]] = []
    deadline = time.monotonic() + bound_s
    while len(got) < want and time.monotonic() < deadline:
        for name, c in consumers.items():
            try:
                m = c.receive(50)
            except pulsar.Timeout:
                continue
            c.acknowledge(m)
            got.append((name, m))
    return got


def test_delayed_messages_on_key_shared_go_to_the_keys_consumer_when_due(client: pulsar.Client, topic: str) -> None:
    consumers = {n: _key_shared(client, topic, n) for n in ("a", "b")}
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(8)]
    sent_at = time.time()
    for k in keys:
        producer.send(f"{k}:late".encode(), partition_key=k, deliver_after=datetime.timedelta(milliseconds=1500))
        producer.send(f"{k}:now".encode(), partition_key=k)
    got = _drain(consumers, 2 * len(keys))
    assert len(got) == 2 * len(keys)
    owner: dict[str, str] = {}
    order: dict[str, list[str]] = {}
    for name, m in got:
        k, what = m.data().decode().split(":")
        assert m.partition_key() == k
        # every message of a key (delayed or not) goes to the same consumer
        assert owner.setdefault(k, name) == name
        order.setdefault(k, []).append(what)
        if what == "late":
            assert m.publish_timestamp() / 1000.0 + 1.4 <= time.time()
    # an undelayed message is not held back behind its key's delayed one
    assert all(order[k] == ["now", "late"] for k in keys), order
    assert time.time() - sent_at >= 1.4
    assert set(owner.values()) <= {"a", "b"}


def test_delayed_message_on_key_shared_is_kept_until_due_across_consumer_restarts(
    client: pulsar.Client, topic: str
) -> None:
    consumer = _key_shared(client, topic, "a")
    producer = client.create_producer(topic, batching_enabled=False)
    due = int(time.time() * 1000) + 2000
    producer.send(b"at", partition_key="k", deliver_at=due)
    producer.send(b"plain", partition_key="k")
    plain = consumer.receive(RECEIVE_MS)
    assert plain.data() == b"plain"
    consumer.acknowledge(plain)
    consumer.close()  # the delayed message is still unacked in the subscription
    consumer = _key_shared(client, topic, "b")
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"at"
    assert time.time() * 1000 >= due - 100
    consumer.acknowledge(m)
    consumer.close()


def test_negative_ack_on_key_shared_redelivers_after_the_clients_delay(client: pulsar.Client, topic: str) -> None:
    consumer = _key_shared(client, topic, "a", negative_ack_redelivery_delay_ms=300)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"m", partition_key="k")
    first = consumer.receive(RECEIVE_MS)
    nacked_at = time.time()
    consumer.negative_acknowledge(first)
    again = consumer.receive(RECEIVE_MS)
    assert again.data() == b"m" and again.redelivery_count() == 1
    assert time.time() - nacked_at >= 0.25  # the client waits its delay before asking the broker
    consumer.acknowledge(again)
    consumer.close()


def test_ack_timeout_on_key_shared_redelivers_unacked_messages(client: pulsar.Client, topic: str) -> None:
    consumer = _key_shared(client, topic, "a", unacked_messages_timeout_ms=10_000)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"m", partition_key="k")
    first = consumer.receive(RECEIVE_MS)
    assert first.redelivery_count() == 0
    again = consumer.receive(30_000)  # not acked: the client asks for it again after its timeout
    assert again.data() == b"m" and again.redelivery_count() >= 1
    consumer.acknowledge(again)
    consumer.close()
