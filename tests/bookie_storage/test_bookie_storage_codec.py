"""Entry log codec: header, records, ledgers map, locations, torn tails (no files)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.storage import CorruptLogError
from bookie.storage._entry_log_codec import (
    HEADER_SIZE,
    INVALID_LEDGER_ID,
    MAP_CHUNK,
    LogHeader,
    decode_header,
    decode_ledgers_map,
    decode_record_at,
    encode_header,
    encode_ledgers_map,
    encode_record,
    iter_records,
    log_file_name,
    make_location,
    parse_log_file_name,
    split_location,
)


def test_header_roundtrip_and_size() -> None:
    raw = encode_header(LogHeader(ledgers_map_offset=123456, ledgers_count=7))
    assert len(raw) == HEADER_SIZE
    assert raw[:4] == b"MGLO"
    assert decode_header(raw) == LogHeader(1, 123456, 7)
    assert decode_header(encode_header(LogHeader())) == LogHeader(1, 0, 0)


def test_header_rejects_bad_magic_version_and_short() -> None:
    raw = bytearray(encode_header(LogHeader()))
    with pytest.raises(CorruptLogError):
        decode_header(raw[:10])
    raw[0:4] = b"XXXX"
    with pytest.raises(CorruptLogError):
        decode_header(raw)
    raw = bytearray(encode_header(LogHeader()))
    raw[7] = 9
    with pytest.raises(CorruptLogError):
        decode_header(raw)


def test_record_layout() -> None:
    rec = encode_record(5, 9, b"hello")
    assert int.from_bytes(rec[0:4], "big") == 16 + 5  # size counts ledger id + entry id + payload
    assert int.from_bytes(rec[4:12], "big") == 5
    assert int.from_bytes(rec[12:20], "big") == 9
    assert rec[20:] == b"hello"
    assert decode_record_at(rec, 0) == (5, 9, 20, len(rec))


@given(
    st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.binary(max_size=300)), max_size=20),
    st.integers(0, 50),
)
def test_iter_records_roundtrip_and_torn_tail(records: list[tuple[int, int, bytes]], cut: int) -> None:
    buf = bytearray(HEADER_SIZE)
    for lid, eid, p in records:
        buf += encode_record(lid, eid, p)
    got = [(lid, eid, bytes(p)) for _, lid, eid, p in iter_records(buf)]
    assert got == records
    # any truncation yields a prefix of the records and no exception
    torn = buf[: max(HEADER_SIZE, len(buf) - cut)]
    got = [(lid, eid, bytes(p)) for _, lid, eid, p in iter_records(torn)]
    assert got == records[: len(got)]
    if cut and records:
        assert len(got) < len(records)


def test_torn_tail_with_garbage_size_stops() -> None:
    buf = bytearray(HEADER_SIZE) + encode_record(1, 1, b"x") + b"\x00\x00\x00\x03abc"  # size < 16
    assert [(lid, eid) for _, lid, eid, _ in iter_records(buf)] == [(1, 1)]


def test_ledgers_map_roundtrip_chunked() -> None:
    ledgers = {i: i * 10 + 1 for i in range(MAP_CHUNK * 2 + 5)}
    raw = encode_ledgers_map(ledgers)
    # three chunk records, all with the reserved ledger id
    recs = list(iter_records(raw, 0))
    assert len(recs) == 3
    assert all(lid == INVALID_LEDGER_ID for _, lid, _, _ in recs)
    assert decode_ledgers_map(raw, len(ledgers)) == ledgers
    assert encode_ledgers_map({}) == b""
    assert decode_ledgers_map(b"", 0) == {}


def test_ledgers_map_corruption_detected() -> None:
    raw = encode_ledgers_map({1: 2, 3: 4})
    with pytest.raises(CorruptLogError):
        decode_ledgers_map(raw[:-3], 2)
    with pytest.raises(CorruptLogError):
        decode_ledgers_map(raw, 3)
    with pytest.raises(CorruptLogError):
        decode_ledgers_map(encode_record(1, 2, b"x" * 20), 1)


def test_locations_and_file_names() -> None:
    loc = make_location(0x1234, 0xABCDEF)
    assert loc == (0x1234 << 32) | 0xABCDEF
    assert split_location(loc) == (0x1234, 0xABCDEF)
    with pytest.raises(ValueError):
        make_location(2**31, 0)
    with pytest.raises(ValueError):
        make_location(1, 2**32)
    assert log_file_name(255) == "ff.log"
    assert parse_log_file_name("ff.log") == 255
    assert parse_log_file_name("lastId") is None
    assert parse_log_file_name("zz.log") is None
