"""Batch payload helpers and Pulsar's Key_Shared key hashing."""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.pulsar import (
    MalformedBatch,
    MessageMetadata,
    SingleMessageMetadata,
    build_batch,
    key_hash,
    key_hash_slot,
    murmur3_32,
    split_batch,
    sticky_key,
)


def _single(**kw) -> SingleMessageMetadata:
    return SingleMessageMetadata(payload_size=0, **kw)


def test_build_then_split_round_trip_sets_payload_size() -> None:
    given_meta = [_single(partition_key="a", sequence_id=1), _single(sequence_id=2), _single(null_value=True)]
    payloads = [b"one", b"", b"three"]
    data = build_batch(zip(given_meta, payloads, strict=True))
    assert all(m.payload_size == 0 for m in given_meta)  # inputs untouched
    out = split_batch(data, 3)
    assert [p for _, p in out] == payloads
    assert [m.payload_size for m, _ in out] == [3, 0, 5]
    assert out[0][0].partition_key == "a" and out[2][0].null_value
    assert split_batch(data) == out


def test_batch_layout() -> None:
    data = build_batch([(_single(), b"xy")])
    (size,) = struct.unpack_from(">I", data)
    meta = SingleMessageMetadata()
    meta.ParseFromString(data[4 : 4 + size])
    assert meta.payload_size == 2 and data[4 + size :] == b"xy"


@given(st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=50)), max_size=20))
def test_round_trip_property(items: list[tuple[str, bytes]]) -> None:
    data = build_batch((_single(partition_key=k), p) for k, p in items)
    out = split_batch(data, len(items))
    assert [(m.partition_key, p) for m, p in out] == items


@pytest.mark.parametrize(
    ("data", "count", "match"),
    [
        (b"\x00\x00", None, "truncated metadata size"),
        (struct.pack(">I", 100) + b"abc", None, "metadata size 100 overruns"),
        (struct.pack(">I", 2) + b"\xff\xff", None, "unparsable"),
        (struct.pack(">I", 0), None, "lacks payload_size"),
    ],
)
def test_malformed_batches(data: bytes, count: int | None, match: str) -> None:
    with pytest.raises(MalformedBatch, match=match):
        split_batch(data, count)


def test_batch_count_mismatch_and_overrun() -> None:
    two = build_batch([(_single(), b"a"), (_single(), b"b")])
    with pytest.raises(MalformedBatch, match="trailing bytes after 1 messages"):
        split_batch(two, 1)
    with pytest.raises(MalformedBatch, match="message 2"):
        split_batch(two, 3)
    meta = SingleMessageMetadata(payload_size=10).SerializeToString()
    with pytest.raises(MalformedBatch, match="payload_size 10 overruns"):
        split_batch(struct.pack(">I", len(meta)) + meta + b"abc")
    neg = SingleMessageMetadata(payload_size=-1).SerializeToString()
    with pytest.raises(MalformedBatch, match="payload_size -1"):
        split_batch(struct.pack(">I", len(neg)) + neg)
    with pytest.raises(MalformedBatch):
        split_batch(b"", -1)


@given(st.binary(max_size=300), st.none() | st.integers(0, 5))
def test_split_random_bytes_only_raises_malformed_batch(data: bytes, count: int | None) -> None:
    try:
        split_batch(data, count)
    except MalformedBatch:
        pass


# -------------------------------------------------------------------------------- hashing


# Expected values from the Pulsar C++ client's own hash test ("same value as Java client").
@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("k1", 2110152746),
        ("k2", 1479966664),
        ("key1", 462881061),
        ("key2", 1936800180),
        ("key01", 39696932),
        ("key02", 751761803),
    ],
)
def test_key_hash_matches_pulsar(key: str, expected: int) -> None:
    assert key_hash(key) == expected
    assert key_hash(key.encode()) == expected
    assert key_hash_slot(key) == expected % 65536


def test_murmur3_reference_vectors() -> None:
    # Published MurmurHash3_x86_32 values, seed 0, covering every tail length.
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmur3_32(b"", seed=1) == 0x514E28B7


@given(st.binary(max_size=64))
def test_key_hash_is_non_negative_31_bit(data: bytes) -> None:
    assert 0 <= key_hash(data) <= 0x7FFFFFFF
    assert 0 <= key_hash_slot(data, 100) < 100


def test_sticky_key_precedence() -> None:
    base = dict(producer_name="p", sequence_id=0, publish_time=0)
    assert sticky_key(MessageMetadata(**base)) == b"NONE_KEY"
    assert sticky_key(MessageMetadata(**base, partition_key="k\u00e9")) == "k\u00e9".encode()
    assert sticky_key(MessageMetadata(**base, partition_key="k", ordering_key=b"o")) == b"o"
    b64 = base64.b64encode(b"\x00\xff").decode()
    assert sticky_key(MessageMetadata(**base, partition_key=b64, partition_key_b64_encoded=True)) == b"\x00\xff"
    assert sticky_key(MessageMetadata(**base, partition_key="!!", partition_key_b64_encoded=True)) == b"NONE_KEY"
