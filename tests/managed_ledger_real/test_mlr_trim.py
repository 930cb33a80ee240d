"""Trimming over real bookies and ZooKeeper: the trimmed ledgers leave the managed ledger's list
and their ledger metadata is gone from ZooKeeper (checked with a separate kazoo client); the
ledgers a cursor still needs stay, and a new owner reads from the cursor as before."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import trio
from kazoo.client import KazooClient

from bk_client import BookKeeper, NoSuchLedger
from managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
from metadata import open_metadata_store
from protocols.bookkeeper import ledger_path
from protocols.managed_ledger import ManagedLedgerInfo
from tests.managed_ledger_real.mlr_cluster import ROOT, BookieCluster

pytestmark = pytest.mark.slow

NAME = "t/ns/persistent/trim"
CONFIG = ManagedLedgerConfig(
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    max_entries_per_ledger=10,
    min_ledger_rollover_time_minutes=0.0,
    cache_size_mb=1.0,
)


def zk_exists(url: str, paths: list[str]) -> list[bool]:
    """Whether each path exists, asked straight from ZooKeeper (not through Magnetar's store)."""
    parts = urlsplit(url)
    zk = KazooClient(hosts=parts.netloc + parts.path, timeout=10)
    zk.start(timeout=10)
    try:
        return [zk.exists(p) is not None for p in paths]
    finally:
        zk.stop()
        zk.close()


async def test_trim_deletes_ledger_metadata_in_zookeeper(cluster3: BookieCluster) -> None:
    url = cluster3.url
    async with open_metadata_store(url) as store, BookKeeper.open(store, root=ROOT) as bk:
        async with ManagedLedgerFactory(bk, store, CONFIG) as factory:
            ml = await factory.open(NAME)
            cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
            positions = [await ml.add_entry(b"entry %d" % i) for i in range(45)]
            ledgers = [info.ledger_id for info in ml.ledgers]
            assert len(ledgers) == 5  # 10 + 10 + 10 + 10 + 5
            paths = [ledger_path(ROOT, lid) for lid in ledgers]
            assert await trio.to_thread.run_sync(zk_exists, url, paths) == [True] * 5

            # the cursor still needs the third ledger (it acked up to its middle)
            await cursor.mark_delete(positions[24])
            assert [i.ledger_id for i in ml.trimmable_ledgers()] == ledgers[:2]
            assert await ml.trim(ledgers) == ledgers[:2]  # asking for all trims only what is allowed

            assert await trio.to_thread.run_sync(zk_exists, url, paths) == [False, False, True, True, True]
            for lid in ledgers[:2]:
                with pytest.raises(NoSuchLedger):
                    await bk.open_ledger(lid, recovery=False)
            value, _ = await store.get(f"/managed-ledgers/{NAME}")
            assert [i.ledger_id for i in ManagedLedgerInfo.decode(value).ledgers] == ledgers[2:]
            read = [e.data for e in await cursor.read_entries(100)]
            assert read == [b"entry %d" % i for i in range(25, 45)]

        # a new owner (new client, same ZooKeeper) sees the trimmed list and the cursor
    async with open_metadata_store(url) as store, BookKeeper.open(store, root=ROOT) as bk:
        async with ManagedLedgerFactory(bk, store, CONFIG) as factory:
            ml = await factory.open(NAME)
            assert [i.ledger_id for i in ml.ledgers][:3] == ledgers[2:]
            cursor = await ml.open_cursor("sub")
            assert cursor.mark_delete_position == positions[24]
            assert [e.data for e in await cursor.read_entries(100)] == [b"entry %d" % i for i in range(25, 45)]
            # everything acked: every closed ledger goes, only this owner's current ledger stays
            await cursor.mark_delete(ml.last_confirmed_entry)
            assert await ml.trim([i.ledger_id for i in ml.ledgers]) == ledgers[2:]
            assert await trio.to_thread.run_sync(zk_exists, url, paths) == [False] * 5
            current = [i.ledger_id for i in ml.ledgers]
            assert len(current) == 1 and current[0] not in ledgers
            assert await trio.to_thread.run_sync(zk_exists, url, [ledger_path(ROOT, current[0])]) == [True]
