"""Trimming never deletes a ledger a cursor needs; factory list/delete; config."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.common.config import ConfigError, load_config
from managed_ledger import (
    InitialPosition,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    Position,
)
from tests.support.managed_ledger import NAME, config


async def test_trim_only_what_every_durable_cursor_passed(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=3), clock) as f:
        ml = await f.open(NAME)
        fast = await ml.open_cursor("fast", InitialPosition.EARLIEST)
        slow = await ml.open_cursor("slow", InitialPosition.EARLIEST)
        reader = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
        pos = [await ml.add_entry(b"%d" % i) for i in range(10)]
        await ml._roll_done.wait()
        ids = [i.ledger_id for i in ml.ledgers]
        assert len(ids) == 4  # 3 + 3 + 3 + 1 entries
        assert ml.trimmable_ledgers() == []
        await fast.mark_delete(pos[9])
        await slow.mark_delete(pos[4])  # in the middle of the second ledger
        assert [i.ledger_id for i in ml.trimmable_ledgers()] == [ids[0]]
        assert await ml.trim(ids) == [ids[0]]  # asking for more trims only what is allowed
        assert ids[0] in bk.deleted_ledgers and ids[1] in bk.ledger_ids()
        assert [i.ledger_id for i in ml.ledgers] == ids[1:]
        assert ml.number_of_entries == 7
        assert slow.backlog == 5 and fast.backlog == 0
        # the non-durable reader that lagged was moved to the first remaining entry
        assert (await reader.read_entries(1))[0].position == pos[3]
        await slow.mark_delete(pos[8])
        assert await ml.trim([i.ledger_id for i in ml.trimmable_ledgers()]) == [ids[1], ids[2]]
        # the mark-delete position pointed into a deleted ledger: moved to the next one
        assert slow.mark_delete_position == Position(ids[3], -1)
        assert slow.backlog == 1
        assert ml.trimmable_ledgers() == []  # never the current/last ledger
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert [i.ledger_id for i in ml.ledgers][:1] == [ids[3]]
        assert ml.cursors["slow"].backlog == 1
        assert [e.position for e in await ml.cursors["slow"].read_entries(10)] == [pos[9]]


async def test_no_cursor_means_everything_closed_is_trimmable(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=2), clock) as f:
        ml = await f.open(NAME)
        for i in range(5):
            await ml.add_entry(b"%d" % i)
        await ml._roll_done.wait()
        assert len(ml.trimmable_ledgers()) == 2


async def test_factory_list_and_delete(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        for topic in ("a", "b"):
            ml = await f.open(f"public/default/persistent/{topic}")
            await ml.open_cursor("sub")
            await ml.add_entry(b"x")
        await f.open("other/ns/persistent/c")
        assert await f.list("public/default") == ["public/default/persistent/a", "public/default/persistent/b"]
        assert await f.list("public/default/persistent/") == [
            "public/default/persistent/a",
            "public/default/persistent/b",
        ]
        assert len(await f.list()) == 3
        ledger_ids = [i.ledger_id for i in f.get("public/default/persistent/a").ledgers]
        await f.delete("public/default/persistent/a")
        assert all(lid not in bk.ledger_ids() for lid in ledger_ids)
        assert await f.list("public") == ["public/default/persistent/b"]
        with pytest.raises(ManagedLedgerError):
            await f.delete("public/default/persistent/a")
        same = await f.open("public/default/persistent/b")
        assert same is await f.open("public/default/persistent/b")


def test_config_aliases_and_validation() -> None:
    cfg = load_config(
        ManagedLedgerConfig,
        {
            "managedLedgerMaxEntriesPerLedger": 10,
            "managedLedgerMinLedgerRolloverTimeMinutes": 2,
            "managedLedgerCursorPositionFlushSeconds": 5,
        },
    )
    assert cfg.max_entries_per_ledger == 10 and cfg.minimum_rollover_time_s == 120.0
    assert cfg.cursor_persist_interval_s == 5.0
    d = ManagedLedgerConfig()
    assert (d.max_entries_per_ledger, d.max_size_per_ledger_mb, d.maximum_rollover_time_s) == (50000, 2048, 14400.0)
    assert d.max_unacked_ranges_to_persist == 10000 and d.inactive_ledger_rollover_time_s == 0
    with pytest.raises(ConfigError, match="write_quorum"):
        load_config(ManagedLedgerConfig, {"managedLedgerDefaultWriteQuorum": 1, "managedLedgerDefaultAckQuorum": 2})
    with pytest.raises(ConfigError, match="min_ledger_rollover"):
        dataclasses.replace(d, min_ledger_rollover_time_minutes=500).validate()
