"""The flat ledger layout and the LAYOUT node (pure): paths, their inverse, listing, the
``ledgerManagerFactoryClass`` names and BookKeeper's LedgerLayout text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.bookkeeper import (
    MAX_LEDGER_ID,
    LayoutFormatError,
    LedgerLayout,
    decode_layout,
    encode_layout,
    flat_ledger_ids,
    layout_conflict,
    layout_path,
    ledger_id_from_path,
    ledger_path,
    parse_layout_name,
)


def test_flat_paths_are_children_of_the_ledgers_root() -> None:
    assert ledger_path("/m", 1, LedgerLayout.FLAT) == "/m/ledgers/L0000000001"
    assert ledger_path("", 12345678901, LedgerLayout.FLAT) == "/ledgers/L12345678901"
    assert ledger_path("", 1) == "/ledgers/00/0000/L0001"  # hierarchical stays the default
    with pytest.raises(ValueError):
        ledger_path("", -1, LedgerLayout.FLAT)


@given(st.integers(0, MAX_LEDGER_ID))
def test_flat_path_round_trips(ledger_id: int) -> None:
    path = ledger_path("/r", ledger_id, LedgerLayout.FLAT)
    assert ledger_id_from_path("/r", path, LedgerLayout.FLAT) == ledger_id
    assert flat_ledger_ids([path.rsplit("/", 1)[1]]) == [ledger_id]


@pytest.mark.parametrize(
    "path",
    [
        "/r/ledgers/L000000001",
        "/r/ledgers/L00000000001",
        "/r/ledgers/X0000000001",
        "/r/ledgers/000/L0000000001",
        "/r/ledgers/L9999999999999999999",
        "/other/L0000000001",
        "/r/ledgers/L000000000a",
    ],
)
def test_flat_paths_it_would_not_write_are_refused(path: str) -> None:
    with pytest.raises(ValueError):
        ledger_id_from_path("/r", path, LedgerLayout.FLAT)


def test_flat_listing_keeps_ledger_nodes_only_in_id_order() -> None:
    children = [
        "L0000000010",
        "available",
        "LAYOUT",
        "idgen-long",
        "cookies",
        "000",
        "L0000000002",
        "L00000000003",
        "L12345678901",
        "underreplication",
        "L",
    ]
    assert flat_ledger_ids(children) == [2, 10, 12345678901]


@pytest.mark.parametrize(
    ("name", "layout"),
    [
        ("flat", LedgerLayout.FLAT),
        ("Hierarchical", LedgerLayout.HIERARCHICAL),
        ("longhierarchical", LedgerLayout.LONG_HIERARCHICAL),
        ("org.apache.bookkeeper.meta.FlatLedgerManagerFactory", LedgerLayout.FLAT),
        ("org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", LedgerLayout.HIERARCHICAL),
        ("org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory", LedgerLayout.LONG_HIERARCHICAL),
        ("", None),
        ("  ", None),
    ],
)
def test_config_names(name: str, layout: LedgerLayout | None) -> None:
    # BookKeeper's ledgerManagerType names and factory classes; empty follows the cluster's record
    assert parse_layout_name(name) is layout


def test_an_unknown_manager_is_refused() -> None:
    with pytest.raises(LayoutFormatError, match="unknown ledger manager"):
        parse_layout_name("org.apache.bookkeeper.meta.MSLedgerManagerFactory")


def test_layout_node_is_bookkeepers_text() -> None:
    assert layout_path("/m") == "/m/ledgers/LAYOUT"
    # LedgerLayout.serialize's bytes: no newline after the manager version
    assert encode_layout(LedgerLayout.FLAT) == b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1"
    assert (
        encode_layout(LedgerLayout.HIERARCHICAL) == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    )
    assert (
        encode_layout(LedgerLayout.LONG_HIERARCHICAL)
        == b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1"
    )
    for layout in LedgerLayout:
        assert decode_layout(encode_layout(layout)) is layout
        assert decode_layout(encode_layout(layout) + b"\n") is layout  # as earlier Magnetar versions wrote it


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"1\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1\n",
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory\n",
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:7\n",
        b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:2\n",
        b"2\n\xff\n",
    ],
)
def test_layout_nodes_magnetar_cannot_use_are_refused(data: bytes) -> None:
    with pytest.raises(LayoutFormatError):
        decode_layout(data)


def test_conflict_names_both_layouts() -> None:
    assert layout_conflict(LedgerLayout.FLAT, LedgerLayout.FLAT) is None
    why = layout_conflict(LedgerLayout.FLAT, LedgerLayout.HIERARCHICAL)
    assert why is not None and "flat" in why and "hierarchical" in why and "ledgerManagerFactoryClass" in why
