"""Wire compatibility with the official Pulsar client (pulsar-client on PyPI, C++ core).

A fake broker built on ``protocols.pulsar`` answers the client's handshake, lookup, producer
creation and sends; the test then checks what arrived: decoded metadata, payload bytes,
batches split back into messages, and verified checksums. A consumer then receives the stored
entries re-framed by ``encode_payload_command_raw`` (with and without BrokerEntryMetadata).
The client runs in-process (C++ library in a worker thread), so these tests take well under a
second and are not marked slow.
"""

from __future__ import annotations

import time

import pytest
import trio

from protocols.pulsar import MessageMetadata, split_batch
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.protocol_pulsar.fake_broker import FakeBroker

pulsar = pytest.importorskip("pulsar")

T = pb.BaseCommand
TOPIC = "persistent://public/default/wire-compat"


def _publish(port: int) -> None:
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{port}",
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        plain = client.create_producer(TOPIC, producer_name="plain-producer", batching_enabled=False)
        for i in range(3):
            plain.send(f"plain-{i}".encode(), properties={"i": str(i)}, partition_key=f"key-{i}")
        plain.close()

        batched = client.create_producer(
            TOPIC,
            producer_name="batch-producer",
            batching_enabled=True,
            batching_max_messages=4,
            batching_max_publish_delay_ms=1000,
        )
        for i in range(4):
            batched.send_async(f"batch-{i}".encode(), None, properties={"n": str(i)})
        batched.flush()
        batched.close()
    finally:
        client.close()


@pytest.mark.timeout(60)
async def test_official_client_publishes_through_our_codec() -> None:
    broker = FakeBroker()
    before_ms = int(time.time() * 1000)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(broker.serve)
        await trio.to_thread.run_sync(_publish, port)
        nursery.cancel_scope.cancel()
    after_ms = int(time.time() * 1000)

    assert broker.errors == []
    types = [f.type for f in broker.frames]
    assert types[0] == T.CONNECT
    connect = broker.frames[0].command.connect
    assert connect.protocol_version >= 6 and connect.client_version
    assert T.PARTITIONED_METADATA in types and T.LOOKUP in types
    producers = [f.command.producer for f in broker.frames if f.type == T.PRODUCER]
    assert [p.producer_name for p in producers] == ["plain-producer", "batch-producer"]
    assert types.count(T.CLOSE_PRODUCER) == 2

    sends = [f for f in broker.frames if f.type == T.SEND]
    by_producer = {p.producer_id: p.producer_name for p in producers}
    plain = [f for f in sends if by_producer[f.command.send.producer_id] == "plain-producer"]
    batched = [f for f in sends if by_producer[f.command.send.producer_id] == "batch-producer"]

    # Non-batched: one message per SEND, checksummed, metadata decoded.
    assert [f.payload for f in plain] == [b"plain-0", b"plain-1", b"plain-2"]
    for i, frame in enumerate(plain):
        meta = frame.metadata
        assert frame.checksum is not None
        assert frame.command.send.sequence_id == meta.sequence_id == i
        assert meta.producer_name == "plain-producer"
        assert before_ms <= meta.publish_time <= after_ms
        assert meta.partition_key == f"key-{i}"
        assert {kv.key: kv.value for kv in meta.properties} == {"i": str(i)}
        assert not meta.HasField("num_messages_in_batch")
        # The raw block round-trips: [metadataSize][metadata][payload].
        again = MessageMetadata()
        size = int.from_bytes(frame.raw_metadata_and_payload[:4], "big")
        again.ParseFromString(frame.raw_metadata_and_payload[4 : 4 + size])
        assert again == meta

    # Batched: all four messages in one entry, split back with their own metadata.
    messages = []
    for frame in batched:
        meta = frame.metadata
        assert frame.checksum is not None
        assert meta.HasField("num_messages_in_batch")
        assert frame.command.send.num_messages == meta.num_messages_in_batch
        messages += split_batch(frame.payload, meta.num_messages_in_batch)
    assert [payload for _, payload in messages] == [f"batch-{i}".encode() for i in range(4)]
    assert [{kv.key: kv.value for kv in m.properties} for m, _ in messages] == [{"n": str(i)} for i in range(4)]
    assert [m.sequence_id for m, _ in messages] == [0, 1, 2, 3]


def _consume(port: int, count: int) -> list[tuple[bytes, dict, str, int]]:
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{port}",
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        consumer = client.subscribe(TOPIC, "wire-sub", initial_position=pulsar.InitialPosition.Earliest)
        got = []
        for _ in range(count):
            msg = consumer.receive(timeout_millis=10_000)
            got.append((msg.data(), msg.properties(), msg.partition_key(), msg.message_id().batch_index()))
            consumer.acknowledge(msg)
        consumer.close()
        return got
    finally:
        client.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("entry_metadata", [True, False], ids=["broker-entry-metadata", "plain"])
async def test_official_client_consumes_stored_entries_sent_back_raw(entry_metadata: bool) -> None:
    broker = FakeBroker(broker_entry_metadata=entry_metadata)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(broker.serve)
        await trio.to_thread.run_sync(_publish, port)
        received = await trio.to_thread.run_sync(_consume, port, 7)
        nursery.cancel_scope.cancel()

    assert broker.errors == []
    assert [data for data, *_ in received] == [f"plain-{i}".encode() for i in range(3)] + [
        f"batch-{i}".encode() for i in range(4)
    ]
    assert [props for _, props, *_ in received] == [{"i": str(i)} for i in range(3)] + [{"n": str(i)} for i in range(4)]
    assert [key for _, _, key, _ in received[:3]] == ["key-0", "key-1", "key-2"]
    assert [index for *_, index in received[3:]] == [0, 1, 2, 3]
    # The 4.x client asks for BrokerEntryMetadata, so with it on the MESSAGE frames carried it.
    assert all(
        f.command.connect.feature_flags.supports_broker_entry_metadata for f in broker.frames if f.type == T.CONNECT
    )
    types = [f.type for f in broker.frames]
    assert T.SUBSCRIBE in types and T.FLOW in types and T.ACK in types
