"""Stored entries and values that bench/fuzz_decoders.py found crashing the Spark source's row
decoding (``readMode=bookies``), kept as tests. No Spark session is started here.

Before: a short entry raised struct.error, an unparsable one protobuf's DecodeError, a bad ZLIB
payload zlib.error (and a small one could inflate to GiBs), a partition key that is not UTF-8
came back as bytes, and deeply nested JSON raised RecursionError. Now ``rows_from_entry`` raises
only ValueError and the value decoders never raise.
"""

from __future__ import annotations

import json
import zlib

import pytest

from protocols.pulsar import MessageMetadata, SingleMessageMetadata, build_batch, encode_metadata_and_payload
from protocols.pulsar import pulsar_api_pb2 as pb
from sinks.spark._decode import decoder, value_schema_from_info
from sinks.spark._rows import rows_from_entry


def _rows(data: bytes) -> list:
    return rows_from_entry("persistent://public/default/t", 0, 5, 6, data)


def _meta(**fields: object) -> MessageMetadata:
    return MessageMetadata(producer_name="p", sequence_id=1, publish_time=1_700_000_000_000, **fields)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x00", b"\x00\x00\x00\x05abc", b"\x00\x00\x00\x02\xff\xff"],
    ids=["empty", "short", "size-overruns", "unparsable"],
)
def test_entries_that_are_not_messages_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        _rows(data)


def test_partition_key_not_utf8_raises_value_error() -> None:
    entry = encode_metadata_and_payload(_meta(partition_key="part-key"), b"x")
    with pytest.raises(ValueError, match="partition_key is not UTF-8"):
        _rows(entry.replace(b"part-key", b"\xff" * 8))


def _zlib_entry(payload: bytes, uncompressed_size: int, compressed: bytes | None = None) -> bytes:
    meta = _meta(compression=pb.ZLIB, uncompressed_size=uncompressed_size, num_messages_in_batch=1)
    return encode_metadata_and_payload(meta, zlib.compress(payload) if compressed is None else compressed)


def test_zlib_batch_reads_when_it_inflates_to_its_uncompressed_size() -> None:
    batch = build_batch([(SingleMessageMetadata(), b"hello")])
    rows = _rows(_zlib_entry(batch, len(batch)))
    assert [r[1] for r in rows] == [b"hello"]


def test_zlib_payload_larger_than_declared_is_refused_without_inflating_it() -> None:
    bomb = zlib.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(ValueError, match="uncompressed_size"):
        _rows(_zlib_entry(b"", 1000, compressed=bomb))


@pytest.mark.parametrize(
    "compressed", [b"not zlib at all", zlib.compress(b"x" * 100)[:-6]], ids=["corrupt", "truncated"]
)
def test_bad_zlib_payload_raises_value_error(compressed: bytes) -> None:
    with pytest.raises(ValueError, match="ZLIB"):
        _rows(_zlib_entry(b"", 100, compressed=compressed))


def test_declared_size_beyond_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        _rows(_zlib_entry(b"", 2**32 - 1, compressed=zlib.compress(b"x")))


def test_deeply_nested_json_value_gives_a_row_of_nulls() -> None:
    definition = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    decode = decoder(value_schema_from_info({"type": "JSON", "data": json.dumps(definition)}))
    assert decode(b"[" * 100_000) == (None,)
    assert decode(b'{"a": 3}') == (3,)
