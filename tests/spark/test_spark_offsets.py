"""Pure offset arithmetic and planning of the Magnetar source (no Spark, no broker)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinks.spark._offsets import (
    EARLIEST,
    DataLoss,
    LedgerSpan,
    Position,
    Segment,
    advance,
    allocate,
    backlog,
    cap_at_max_read,
    latest_position,
    offsets_from_json,
    offsets_to_json,
    parse_starting_offsets,
    plan_partition,
    split_plan,
)
from sinks.spark._sink import sequence_id

LEDGERS = (LedgerSpan(3, 10, 1000), LedgerSpan(7, 0, 0), LedgerSpan(9, 5, 1000), LedgerSpan(12, 4, 400))


def test_positions_order_and_round_trip_json() -> None:
    assert Position(1, 2, -1) == Position(1, 2, 0) < Position(1, 2, 1) < Position(1, 3, 0) < Position(2, 0, 0)
    offsets = {"b": Position(1, 2, 3), "a": EARLIEST}
    encoded = offsets_to_json(offsets)
    assert list(encoded) == ["a", "b"] and encoded["b"] == {"ledger": 1, "entry": 2, "batch": 3}
    assert offsets_from_json(encoded) == offsets
    with pytest.raises(ValueError):
        Position.from_json({"ledger": "x"})


def test_parse_starting_offsets() -> None:
    assert parse_starting_offsets(" Earliest ") == "earliest"
    parsed = parse_starting_offsets('{"t": {"ledger": 3, "entry": 4}, "u": -2, "v": -1}')
    assert parsed == {"t": Position(3, 4, 0), "u": EARLIEST, "v": "latest"}
    with pytest.raises(ValueError):
        parse_starting_offsets("soon")


def test_plan_covers_exactly_the_range_across_ledgers() -> None:
    plan, loss = plan_partition("t", Position(3, 8, 0), Position(12, 2, 0), LEDGERS)
    assert loss is None
    assert plan.segments == (Segment(3, 8, 9), Segment(9, 0, 4), Segment(12, 0, 1))
    # an end inside a batch includes that entry (its first messages)
    plan, _ = plan_partition("t", Position(12, 0, 0), Position(12, 2, 3), LEDGERS)
    assert plan.segments == (Segment(12, 0, 2),)


def test_data_loss_is_raised_or_skipped() -> None:
    trimmed = LEDGERS[2:]
    with pytest.raises(DataLoss) as info:
        plan_partition("t", Position(3, 5, 0), Position(12, 4, 0), trimmed)
    assert "3:5:0" in str(info.value) and "9:0:0" in str(info.value)
    plan, loss = plan_partition("t", Position(3, 5, 0), Position(12, 4, 0), trimmed, fail_on_data_loss=False)
    assert loss is not None and plan.start == Position(9, 0, 0) and plan.entries == 9
    plan, loss = plan_partition("t", EARLIEST, Position(12, 4, 0), trimmed)
    assert loss is None and plan.entries == 9


def test_advance_skips_finished_ledgers() -> None:
    assert advance(Position(3, 0, 0), 10, LEDGERS) == Position(9, 0, 0)  # past the empty ledger 7
    assert advance(Position(3, 0, 0), 12, LEDGERS) == Position(9, 2, 0)
    assert advance(EARLIEST, 0, LEDGERS) == Position(3, 0, 0)
    assert advance(Position(12, 4, 0), 0, LEDGERS) == latest_position(LEDGERS) == Position(12, 4, 0)


def test_allocate_respects_both_budgets() -> None:
    backlogs = {"a": backlog(Position(3, 0, 0), LEDGERS), "b": backlog(Position(12, 0, 0), LEDGERS)}
    take = allocate(backlogs, 10, None)
    assert sum(take.values()) == 10 and take["b"] >= 1
    take = allocate(backlogs, None, 350)  # 100-byte entries
    assert sum(take.values()) <= 3
    assert allocate(backlogs, None, 1) == {"a": 1, "b": 0}  # always progress
    assert allocate({"a": []}, 5, 5) == {"a": 0}


@given(st.lists(st.integers(0, 30), min_size=1, max_size=6), st.integers(1, 50), st.integers(1, 60))
def test_split_plan_keeps_every_entry_once(sizes: list[int], piece: int, take: int) -> None:
    ledgers = tuple(LedgerSpan(i * 2, n, n * 10) for i, n in enumerate(sizes))
    start = Position(0, 0, 0)
    end = advance(start, take, ledgers)
    plan, _ = plan_partition("t", start, end, ledgers)
    pieces = split_plan(plan, piece)
    entries = [(s.ledger_id, e) for p in pieces for s in p.segments for e in range(s.first, s.last + 1)]
    whole = [(s.ledger_id, e) for s in plan.segments for e in range(s.first, s.last + 1)]
    assert entries == whole and len(whole) == min(take, sum(sizes))
    assert all(p.entries <= piece for p in pieces)
    assert [pieces[0].start, pieces[-1].end] == [plan.start, plan.end] if pieces[0].segments else True
    for a, b in itertools.pairwise(pieces):
        assert a.end == b.start


def test_sequence_ids_grow_across_batches_and_are_never_zero() -> None:
    assert sequence_id(0, 0) == 1
    assert sequence_id(1, 0) > sequence_id(0, 2**32 - 2)
    with pytest.raises(ValueError):
        sequence_id(0, 2**32)


def test_plans_stop_at_the_max_read_position() -> None:
    # entries behind an open transaction are not readable yet: the plan must not wait for them
    ledgers = (LedgerSpan(1, 10, 1000), LedgerSpan(2, 4, 400), LedgerSpan(3, 2, 200))
    assert cap_at_max_read(ledgers, (2, 1)) == (LedgerSpan(1, 10, 1000), LedgerSpan(2, 2, 200))
    assert cap_at_max_read(ledgers, (2, -1)) == (LedgerSpan(1, 10, 1000), LedgerSpan(2, 0, 0))
    assert cap_at_max_read(ledgers, (3, 5)) == ledgers
    assert latest_position(cap_at_max_read(ledgers, (2, 1))) == Position(2, 2, 0)
