"""Compressed messages with the official client: the broker stores and delivers LZ4, ZLIB, ZSTD and
SNAPPY payloads untouched (metadata and compressed bytes as the producer sent them; the consumer
decompresses), batched and unbatched, with keys and properties; and the Spark source's bookie
read path (`sinks.spark._rows.rows_from_entry`, which decodes stored entries) decodes the entries
the official client wrote, for all four codecs.
"""

from __future__ import annotations

import pulsar
import pytest

from managed_ledger import InitialPosition
from protocols.pulsar import MessageMetadata
from protocols.pulsar import pulsar_api_pb2 as pb
from sinks.spark._rows import rows_from_entry
from tests.support.broker_thread import BrokerThread
from tests.support.clients import RECEIVE_MS

CODECS = {
    "LZ4": (pulsar.CompressionType.LZ4, pb.LZ4),
    "ZLIB": (pulsar.CompressionType.ZLib, pb.ZLIB),
    "ZSTD": (pulsar.CompressionType.ZSTD, pb.ZSTD),
    "SNAPPY": (pulsar.CompressionType.SNAPPY, pb.SNAPPY),
}


def _stored_entries(broker: BrokerThread, topic: str) -> list[tuple[int, int, bytes]]:
    async def read() -> list[tuple[int, int, bytes]]:
        cursor = broker.service.topics[topic].ml.new_non_durable_cursor(InitialPosition.EARLIEST)
        entries = await cursor.read_entries(1000)
        return [(e.position.ledger_id, e.position.entry_id, e.data) for e in entries]

    return broker.call(read)


def _metadata(data: bytes) -> MessageMetadata:
    size = int.from_bytes(data[:4], "big")
    meta = MessageMetadata()
    meta.ParseFromString(data[4 : 4 + size])
    return meta


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
@pytest.mark.parametrize("codec", sorted(CODECS))
def test_compressed_messages_pass_through_and_decode_from_storage(
    broker: BrokerThread, client: pulsar.Client, topic: str, codec: str, batched: bool
) -> None:
    client_codec, wire_codec = CODECS[codec]
    payloads = [(f"{codec} message {i} " * 40).encode() for i in range(6)]
    consumer = client.subscribe(topic, "c")
    producer = client.create_producer(
        topic, compression_type=client_codec, batching_enabled=batched, batching_max_publish_delay_ms=100
    )
    for i, payload in enumerate(payloads):
        producer.send_async(payload, None, properties={"i": str(i)}, partition_key=f"k{i}")
    producer.flush()
    got = [consumer.receive(RECEIVE_MS) for _ in payloads]
    assert [m.data() for m in got] == payloads
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(len(payloads))]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(len(payloads))]
    consumer.close()
    producer.close()

    entries = _stored_entries(broker, topic)
    if batched:
        assert len(entries) < len(payloads)
    else:
        assert len(entries) == len(payloads)
    for _, _, data in entries:
        meta = _metadata(data)
        assert meta.compression == wire_codec  # stored as the producer sent it
        assert len(data) - 4 - int.from_bytes(data[:4], "big") < meta.uncompressed_size  # still compressed
    rows = [row for ledger, entry, data in entries for row in rows_from_entry(topic, -1, ledger, entry, data)]
    assert [r[1] for r in rows] == payloads
    assert [r[2] for r in rows] == [f"k{i}" for i in range(len(payloads))]
    assert [r[7] for r in rows] == [{"i": str(i)} for i in range(len(payloads))]


@pytest.mark.parametrize("codec", ["LZ4", "ZSTD", "SNAPPY"])
def test_a_corrupt_compressed_entry_is_a_value_error(
    broker: BrokerThread, client: pulsar.Client, topic: str, codec: str
) -> None:
    producer = client.create_producer(topic, compression_type=CODECS[codec][0], batching_enabled=False)
    producer.send(b"x" * 2000)
    producer.close()
    ((ledger, entry, data),) = _stored_entries(broker, topic)
    size = int.from_bytes(data[:4], "big")
    meta = _metadata(data)
    for bad in (
        data[: 4 + size] + b"\x00" * 7,  # garbage payload
        data[:-3],  # truncated
        _with_size(meta, data[4 + size :], meta.uncompressed_size - 1),  # grows past its size
        _with_size(meta, data[4 + size :], 1 << 30),
    ):  # a bomb by its metadata
        with pytest.raises(ValueError):
            rows_from_entry(topic, -1, ledger, entry, bad)


def _with_size(meta: MessageMetadata, payload: bytes, uncompressed_size: int) -> bytes:
    changed = MessageMetadata()
    changed.CopyFrom(meta)
    changed.uncompressed_size = uncompressed_size
    raw = changed.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + payload
