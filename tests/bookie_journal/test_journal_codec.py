"""The journal codec, pure: round trips, truncation at every byte, bit flips, zeroed tails."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.journal import AddEntry, ExplicitLac, FenceLedger, JournalFormatError, LogMark, MasterKey, Padding
from bookie.journal._codec import (
    FILE_HEADER_SIZE,
    RECORD_OVERHEAD,
    DecodeStop,
    StopReason,
    decode_file_header,
    decode_last_mark,
    decode_record,
    encode_add_header,
    encode_file_header,
    encode_last_mark,
    encode_record,
    scan_records,
)

SAMPLES = [
    AddEntry(1, 0, b"hello"),
    AddEntry(2**63 - 1, 2**40, bytes(range(256)) * 3),
    AddEntry(7, -1, b""),
    FenceLedger(42),
    ExplicitLac(42, 17, b"opaque-lac-buffer"),
    ExplicitLac(43, -1),
    MasterKey(42, b"secret-key"),
    Padding(RECORD_OVERHEAD + 7),
]


def _buf() -> tuple[bytes, list[int]]:
    """All samples back to back, and the end offset of each."""
    out, ends = b"", []
    for r in SAMPLES:
        out += encode_record(r)
        ends.append(len(out))
    return out, ends


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip(record) -> None:
    raw = encode_record(record)
    got = decode_record(raw)
    assert got == (record, len(raw))


def test_add_header_plus_data_is_the_record() -> None:
    assert encode_add_header(3, 4, b"xyz") + b"xyz" == encode_record(AddEntry(3, 4, b"xyz"))


def test_scan_all_then_end_of_data() -> None:
    raw, ends = _buf()
    res = scan_records(raw)
    assert [r for _, r in res.records] == SAMPLES
    assert [e for e, _ in res.records] == ends
    assert res.stop.reason is StopReason.END_OF_DATA and res.stop.offset == len(raw)


def test_truncation_at_every_byte() -> None:
    raw, ends = _buf()
    for cut in range(len(raw)):
        res = scan_records(raw[:cut])
        complete = [e for e in ends if e <= cut]
        assert [e for e, _ in res.records] == complete
        expected_at = complete[-1] if complete else 0
        assert res.stop.offset == expected_at
        if cut == expected_at:
            assert res.stop.reason is StopReason.END_OF_DATA
        else:
            assert res.stop.reason is StopReason.TRUNCATED, (cut, res.stop)
            assert not res.stop.reason.clean


def test_streaming_decode_asks_for_more_instead_of_truncated() -> None:
    raw = encode_record(AddEntry(1, 2, b"x" * 100))
    for cut in range(len(raw)):
        got = decode_record(raw[:cut], final=False)
        assert isinstance(got, DecodeStop) and got.reason is StopReason.NEED_MORE


def test_every_single_bit_flip_is_detected() -> None:
    raw, ends = _buf()
    for byte in range(len(raw)):
        for bit in range(8):
            bad = bytearray(raw)
            bad[byte] ^= 1 << bit
            res = scan_records(bad)
            # every record before the damaged one decodes; nothing from the damaged one on
            damaged = next(i for i, e in enumerate(ends) if byte < e)
            assert [r for _, r in res.records] == SAMPLES[:damaged], (byte, bit)
            assert not res.stop.reason.clean
            assert res.stop.offset == (ends[damaged - 1] if damaged else 0)


def test_zeroed_preallocated_tail_is_a_clean_end() -> None:
    raw, _ends = _buf()
    res = scan_records(raw + bytes(4096))
    assert len(res.records) == len(SAMPLES)
    assert res.stop.reason is StopReason.ZERO_TAIL and res.stop.offset == len(raw)
    assert res.stop.reason.clean
    # fewer than 8 zero bytes at the very end too
    assert scan_records(raw + bytes(3)).stop.reason is StopReason.ZERO_TAIL


def test_zeroed_hole_followed_by_data_is_corruption() -> None:
    raw, ends = _buf()
    bad = bytearray(raw)
    bad[ends[2] : ends[3]] = bytes(ends[3] - ends[2])
    res = scan_records(bad)
    assert len(res.records) == 3
    assert res.stop.reason is StopReason.BAD_LENGTH and res.stop.offset == ends[2]


def test_zeroed_record_in_the_middle_of_a_zero_tail_start() -> None:
    # a torn write that zeroed the last record's start: a clean end (nothing after it)
    raw, ends = _buf()
    bad = bytearray(raw[: ends[-1]])
    bad[ends[-2] :] = bytes(len(bad) - ends[-2])
    res = scan_records(bad)
    assert len(res.records) == len(SAMPLES) - 1 and res.stop.reason is StopReason.ZERO_TAIL


def test_garbage_length_is_rejected_without_waiting() -> None:
    raw = bytearray(encode_record(FenceLedger(1)))
    raw[4:8] = (2**31).to_bytes(4, "big")
    got = decode_record(raw, final=False)
    assert isinstance(got, DecodeStop) and got.reason is StopReason.BAD_LENGTH


def test_unknown_kind_with_valid_crc_is_bad_record() -> None:
    from crc32c import crc32c

    body = bytes([99]) + b"abc"
    ln = len(body).to_bytes(4, "big")
    raw = crc32c(body, crc32c(ln)).to_bytes(4, "big") + ln + body
    got = decode_record(raw)
    assert isinstance(got, DecodeStop) and got.reason is StopReason.BAD_RECORD


@given(
    st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1), st.binary(max_size=300)), max_size=20),
    st.integers(0, 4000),
)
def test_property_prefix_of_records(entries, cut) -> None:
    records = [AddEntry(*e) for e in entries]
    raw = b"".join(encode_record(r) for r in records)
    res = scan_records(raw[:cut])
    got = [r for _, r in res.records]
    assert got == records[: len(got)]
    if cut >= len(raw):
        assert got == records and res.stop.reason is StopReason.END_OF_DATA


def test_file_header() -> None:
    head = encode_file_header(0x1234)
    assert len(head) == FILE_HEADER_SIZE
    assert decode_file_header(head) == 0x1234
    for i in range(20):
        bad = bytearray(head)
        bad[i] ^= 0x10
        with pytest.raises(JournalFormatError):
            decode_file_header(bad)
    with pytest.raises(JournalFormatError):
        decode_file_header(head[:10])
    with pytest.raises(JournalFormatError):
        decode_file_header(bytes(FILE_HEADER_SIZE))


def test_last_mark_codec() -> None:
    mark = LogMark(0x18F00000000, 123456)
    raw = encode_last_mark(mark)
    assert decode_last_mark(raw) == mark
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 1
        with pytest.raises(JournalFormatError):
            decode_last_mark(bad)
    with pytest.raises(JournalFormatError):
        decode_last_mark(raw[:-1])


def test_marks_order() -> None:
    assert LogMark(1, 100) < LogMark(2, 0) < LogMark(2, 1)
    assert max(LogMark(1, 5), LogMark(1, 9)) == LogMark(1, 9)
