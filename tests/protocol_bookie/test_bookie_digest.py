"""Entry and LAC digests: round trips and every corruption detected."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.bookkeeper import (
    ENTRY_HEADER_SIZE,
    LAC_BODY_SIZE,
    DigestMismatch,
    decode_entry,
    decode_lac,
    encode_entry,
    encode_lac,
    peek_entry_header,
)

i64 = st.integers(-(2**63), 2**63 - 1)


def test_layout_is_bookkeeper_crc32c() -> None:
    data = encode_entry(5, 6, 4, 100, b"hello")
    assert len(data) == ENTRY_HEADER_SIZE + 5
    assert data[:32] == struct.pack(">qqqq", 5, 6, 4, 100)
    # one CRC32C over the 32 header bytes then the payload, skipping the checksum itself
    assert struct.unpack(">I", data[32:36])[0] == crc32c.crc32c(data[:32] + b"hello")
    assert data[36:] == b"hello"


def test_round_trip() -> None:
    e = decode_entry(encode_entry(1, 2, -1, 3, b"abc"), expected_ledger_id=1, expected_entry_id=2)
    assert (e.ledger_id, e.entry_id, e.last_add_confirmed, e.length, e.payload) == (1, 2, -1, 3, b"abc")
    assert decode_entry(bytearray(encode_entry(1, 2, 1, 0, b""))).payload == b""
    h = peek_entry_header(encode_entry(9, 8, 7, 6, b"x"))
    assert (h.ledger_id, h.entry_id, h.last_add_confirmed, h.length) == (9, 8, 7, 6)


@settings(max_examples=100, deadline=None)
@given(i64, i64, i64, i64, st.binary(max_size=300))
def test_round_trip_property(ledger, entry, lac, length, payload) -> None:
    e = decode_entry(encode_entry(ledger, entry, lac, length, payload), ledger, entry)
    assert (e.ledger_id, e.entry_id, e.last_add_confirmed, e.length, e.payload) == (
        ledger, entry, lac, length, payload)


def test_every_single_bit_flip_is_detected() -> None:
    data = encode_entry(11, 22, 21, 1234, b"payload bytes")
    for i in range(len(data)):
        for bit in range(8):
            bad = bytearray(data)
            bad[i] ^= 1 << bit
            with pytest.raises(DigestMismatch):
                decode_entry(bytes(bad))


def test_truncation_and_extension_detected() -> None:
    data = encode_entry(1, 2, 1, 10, b"0123456789")
    for cut in range(len(data)):
        with pytest.raises(DigestMismatch):
            decode_entry(data[:cut])
    with pytest.raises(DigestMismatch):
        decode_entry(data + b"\x00")
    with pytest.raises(DigestMismatch):
        peek_entry_header(data[:ENTRY_HEADER_SIZE - 1])


def test_wrong_ledger_or_entry_detected() -> None:
    data = encode_entry(1, 2, 1, 10, b"x")
    with pytest.raises(DigestMismatch, match="ledger"):
        decode_entry(data, expected_ledger_id=3)
    with pytest.raises(DigestMismatch, match="entry"):
        decode_entry(data, expected_ledger_id=1, expected_entry_id=3)


def test_lac_round_trip_and_corruption() -> None:
    body = encode_lac(7, 41)
    assert len(body) == LAC_BODY_SIZE
    assert body[:16] == struct.pack(">qq", 7, 41)
    assert decode_lac(body, expected_ledger_id=7) == 41
    assert decode_lac(encode_lac(7, -1)) == -1
    for i in range(len(body)):
        bad = bytearray(body)
        bad[i] ^= 0x40
        with pytest.raises(DigestMismatch):
            decode_lac(bytes(bad))
    for cut in range(len(body)):
        with pytest.raises(DigestMismatch):
            decode_lac(body[:cut])
    with pytest.raises(DigestMismatch):
        decode_lac(body, expected_ledger_id=8)


def test_ids_out_of_range_rejected() -> None:
    with pytest.raises(struct.error):
        encode_entry(2**63, 0, 0, 0, b"")
