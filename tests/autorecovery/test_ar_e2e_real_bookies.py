"""End to end: 4 real bookie processes on real ZooKeeper, an E=3 Qw=2 Qa=2 ledger, one bookie
killed and its disks wiped, ``magnetar autorecovery`` restores every entry to Qw bookies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from autorecovery import PoolEntryCopier, UnderReplicationManager
from bk_client import BookKeeper, DistributionSchedule
from metadata import open_metadata_store
from protocols.bookkeeper import LedgerState
from tests.support.bookies import MagnetarProcess, RealBookie
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.slow


async def test_autorecovery_restores_replication_with_real_bookies(zk_url: str, tmp_path: Path) -> None:
    procs: list[RealBookie | MagnetarProcess] = []
    try:
        bookies = [RealBookie(tmp_path / f"b{i}", zk_url) for i in range(4)]
        procs += bookies
        for b in bookies:
            await trio.to_thread.run_sync(b.start)
        by_id = {b.bookie_id: (b, b.base) for b in bookies}
        async with open_metadata_store(zk_url) as store, BookKeeper.open(store) as bk:
            await wait_until_async(lambda: _registered(bk, 4), "4 bookies registered", timeout_s=20)
            lh = await bk.create_ledger(3, 2, 2, password=b"e2e")
            payloads = [f"entry {i} ".encode() * 20 for i in range(60)]
            for p in payloads:
                await lh.add_entry(p)
            await lh.close()
            lid = lh.ledger_id
            meta, _ = await bk.ledger_manager.read(lid)
            victim = meta.last_segment.ensemble[1]
            proc, base = by_id[victim]
            proc.kill()
            shutil.rmtree(base / "journal")
            shutil.rmtree(base / "ledgers")

            ar = MagnetarProcess(
                [
                    "autorecovery",
                    "--metadata-url",
                    zk_url,
                    "--set",
                    "lostBookieRecoveryDelay=0",
                    "--set",
                    "poll_interval_s=0.2",
                    "--set",
                    "replication_workers=2",
                ],
                tmp_path / "ar.log",
            )
            procs.append(ar)
            assert "autorecovery" in await trio.to_thread.run_sync(ar.first_line)
            urm = UnderReplicationManager(store)

            async def repaired() -> bool:
                m, _ = await bk.ledger_manager.read(lid)
                return victim not in m.last_segment.ensemble and not await urm.list()

            await wait_until_async(repaired, "AutoRecovery repaired the ledger", timeout_s=60, interval_s=0.2)
            meta, _ = await bk.ledger_manager.read(lid)
            assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 59
            copier = PoolEntryCopier(bk.bookie_client)
            schedule = DistributionSchedule(3, 2, 2)
            ensemble = meta.last_segment.ensemble
            for entry in range(60):
                for i in schedule.write_set(entry):
                    body = await copier.read_entry(ensemble[i], lid, entry, meta)  # digest-checked
                    assert body.endswith(payloads[entry])
            rh = await bk.open_ledger(lid, password=b"e2e", recovery=False)
            assert [e.data for e in await rh.read(0, 59)] == payloads
    finally:
        for p in procs:
            await trio.to_thread.run_sync(p.stop)


async def _registered(bk: BookKeeper, n: int) -> bool:
    return len(await bk.ledger_manager.list_bookies()) >= n
