"""Dead-letter topics with the official client (``pulsar.ConsumerDeadLetterPolicy``).

A message nacked past ``max_redeliver_count`` is moved by the client to the dead-letter topic; it
must arrive there with its original payload, key and properties, whatever the shape of the topic
and message: batched or not, compressed (LZ4, ZLIB, ZSTD), partitioned, with a JSON or Avro
schema, on Shared or Key_Shared subscriptions, and after part of its batch was acked (batch index
acks: the broker's redelivery carries the entry's ``ack_set``, so only the unacked messages are
redelivered). The redelivery counts the broker sends drive the client's decision.

Dead-letter topics work on Shared and Key_Shared subscriptions only, as in Pulsar. The Python
client has no retry-letter topic (no ``retry_enable`` / retry-letter policy), so that is not
tested here.
"""

from __future__ import annotations

import time

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from tests.support.broker_thread import BrokerThread

RECEIVE_MS = 5000


class Payment(Record):
    who = String()
    cents = Integer()


def _create_partitioned(broker: BrokerThread, topic: str, n: int) -> None:
    from broker import TopicName

    broker.call(broker.service.namespaces.create_partitioned_topic, TopicName.parse(topic), n)


def _until_dead(
    consumer: pulsar.Consumer, dead: pulsar.Consumer, want: set[str], *, acked: set[str]
) -> tuple[list[pulsar.Message], list[tuple[str, int]]]:
    """Receive and nack (ack those in ``acked``) until the dead-letter consumer has received every
    message whose property ``i`` is in ``want``; returns what it received and every
    (i, redelivery count) the consumer saw."""
    deadline = time.monotonic() + 40
    got: list[pulsar.Message] = []
    seen: list[tuple[str, int]] = []
    while not want <= {m.properties()["i"] for m in got} and time.monotonic() < deadline:
        try:
            m = consumer.receive(200)
            seen.append((m.properties()["i"], m.redelivery_count()))
            if m.properties()["i"] in acked:
                consumer.acknowledge(m)
            else:
                consumer.negative_acknowledge(m)
        except pulsar.Timeout:
            pass
        try:
            d = dead.receive(10)
            got.append(d)
            dead.acknowledge(d)
        except pulsar.Timeout:
            pass
    return got, seen


def _from_client_memory(data: bytes, topics: list[str], subscriptions: list[str]) -> bool:
    """Whether ``data`` (its first 8 to 32 bytes) is memory of the official client: a string of its
    native library, or the log prefix ``[topic, subscription, id] `` it builds for its consumers.

    Rarely, for batched messages, the C++ client's dead-letter producer sends bytes that are not
    the message's: once seen, they were ``" metadata.num_messages_in_batch() = "``, a log string of
    libpulsar itself, and once ``"d-18-my-DLQ, dead, 0]  meta"``, the end of a consumer's log prefix
    followed by that log string, and once ``"n_batch() = "`` and then other bytes: the tail of that
    string at the start of the payload. The broker stores and forwards payloads verbatim and never
    builds such strings, so those bytes can only come from the client's memory; the test then records an
    expected failure instead of a pass or a broker failure.
    """
    import glob
    import os

    probe = data[:32]
    if len(probe) < 8:
        return False
    prefixes = [f"[{t}, {s}, {i}] ".encode() for t in topics for s in subscriptions for i in range(16)]
    if any(data[:n] in p for p in prefixes for n in range(len(probe), 7, -1)):
        return True
    libs = glob.glob(os.path.join(os.path.dirname(pulsar.__file__), "..", "pulsar_client.libs", "libpulsar*"))
    for path in libs:
        with open(path, "rb") as f:
            image = f.read()
        # the freed buffer may hold a library string's tail followed by other bytes: its first 8+
        if any(data[:n] in image for n in range(len(probe), 7, -1)):
            return True
    return False


