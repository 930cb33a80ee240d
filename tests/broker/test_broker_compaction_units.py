"""The pure parts of topic compaction: what a stored entry's messages are, batch rewriting and the
compacted-ledger entry format (no I/O)."""

from __future__ import annotations

import struct
import zlib

import pytest

from broker.topics._compaction import decode_compacted, encode_compacted, entry_messages, rewrite_batch
from managed_ledger import Position
from protocols.pulsar import MessageMetadata, SingleMessageMetadata, build_batch, split_batch
from protocols.pulsar import pulsar_api_pb2 as pb


def _entry(md: MessageMetadata, payload: bytes) -> bytes:
    md.producer_name = md.producer_name or "p"
    md.publish_time = md.publish_time or 1
    raw = md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + payload


def _single(key: str | None, payload: bytes, *, null: bool = False) -> tuple[SingleMessageMetadata, bytes]:
    s = SingleMessageMetadata(payload_size=len(payload))
    if key is not None:
        s.partition_key = key
    if null:
        s.null_value = True
    return s, payload


def _batch(messages, *, zlib_compressed: bool = False) -> bytes:
    payload = build_batch(messages)
    md = MessageMetadata(sequence_id=0, num_messages_in_batch=len(messages))
    if zlib_compressed:
        md.compression = pb.ZLIB
        md.uncompressed_size = len(payload)
        payload = zlib.compress(payload)
    return _entry(md, payload)


def test_single_messages_keys_and_tombstones() -> None:
    keyed = _entry(MessageMetadata(sequence_id=1, partition_key="a"), b"v")
    assert [(m.key, m.tombstone) for m in entry_messages(keyed)] == [("a", False)]
    keyless = _entry(MessageMetadata(sequence_id=1), b"v")
    assert [(m.key, m.tombstone) for m in entry_messages(keyless)] == [(None, False)]
    empty = _entry(MessageMetadata(sequence_id=1, partition_key="a"), b"")
    assert entry_messages(empty)[0].tombstone
    null = _entry(MessageMetadata(sequence_id=1, partition_key="a", null_value=True), b"")
    assert entry_messages(null)[0].tombstone
    # compressed: an empty value compresses to some bytes; its uncompressed size says it is empty
    zipped = _entry(
        MessageMetadata(sequence_id=1, partition_key="a", compression=pb.ZLIB, uncompressed_size=0), zlib.compress(b"")
    )
    assert entry_messages(zipped)[0].tombstone


def test_batches_are_split_per_message_compressed_or_not() -> None:
    messages = [_single("a", b"1"), _single(None, b"2"), _single("b", b"", null=True), _single("a", b"3")]
    for compressed in (False, True):
        got = entry_messages(_batch(messages, zlib_compressed=compressed))
        assert [(m.key, m.tombstone) for m in got] == [("a", False), (None, False), ("b", True), ("a", False)]


def test_rewrite_batch_keeps_only_the_kept_messages_uncompressed() -> None:
    messages = [_single("a", b"1"), _single("b", b"2"), _single("a", b"3")]
    out = rewrite_batch(_batch(messages, zlib_compressed=True), {1, 2})
    (size,) = struct.unpack_from(">I", out, 0)
    md = MessageMetadata()
    md.ParseFromString(out[4 : 4 + size])
    assert md.num_messages_in_batch == 2 and md.compression == pb.NONE and not md.HasField("uncompressed_size")
    assert [(s.partition_key, body) for s, body in split_batch(out[4 + size :], 2)] == [("b", b"2"), ("a", b"3")]


def test_unreadable_entries_are_refused_with_value_error() -> None:
    with pytest.raises(ValueError):
        entry_messages(b"\x00\x00")
    bad_batch = _entry(MessageMetadata(sequence_id=0, num_messages_in_batch=3), b"\x00\x00\x00\x05xx")
    with pytest.raises(ValueError):
        entry_messages(bad_batch)


def test_compacted_entry_format_round_trips() -> None:
    data = _entry(MessageMetadata(sequence_id=1, partition_key="a"), b"payload")
    entry = decode_compacted(encode_compacted(Position(7, 42), data))
    assert entry.position == Position(7, 42) and entry.data == data
    with pytest.raises(ValueError):
        decode_compacted(b"short")
