"""Offloading a managed ledger's closed ledgers (``managed_ledger._offload``) over MockBookKeeper and
the filesystem tier: manual and threshold offload, the deletion lag, reads after the bookie copy is
gone (cursors, readers, seeks, reopening), retention deleting the tier copy, and a tier that fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from managed_ledger import (
    InitialPosition,
    ManagedLedgerError,
    ManagedLedgerFactory,
    OffloadInProgress,
    OffloadStatus,
    Position,
)
from tests.support.managed_ledger import NAME, config
from tiered_storage import OffloadPolicies, TieredStorage, TieredStorageConfig, data_key


def tier(path: Path, **cfg: Any) -> TieredStorage:
    base: dict[str, Any] = dict(
        driver="filesystem", file_system_uri=str(path), read_buffer_size=256, deletion_lag_ms=0, offload_retries=1
    )
    base.update(cfg)
    return TieredStorage(TieredStorageConfig(**base))


async def fill(ml: Any, n: int) -> list[Position]:
    out = [await ml.add_entry(b"m-%04d" % i) for i in range(n)]
    await ml._roll_done.wait()
    return out


async def test_manual_offload_then_reads_come_from_the_tier(store, bk, clock, tmp_path: Path) -> None:
    t = tier(tmp_path, deletion_lag_ms=60_000)
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=10), clock, tier=t) as f:
        ml = await f.open(NAME)
        sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        pos = await fill(ml, 35)
        ids = [i.ledger_id for i in ml.ledgers]
        first_left = await ml.offload_prefix(pos[-1])
        assert first_left == Position(ids[-1], 0)  # the last (current) ledger stays on bookies
        assert [i.offloaded for i in ml.ledgers] == [True, True, True, False]
        assert ml.offload_status.status is OffloadStatus.SUCCESS
        assert ml.internal_stats()["ledgers"][0]["offloaded"] is True
        assert ml.offloaded_size == sum(i.size for i in ml.ledgers[:3])
        # within the deletion lag the bookie copies stay
        assert (await ml.check_offload())["bookieCopiesDeleted"] == []
        assert set(ids[:3]) <= set(bk.ledger_ids())
        assert "kept until the deletion lag" in ml.explain_offload(ml.ledgers[0])["bookieCopy"]
        clock.advance(61)
        assert (await ml.check_offload())["bookieCopiesDeleted"] == ids[:3]
        assert not set(ids[:3]) & set(bk.ledger_ids())
        assert ml.explain_offload(ml.ledgers[0])["location"] == "tier"
        f.cache.invalidate(NAME)
        got = await sub.read_entries(100)
        assert [e.data for e in got] == [b"m-%04d" % i for i in range(35)]
        reader = ml.new_non_durable_cursor(pos[17])  # a reader starting inside an offloaded ledger
        assert (await reader.read_entries(1))[0].data == b"m-0017"
        await sub.seek(pos[5])
        assert (await sub.read_entries(2))[0].data == b"m-0005"
    # a new owner (restart) reads the offloaded ledgers from the tier
    async with ManagedLedgerFactory(bk, store, config(), clock, tier=tier(tmp_path)) as f:
        ml = await f.open(NAME)
        assert [i.offloaded for i in ml.ledgers][:3] == [True, True, True]
        c = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
        assert [e.data for e in await c.read_entries(12)][10:] == [b"m-0010", b"m-0011"]


async def test_threshold_offload_and_zero_lag(store, bk, clock, tmp_path: Path) -> None:
    async def policies(_name: str) -> OffloadPolicies:
        return OffloadPolicies.merge(OffloadPolicies({"managedLedgerOffloadThresholdInBytes": 60}), t.broker_policies)

    t = tier(tmp_path)
    async with ManagedLedgerFactory(
        bk, store, config(max_entries_per_ledger=10), clock, tier=t, offload_policies=policies
    ) as f:
        ml = await f.open(NAME)
        await ml.open_cursor("sub", InitialPosition.EARLIEST)
        await fill(ml, 45)  # 5 ledgers of 60 bytes (the last, current one holds 5 entries)
        report = await ml.check_offload(wait=True)
        # newest first: current (30 B) + the next (60 B) already exceed 60 B, so that one and older go
        assert len(report["offloadStarted"]) == 4
        assert [i.offloaded for i in ml.ledgers] == [True, True, True, True, False]
        await ml.check_offload()
        assert len([i for i in ml.ledgers if not i.on_bookies]) == 4


async def test_retention_trim_deletes_the_tier_copy(store, bk, clock, tmp_path: Path) -> None:
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock, tier=tier(tmp_path)) as f:
        ml = await f.open(NAME)
        pos = await fill(ml, 12)
        await ml.offload_prefix(pos[-1])
        await ml.check_offload()  # lag 0: bookie copies go
        first = ml.ledgers[0]
        assert first.offload is not None and not first.on_bookies
        assert (tmp_path / data_key(first.offload.uid, first.ledger_id)).exists()
        assert await ml.trim([first.ledger_id]) == [first.ledger_id]
        assert not (tmp_path / data_key(first.offload.uid, first.ledger_id)).exists()
        await f.delete(NAME)
        assert [p.name for p in tmp_path.iterdir()] == []


async def test_tier_down_fails_clearly_keeps_bookies_and_a_retry_succeeds(store, bk, clock, tmp_path: Path) -> None:
    target = tmp_path / "tier"
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=5), clock, tier=tier(target)) as f:
        ml = await f.open(NAME)
        pos = await fill(ml, 12)
        ids = [i.ledger_id for i in ml.ledgers]
        with pytest.raises(ManagedLedgerError, match="does not exist"):
            await ml.offload_prefix(pos[-1])
        status = ml.offload_status
        assert status.status is OffloadStatus.ERROR and "not offloaded" in status.error
        assert status.first_unoffloaded == Position(ids[0], 0)
        assert not any(i.offloaded for i in ml.ledgers)
        await ml.check_offload()
        assert set(ids) <= set(bk.ledger_ids())  # nothing deleted from the bookies meanwhile
        assert "did not complete" in ml.explain_offload(ml.ledgers[0])["bookieCopy"]
        stale = ml.ledgers[0].offload
        target.mkdir()
        ml.start_offload(pos[-1])
        with pytest.raises(OffloadInProgress):
            ml.start_offload(pos[-1])
        assert (await ml.wait_offload()).status is OffloadStatus.SUCCESS
        assert ml.ledgers[0].offload is not None and ml.ledgers[0].offload != stale  # a new uid


async def test_a_ledger_trimmed_during_its_offload_leaves_no_copy(store, bk, clock, tmp_path: Path) -> None:
    t = tier(tmp_path)
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=400), clock, tier=t) as f:
        ml = await f.open(NAME)
        pos = await fill(ml, 401)
        first = ml.ledgers[0].ledger_id
        async with trio.open_nursery() as n:
            n.start_soon(ml.offload_prefix, pos[-1])
            while ml.ledgers[0].offload is None:  # the uid is recorded before writing
                await trio.sleep(0.001)
            assert await ml.trim([first]) == [first]
        assert ml.offload_status.status is OffloadStatus.SUCCESS
        assert list(tmp_path.iterdir()) == []


async def test_without_a_tier_offload_says_so(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        with pytest.raises(ManagedLedgerError, match="no tiered storage"):
            ml.start_offload(Position(1, 0))
        assert ml.offload_status.status is OffloadStatus.NOT_RUN
