"""Entry-log inputs that bench/fuzz_decoders.py found crashing the codec, kept as tests."""

from __future__ import annotations

import pytest

from bookie.storage import CorruptLogError
from bookie.storage._entry_log_codec import (
    INVALID_LEDGER_ID,
    LEDGERS_MAP_ENTRY_ID,
    decode_ledgers_map,
    encode_ledgers_map,
    encode_record,
)


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x00\x00\x01"])
def test_map_record_too_short_for_its_count_is_corrupt(payload: bytes) -> None:
    # Before: struct.error at the end of the buffer.
    record = encode_record(INVALID_LEDGER_ID, LEDGERS_MAP_ENTRY_ID, payload)
    with pytest.raises(CorruptLogError, match="too short"):
        decode_ledgers_map(record, 1)


def test_map_record_too_short_does_not_read_its_count_from_the_next_record() -> None:
    # Before: with a record after it, the count was silently read from that record's bytes.
    short = encode_record(INVALID_LEDGER_ID, LEDGERS_MAP_ENTRY_ID, b"\x00\x00")
    with pytest.raises(CorruptLogError, match="too short"):
        decode_ledgers_map(short + encode_ledgers_map({1: 2}), 1)


def test_good_maps_still_decode() -> None:
    assert decode_ledgers_map(encode_ledgers_map({5: 70, 7: 38}), 2) == {5: 70, 7: 38}
    empty_chunk = encode_record(INVALID_LEDGER_ID, LEDGERS_MAP_ENTRY_ID, bytes(4))  # count 0, no items
    assert decode_ledgers_map(empty_chunk + encode_ledgers_map({1: 2}), 1) == {1: 2}