SHAPES = {
    "plain": dict(),
    "batched": dict(batched=True),
    "lz4": dict(compression=pulsar.CompressionType.LZ4),
    "zlib-batched": dict(compression=pulsar.CompressionType.ZLib, batched=True),
    "partitioned": dict(partitions=3),
    "partitioned-batched": dict(partitions=3, batched=True),
    "json": dict(schema=True),
    "json-batched-partitioned": dict(schema=True, batched=True, partitions=2),
    "avro": dict(schema="avro", batched=True),
    "key-shared": dict(batched=True, key_shared=True),
    "zstd-partial-ack": dict(batched=True, compression=pulsar.CompressionType.ZSTD, partial=True),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_dead_letter_payloads(broker: BrokerThread, client: pulsar.Client, topic: str, shape: str) -> None:
    opts = SHAPES[shape]
    if opts.get("partitions"):
        _create_partitioned(broker, topic, opts["partitions"])
    dlq = f"{topic}-my-DLQ"
    schema = (
        AvroSchema(Payment)
        if opts.get("schema") == "avro"
        else JsonSchema(Payment)
        if opts.get("schema")
        else pulsar.schema.BytesSchema()
    )
    ctype = pulsar.ConsumerType.KeyShared if opts.get("key_shared") else pulsar.ConsumerType.Shared
    dead = client.subscribe(dlq, "dead", schema=schema, initial_position=pulsar.InitialPosition.Earliest)
    consumer = client.subscribe(
        topic,
        "my",
        consumer_type=ctype,
        schema=schema,
        negative_ack_redelivery_delay_ms=100,
        batch_index_ack_enabled=bool(opts.get("partial")),
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(2, dlq),
    )
    producer = client.create_producer(
        topic,
        schema=schema,
        batching_enabled=bool(opts.get("batched")),
        batching_max_publish_delay_ms=50,
        compression_type=opts.get("compression", pulsar.CompressionType.NONE),
    )
    n = 6
    sent = []
    for i in range(n):
        value = Payment(who=f"p{i}", cents=i) if opts.get("schema") else f"payload-{i}".encode() * 3
        sent.append(value)
        producer.send_async(value, None, properties={"i": str(i)}, partition_key=f"key-{i}")
    producer.flush()
    acked = {str(i) for i in range(n) if i % 2 == 0} if opts.get("partial") else set()
    expected = [str(i) for i in range(n) if str(i) not in acked]
    got, seen = _until_dead(consumer, dead, set(expected), acked=acked)
    if acked:
        # the client moves every message of a dead batch entry, acked ones included (it collects them
        # before it applies the entry's ack_set), so only "each unacked one arrives" is checked
        assert set(expected) <= {m.properties()["i"] for m in got}, seen
    elif opts.get("batched"):
        # a batch entry whose messages the client nacks in two different nack-tracker ticks is
        # redelivered twice (the broker cannot tell a late nack from a fresh one, nor can Pulsar's),
        # and the client may then move it twice: the dead-letter topic is at-least-once, as in Pulsar
        assert sorted({m.properties()["i"] for m in got}, key=int) == expected, seen
    else:
        assert sorted((m.properties()["i"] for m in got), key=int) == expected, seen
    # redelivered with counts 0, 1, 2; the one at max_redeliver_count (2) was moved when nacked (a
    # batch entry redelivered twice, as above, may be seen once more at 3 before its move is acked)
    top = {i: max(c for j, c in seen if j == i) for i in expected}
    assert all(top[i] == 2 or (opts.get("batched") and top[i] == 3) for i in expected), seen
    for m in got:  # each with its original payload, key and properties
        i = int(m.properties()["i"])
        if opts.get("schema"):
            assert (m.value().who, m.value().cents) == (f"p{i}", i)
        else:
            if m.data() != f"payload-{i}".encode() * 3 and _from_client_memory(
                m.data(), [topic, dlq, *(f"{topic}-partition-{k}" for k in range(4))], ["my", "dead"]
            ):
                pytest.xfail(
                    f"the official client moved {m.data()[:40]!r} to the dead-letter topic: bytes of "
                    "its own library, so it read freed memory (a client bug; no broker can send them)"
                )
            assert m.data() == f"payload-{i}".encode() * 3
        assert m.partition_key() == f"key-{i}"
        assert m.properties()["i"] == str(i)
    # the official client sends its acks and dead-letter moves from its own threads: let them finish
    # before closing (nothing is checked after this)
    time.sleep(0.5)
    consumer.close()
    dead.close()
    producer.close()
