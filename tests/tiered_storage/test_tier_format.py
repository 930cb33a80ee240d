"""The offloaded-ledger layout: blocks and index round-trip, ranges map to the right blocks, and
every kind of damage is refused rather than served."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_storage import LedgerIndex, OffloadFormatError
from tiered_storage._format import BlockBuilder, blocks_for_range, decode_block, decode_blocks


def build(entries: list[bytes], block_size: int) -> tuple[bytes, LedgerIndex]:
    b = BlockBuilder(7, block_size)
    data = b"".join(b.add(i, e) for i, e in enumerate(entries))
    tail, index = b.finish({"ManagedLedgerName": b"t/ns/persistent/x"})
    return data + tail, index


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=60), st.integers(1, 700), st.data())
def test_any_range_reads_back_exactly(entries: list[bytes], block_size: int, data: st.DataObject) -> None:
    blob, index = build(entries, block_size)
    index = LedgerIndex.decode(index.encode())
    assert index.entry_count == len(entries) and index.data_length == len(blob)
    assert index.ledger_bytes == sum(len(e) for e in entries)
    first = data.draw(st.integers(0, len(entries) - 1))
    last = data.draw(st.integers(first, len(entries) - 1))
    i, j = blocks_for_range(index, first, last)
    refs = index.blocks[i:j]
    got = [e for _ref, es in decode_blocks(blob[refs[0].offset : refs[-1].end], refs) for e in es]
    assert [d for eid, d in got if first <= eid <= last] == entries[first : last + 1]
    assert got[0][0] <= first and got[-1][0] >= last  # only the blocks needed, no fewer


def test_a_block_is_cut_once_its_payload_reaches_the_block_size() -> None:
    _blob, index = build([b"a", b"x" * 5000, b"b"], 100)
    assert [b.entry_count for b in index.blocks] == [2, 1]  # a block overshoots by at most one entry
    assert index.metadata["ManagedLedgerName"] == b"t/ns/persistent/x"


def test_index_damage_is_refused() -> None:
    _blob, index = build([b"one", b"two"], 4)
    raw = bytearray(index.encode())
    raw[20] ^= 1
    with pytest.raises(OffloadFormatError, match="checksum"):
        LedgerIndex.decode(bytes(raw))
    with pytest.raises(OffloadFormatError):
        LedgerIndex.decode(index.encode()[:10])


def test_block_damage_and_a_wrong_block_are_refused() -> None:
    blob, index = build([b"one", b"two", b"three"], 4)
    first, second = index.blocks[0], index.blocks[1]
    flipped = bytearray(blob[first.offset : first.end])
    flipped[-1] ^= 0x40
    with pytest.raises(OffloadFormatError, match="payload checksum"):
        decode_block(bytes(flipped), first)
    with pytest.raises(OffloadFormatError):  # a read that returned another block's bytes
        decode_block(blob[second.offset : second.end], first)
    with pytest.raises(OffloadFormatError):
        decode_block(blob[first.offset : first.end - 1], first)


def test_an_index_whose_blocks_leave_a_gap_is_refused() -> None:
    _blob, index = build([b"a", b"b", b"c"], 1)
    with pytest.raises(OffloadFormatError):
        LedgerIndex(index.ledger_id, index.entry_count + 1, index.ledger_bytes, index.data_length, index.blocks)


def test_entries_must_be_added_in_order() -> None:
    b = BlockBuilder(1, 10)
    b.add(0, b"x")
    with pytest.raises(ValueError):
        b.add(2, b"y")
