"""Metadata-store paths: ledger id <-> path both ways, listing helpers, bookie nodes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.bookkeeper import (
    HYBRID_SPLIT,
    MAX_LEDGER_ID,
    SHORT_LEVELS,
    LedgerLayout,
    available_path,
    cookie_path,
    id_range_of,
    ledger_id_from_path,
    ledger_ids_in,
    ledger_level_children,
    ledger_path,
    ledgers_root,
    readonly_path,
    short_ledger_id,
    short_ledger_path,
    tree_of,
    trees,
)

LONG = LedgerLayout.LONG_HIERARCHICAL

EDGES = {
    0: "/m/ledgers/000/0000/0000/0000/L0000",
    1: "/m/ledgers/000/0000/0000/0000/L0001",
    9999: "/m/ledgers/000/0000/0000/0000/L9999",
    10**10 - 1: "/m/ledgers/000/0000/0099/9999/L9999",
    2**63 - 1: "/m/ledgers/922/3372/0368/5477/L5807",
}


@pytest.mark.parametrize(("ledger_id", "path"), EDGES.items())
def test_long_hierarchical_both_ways(ledger_id: int, path: str) -> None:
    assert ledger_path("/m", ledger_id, LONG) == path
    assert ledger_id_from_path("/m", path, LONG) == ledger_id


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/m/ledgers/00/0000/L0000"),
        (1, "/m/ledgers/00/0000/L0001"),
        (HYBRID_SPLIT - 1, "/m/ledgers/21/4748/L3646"),
        (HYBRID_SPLIT, "/m/ledgers/000/0000/0021/4748/L3647"),  # Integer.MAX_VALUE takes the long tree
        (2**32 + 5, "/m/ledgers/000/0000/0042/9496/L7301"),
    ],
)
def test_hierarchical_is_bookkeepers_hybrid(ledger_id: int, path: str) -> None:
    # StringUtils.getHybridHierarchicalLedgerPath: ids below Integer.MAX_VALUE 2/4/4, others 3/4/4/4/4
    assert ledger_path("/m", ledger_id) == ledger_path("/m", ledger_id, LedgerLayout.HIERARCHICAL) == path
    assert ledger_id_from_path("/m", path) == ledger_id


def test_hybrid_refuses_an_id_in_the_other_tree() -> None:
    with pytest.raises(ValueError):
        ledger_id_from_path("/m", "/m/ledgers/000/0000/0000/0000/L0001")  # id 1 lives in the short tree
    with pytest.raises(ValueError):
        ledger_id_from_path("/m", "/m/ledgers/99/9999/L9999")  # above 2**31 - 2: the long tree's
    assert [levels for levels, _ in trees(LedgerLayout.HIERARCHICAL)] == [SHORT_LEVELS, (3, 4, 4, 4, 4)]
    assert trees(LedgerLayout.FLAT) == []


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (1, "/ledgers/00/0000/L0001"),
        (9999, "/ledgers/00/0000/L9999"),
        (10**10 - 1, "/ledgers/99/9999/L9999"),
    ],
)
def test_short_hierarchical_both_ways(ledger_id: int, path: str) -> None:
    assert short_ledger_path("", ledger_id) == path
    assert short_ledger_id("", path) == ledger_id


@pytest.mark.parametrize("bad", [-1, 2**63, 1.0, True])
def test_long_rejects_bad_ids(bad) -> None:
    with pytest.raises(ValueError):
        ledger_path("/m", bad, LONG)


@pytest.mark.parametrize("bad", [-1, 10**10, 2**63 - 1])
def test_short_rejects_ids_it_cannot_hold(bad: int) -> None:
    with pytest.raises(ValueError):
        short_ledger_path("/m", bad)


@pytest.mark.parametrize(
    "path",
    [
        "/m/ledgers/000/0000/0000/0000/0001",  # leaf without L
        "/m/ledgers/000/0000/0000/L0000",  # too few levels
        "/m/ledgers/000/0000/0000/0000/L00001",  # wrong width
        "/m/ledgers/00a/0000/0000/0000/L0000",  # not digits
        "/m/ledgers/999/9999/9999/9999/L9999",  # above 2**63 - 1
        "/x/ledgers/000/0000/0000/0000/L0000",  # other root
        "/m/ledgers/available",
    ],
)
def test_bad_paths_rejected(path: str) -> None:
    for layout in (LONG, LedgerLayout.HIERARCHICAL):
        with pytest.raises(ValueError):
            ledger_id_from_path("/m", path, layout)


@given(st.integers(0, 2**63 - 1), st.sampled_from([LedgerLayout.HIERARCHICAL, LONG]))
def test_round_trip_property(ledger_id: int, layout: LedgerLayout) -> None:
    path = ledger_path("", ledger_id, layout)
    assert ledger_id_from_path("", path, layout) == ledger_id
    assert ledger_id in id_range_of(path.split("/")[2:], tree_of(ledger_id, layout))


def test_path_order_is_id_order() -> None:
    ids = [0, 5, 9999, 10000, 10**10, 2**40, 2**63 - 1]
    assert sorted(ids, key=lambda i: ledger_path("", i, LONG)) == ids


def test_bookie_nodes() -> None:
    assert ledgers_root("/m") == "/m/ledgers"
    assert ledgers_root("/m/") == "/m/ledgers"
    assert available_path("/m") == "/m/ledgers/available"
    assert available_path("/m", "b1:3181") == "/m/ledgers/available/b1:3181"
    assert readonly_path("/m", "b1:3181") == "/m/ledgers/available/readonly/b1:3181"
    assert cookie_path("", "b1:3181") == "/ledgers/cookies/b1:3181"


def test_level_children_filters_and_orders() -> None:
    top = [
        "available",
        "cookies",
        "idgen-long",
        "LAYOUT",
        "INSTANCEID",
        "underreplication",
        "922",
        "010",
        "000",
        "923",
        "12",
        "1234",
    ]
    assert ledger_level_children(0, top) == ["000", "010", "922"]
    assert ledger_level_children(2, ["0010", "0002", "x", "00001"]) == ["0002", "0010"]
    assert ledger_level_children(4, ["L0010", "L0002", "0003", "Lxxxx", "L1"]) == ["L0002", "L0010"]
    with pytest.raises(ValueError):
        ledger_level_children(5, [])
    # the short tree of the hybrid layout: two-digit top level, leaves at level 2
    assert ledger_level_children(0, top, SHORT_LEVELS) == ["12"]
    assert ledger_level_children(2, ["L0010", "L00001"], SHORT_LEVELS) == ["L0010"]


def test_ledger_ids_in_leaf_level() -> None:
    assert ledger_ids_in(["000", "0000", "0000", "0001"], ["L0002", "L0000", "tmp"]) == [10000, 10002]
    assert ledger_ids_in(["922", "3372", "0368", "5477"], ["L5807", "L5808"]) == [2**63 - 1]
    with pytest.raises(ValueError):
        ledger_ids_in(["000"], ["L0000"])


def test_id_ranges() -> None:
    assert id_range_of([]) == range(MAX_LEDGER_ID + 1)
    assert id_range_of(["000"]) == range(10**16)
    assert id_range_of(["001", "0002"]) == range(10**16 + 2 * 10**12, 10**16 + 3 * 10**12)
    assert id_range_of(["922"]) == range(922 * 10**16, MAX_LEDGER_ID + 1)
    assert len(id_range_of(["923"])) == 0
    assert id_range_of(["000", "0000", "0000", "0000", "L0007"]) == range(7, 8)
    with pytest.raises(ValueError):
        id_range_of(["000", "0000", "0000", "0000", "0007"])
