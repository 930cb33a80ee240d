"""Entry and LAC digests: round trips and every corruption detected."""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.bookkeeper import (
    ENTRY_HEADER_SIZE,
    ENTRY_METADATA_SIZE,
    LAC_BODY_SIZE,
    MAX_ENTRY_HEADER_SIZE,
    DigestMismatch,
    DigestType,
    EntryDigest,
    decode_entry,
    decode_lac,
    digest_for,
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
    assert (e.ledger_id, e.entry_id, e.last_add_confirmed, e.length, e.payload) == (ledger, entry, lac, length, payload)


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
        peek_entry_header(data[: ENTRY_METADATA_SIZE - 1])


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


# ------------------------------------------------------------ per-ledger digest types

CODE_SIZES = {DigestType.CRC32C: 4, DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.DUMMY: 0}
CHECKED = [DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC]


@pytest.mark.parametrize("dtype", list(DigestType))
def test_every_type_round_trips_with_its_header_size(dtype: DigestType) -> None:
    d = digest_for(dtype, b"pw")
    data = d.encode_entry(7, 3, 2, 40, b"hello")
    assert len(data) == ENTRY_METADATA_SIZE + CODE_SIZES[dtype] + 5 == d.header_size + 5
    assert d.header_size <= MAX_ENTRY_HEADER_SIZE
    e = d.decode_entry(data, 7, 3)
    assert (e.ledger_id, e.entry_id, e.last_add_confirmed, e.length, e.payload) == (7, 3, 2, 40, b"hello")
    assert peek_entry_header(data).last_add_confirmed == 2  # the bookie's view, whatever the type
    lac = d.encode_lac(7, 11)
    assert len(lac) == d.lac_size and d.decode_lac(lac, 7) == 11


def test_crc32c_type_is_the_legacy_framing() -> None:
    assert digest_for(DigestType.CRC32C).encode_entry(1, 2, 3, 4, b"p") == encode_entry(1, 2, 3, 4, b"p")
    assert digest_for(DigestType.CRC32C).header_size == ENTRY_HEADER_SIZE


def test_crc32_code_is_zlib_crc32_in_a_long() -> None:
    data = digest_for(DigestType.CRC32).encode_entry(1, 2, 3, 4, b"payload")
    assert struct.unpack(">Q", data[32:40])[0] == zlib.crc32(data[:32] + b"payload")


def test_hmac_code_is_bookkeepers_hmac_sha1_keyed_by_the_password() -> None:
    # BookKeeper's MacDigestManager: HmacSHA1 keyed with SHA-1("mac" + password), 20 bytes
    data = digest_for(DigestType.HMAC, b"secret").encode_entry(1, 2, 3, 4, b"payload")
    key = hashlib.sha1(b"macsecret").digest()
    assert data[32:52] == hmac.new(key, data[:32] + b"payload", hashlib.sha1).digest()
    assert len(data) == 52 + len(b"payload")
    with pytest.raises(DigestMismatch):
        digest_for(DigestType.HMAC, b"other").decode_entry(data)


@pytest.mark.parametrize("dtype", CHECKED)
def test_checked_types_catch_every_bit_flip(dtype: DigestType) -> None:
    d = EntryDigest(dtype, b"pw")
    data = d.encode_entry(5, 6, 4, 100, b"0123456789")
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x10
        with pytest.raises(DigestMismatch):
            d.decode_entry(bytes(bad), 5, 6)
    lac = d.encode_lac(5, 9)
    for i in range(len(lac)):
        bad = bytearray(lac)
        bad[i] ^= 0x01
        with pytest.raises(DigestMismatch):
            d.decode_lac(bytes(bad), 5)


@pytest.mark.parametrize("dtype", CHECKED)
def test_a_copy_framed_by_another_type_is_refused(dtype: DigestType) -> None:
    other = DigestType.CRC32 if dtype is DigestType.CRC32C else DigestType.CRC32C
    data = digest_for(other).encode_entry(1, 1, 0, 3, b"abc")
    with pytest.raises(DigestMismatch):
        digest_for(dtype).decode_entry(data, 1, 1)


def test_dummy_checks_only_the_ids() -> None:
    d = digest_for(DigestType.DUMMY)
    data = d.encode_entry(1, 2, 0, 3, b"abc")
    assert d.decode_entry(data[:-1] + b"X", 1, 2).payload == b"abX"  # no code: payload unprotected
    with pytest.raises(DigestMismatch, match="entry is 2"):
        d.decode_entry(data, 1, 3)


def test_digest_for_refuses_unknown_types() -> None:
    with pytest.raises(ValueError):
        digest_for(9)  # type: ignore[arg-type]
