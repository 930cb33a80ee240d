"""Managed-ledger records: positions, ledger list and cursor state round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.managed_ledger import (
    EARLIEST,
    LATEST,
    CursorInfo,
    LedgerInfo,
    ManagedLedgerInfo,
    MLFormatError,
    Position,
    PositionRange,
    indexes_to_words,
    words_to_indexes,
)
from protocols.managed_ledger import (
    managed_ledger_pb2 as pb,
)

P = Position


def test_position_order() -> None:
    assert EARLIEST < P(0, 0) < P(0, 1) < P(1, 0) < LATEST
    assert sorted([P(2, 0), P(1, 5), P(1, 2)]) == [P(1, 2), P(1, 5), P(2, 0)]
    assert str(P(3, 4)) == "3:4"
    assert P(1, 3) in PositionRange(P(1, 2), P(1, 3))
    assert P(1, 2) not in PositionRange(P(1, 2), P(1, 3))


def test_managed_ledger_info_round_trip() -> None:
    info = ManagedLedgerInfo(
        ledgers=(LedgerInfo(3, 10, 1000, 1700000000000), LedgerInfo(7)),
        terminated_position=P(7, 0),
        properties={"k": "v"},
    )
    back = ManagedLedgerInfo.decode(info.encode())
    assert back == info and back.terminated_position == P(7, 0)
    assert ManagedLedgerInfo.decode(ManagedLedgerInfo().encode()) == ManagedLedgerInfo()
    assert ManagedLedgerInfo.decode(b"") == ManagedLedgerInfo()


def test_managed_ledger_info_field_numbers() -> None:
    raw = ManagedLedgerInfo(ledgers=(LedgerInfo(3, 10, 1000, 5),), properties={"a": "b"}).encode()
    msg = pb.ManagedLedgerInfo.FromString(raw)
    assert [f.number for f, _ in msg.ListFields()] == [1, 3]
    li = msg.ledgerInfo[0]
    assert (li.ledgerId, li.entries, li.size, li.timestamp) == (3, 10, 1000, 5)


@pytest.mark.parametrize(
    "ledgers",
    [
        (LedgerInfo(3), LedgerInfo(3)),
        (LedgerInfo(5), LedgerInfo(3)),
        (LedgerInfo(5, entries=-1),),
    ],
)
def test_managed_ledger_info_validation(ledgers) -> None:
    with pytest.raises(ValueError):
        ManagedLedgerInfo(ledgers=ledgers)


def test_cursor_round_trip() -> None:
    c = CursorInfo(
        mark_delete=P(3, 4),
        individual_deleted=(PositionRange(P(3, 5), P(3, 7)), PositionRange(P(3, 9), P(4, 1))),
        properties={"seq": 42},
        last_active_ms=1700000000000,
        batch_deletes={P(3, 8): indexes_to_words([0, 2, 63])},
        cursor_properties={"owner": "x"},
    )
    back = CursorInfo.decode(c.encode())
    assert back == c and hash(back) == hash(c)
    msg = pb.ManagedCursorInfo.FromString(c.encode())
    assert msg.cursorsLedgerId == -1
    assert (msg.markDeleteLedgerId, msg.markDeleteEntryId, msg.lastActive) == (3, 4, 1700000000000)
    assert msg.individualDeletedMessages[1].upperEndpoint.ledgerId == 4
    assert words_to_indexes(msg.batchedEntryDeletionIndexInfo[0].deleteSet) == (0, 2, 63)


def test_cursor_minimal_and_default_mark_delete() -> None:
    c = CursorInfo(P(1, -1))
    assert CursorInfo.decode(c.encode()) == c
    bare = pb.ManagedCursorInfo(cursorsLedgerId=-1).SerializeToString()
    assert CursorInfo.decode(bare).mark_delete == EARLIEST


def test_is_deleted() -> None:
    c = CursorInfo(P(1, 4), (PositionRange(P(1, 5), P(1, 7)), PositionRange(P(2, 0), P(2, 3))))
    deleted = {p for p in [P(1, e) for e in range(10)] + [P(2, e) for e in range(5)] if c.is_deleted(p)}
    assert deleted == {P(1, e) for e in range(5)} | {P(1, 6), P(1, 7), P(2, 1), P(2, 2), P(2, 3)}


@pytest.mark.parametrize(
    "ranges",
    [
        (PositionRange(P(1, 5), P(1, 5)),),  # empty
        (PositionRange(P(1, 5), P(1, 9)), PositionRange(P(1, 6), P(1, 10))),  # overlapping
        (PositionRange(P(2, 5), P(2, 9)), PositionRange(P(1, 6), P(1, 10))),  # unsorted
    ],
)
def test_cursor_range_validation(ranges) -> None:
    with pytest.raises(ValueError):
        CursorInfo(P(1, 0), ranges)
    msg = pb.ManagedCursorInfo(cursorsLedgerId=-1, markDeleteLedgerId=1, markDeleteEntryId=0)
    for r in ranges:
        m = msg.individualDeletedMessages.add()
        m.lowerEndpoint.ledgerId, m.lowerEndpoint.entryId = r.lower.ledger_id, r.lower.entry_id
        m.upperEndpoint.ledgerId, m.upperEndpoint.entryId = r.upper.ledger_id, r.upper.entry_id
    with pytest.raises(MLFormatError):
        CursorInfo.decode(msg.SerializeToString())


@pytest.mark.parametrize("data", [b"\xff\xff", b"\x0a\x05\x08"])
def test_garbage_rejected(data: bytes) -> None:
    with pytest.raises(MLFormatError):
        ManagedLedgerInfo.decode(data)
    with pytest.raises(MLFormatError):
        CursorInfo.decode(data)


def test_missing_required_rejected() -> None:
    with pytest.raises(MLFormatError):
        CursorInfo.decode(b"")  # cursorsLedgerId is required
    msg = pb.ManagedLedgerInfo()
    msg.ledgerInfo.add(entries=3)  # no ledgerId
    with pytest.raises(MLFormatError):
        ManagedLedgerInfo.decode(msg.SerializePartialToString())


@given(st.sets(st.integers(0, 300)))
def test_bitset_words_round_trip(indexes: set[int]) -> None:
    words = indexes_to_words(indexes)
    assert all(-(2**63) <= w < 2**63 for w in words)
    assert not words or words[-1] != 0
    assert words_to_indexes(words) == tuple(sorted(indexes))


def test_bitset_java_layout() -> None:
    assert indexes_to_words([0, 1]) == (3,)
    assert indexes_to_words([63]) == (-(2**63),)
    assert indexes_to_words([64]) == (0, 1)
    with pytest.raises(ValueError):
        indexes_to_words([-1])


positions = st.builds(P, st.integers(0, 2**40), st.integers(0, 2**40))


@settings(max_examples=50, deadline=None)
@given(
    positions,
    st.lists(positions, max_size=10, unique=True),
    st.dictionaries(st.text(max_size=4), st.integers(-(2**63), 2**63 - 1), max_size=3),
    st.one_of(st.none(), st.integers(0, 2**62)),
)
def test_cursor_round_trip_property(mark, points, props, last_active) -> None:
    pts = sorted(points)
    ranges = tuple(PositionRange(pts[i], pts[i + 1]) for i in range(0, len(pts) - 1, 2))
    c = CursorInfo(mark, ranges, props, last_active)
    assert CursorInfo.decode(c.encode()) == c
