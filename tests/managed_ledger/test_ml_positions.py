"""Position arithmetic over the ledger list, and acked ranges against a set model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from managed_ledger._ledger_list import LedgerList
from managed_ledger._ranges import AckRanges
from protocols.managed_ledger import LedgerInfo, Position


def _list() -> tuple[LedgerList, list[Position]]:
    ll = LedgerList((LedgerInfo(3, 2, 20), LedgerInfo(5, 3, 30)))
    ll.append_current(9)
    ll.current_entries = 2
    ll.current_size = 2
    pos = [
        Position(3, 0),
        Position(3, 1),
        Position(5, 0),
        Position(5, 1),
        Position(5, 2),
        Position(9, 0),
        Position(9, 1),
    ]
    return ll, pos


def test_normalize_and_counts() -> None:
    ll, pos = _list()
    assert ll.last_confirmed() == Position(9, 1)
    assert ll.next_valid(Position(3, 1)) == Position(5, 0)
    assert ll.normalize(Position(4, 7)) == Position(5, 0)  # a ledger no longer listed
    assert ll.normalize(Position(1, 0)) == Position(3, 0)
    assert ll.next_valid(Position(9, 1)) == Position(9, 2)  # the current ledger grows
    assert ll.next_valid(Position(5, -1)) == Position(5, 0)
    assert ll.count_between(Position(3, -1), Position(9, 1)) == 7
    assert ll.count_between(Position(3, 1), Position(5, -1)) == 0
    for i, p in enumerate(pos):
        assert ll.position_after(Position(3, -1), i + 1) == p
        assert ll.count_between(Position(3, -1), p) == i + 1
    assert ll.position_after(Position(3, -1), 8) is None
    assert list(ll.iter_runs(Position(3, 1), Position(9, 0))) == [(3, 1, 1), (5, 0, 2), (9, 0, 0)]
    assert ll.number_of_entries == 7 and ll.total_size == 52


@settings(max_examples=200)
@given(st.lists(st.integers(0, 6), max_size=12))
def test_ranges_match_a_set(acks: list[int]) -> None:
    ll, pos = _list()
    ranges = AckRanges(ll.next_valid, ll.count_between)
    for i in acks:
        ranges.add(pos[i])
    model = set(acks)
    assert [pos[i] in ranges for i in range(7)] == [i in model for i in range(7)]
    assert ranges.acked_entries == len(model)
    # ranges are maximal: consecutive acked indexes share a range
    assert len(ranges) == sum(1 for i in model if i - 1 not in model)
    ranges.remove_upto(pos[3])
    assert ranges.acked_entries == len({i for i in model if i > 3})
