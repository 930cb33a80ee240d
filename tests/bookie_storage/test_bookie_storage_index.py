"""sqlite index: bulk put/get, last entry, ledger states, delete, compaction location updates."""

from __future__ import annotations

from pathlib import Path

from bookie.storage._index import EntryIndex, LedgerInfo


def test_bulk_put_get_and_reopen(tmp_path: Path) -> None:
    idx = EntryIndex(tmp_path / "i.sqlite")
    rows = [(lid, eid, (lid << 32) | eid) for lid in range(3) for eid in range(1000)]
    idx.put_batch(rows, {0: LedgerInfo(fenced=True, master_key=b"k", explicit_lac=b"lac", last_entry=999)})
    assert idx.get_location(2, 500) == (2 << 32) | 500
    assert idx.get_location(2, 1000) is None
    assert idx.last_entry(1) == 999
    assert idx.last_entry(9) is None
    idx.close()
    idx = EntryIndex(tmp_path / "i.sqlite")
    assert idx.get_location(1, 7) == (1 << 32) | 7
    assert idx.load_ledgers() == {0: LedgerInfo(True, b"k", b"lac", 999)}
    assert idx.list_ledgers() == [0]
    assert idx.statistics().lookups == 1
    idx.close()


def test_put_replaces_and_delete_ledger(tmp_path: Path) -> None:
    idx = EntryIndex(tmp_path / "i.sqlite")
    idx.put_batch([(1, 0, 10), (1, 1, 11), (2, 0, 20)], {1: LedgerInfo(), 2: LedgerInfo()})
    idx.put_batch([(1, 0, 99)], {1: LedgerInfo(last_entry=1)})
    assert idx.get_location(1, 0) == 99
    assert idx.delete_ledger(1) == 2
    assert idx.get_location(1, 1) is None
    assert idx.get_location(2, 0) == 20
    assert idx.list_ledgers() == [2]
    assert idx.delete_ledger(1) == 0
    idx.close()


def test_update_locations_only_if_still_in_old_log(tmp_path: Path) -> None:
    idx = EntryIndex(tmp_path / "i.sqlite")
    old, other, new = 5, 6, 9
    idx.put_batch([(1, 0, (old << 32) | 100), (1, 1, (other << 32) | 200), (1, 2, (old << 32) | 300)], {})
    changed = idx.update_locations(
        [(1, 0, (new << 32) | 1), (1, 1, (new << 32) | 2), (1, 3, (new << 32) | 3), (1, 2, (new << 32) | 4)], old
    )
    assert changed == 2
    assert idx.get_location(1, 0) == (new << 32) | 1
    assert idx.get_location(1, 1) == (other << 32) | 200  # moved elsewhere since: untouched
    assert idx.get_location(1, 3) is None  # never inserted by an update
    assert idx.get_location(1, 2) == (new << 32) | 4
    idx.close()
