"""The flat ledger manager on a real bookie process and ZooKeeper (``ledgerManagerFactoryClass =
flat`` on both sides): ledgers land as children of ``{root}/ledgers`` and the LAYOUT node records
the flat factory; entries read back after a bookie restart; a deleted ledger is garbage-collected
by a forced GC run (which lists the flat layout) while the live ones stay; a bookie or client
configured hierarchical refuses the cluster with an error naming the key."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import trio

from bk_client import BookKeeper, ClientConfig, MetadataStoreError, NoSuchEntry, NoSuchLedger
from metadata import open_metadata_store
from protocols.bookkeeper import LedgerLayout, decode_layout, layout_path, ledger_path
from tests.support.bookies import RealBookie
from tests.support.ports import free_port
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

FLAT = ClientConfig(
    ledger_manager_factory_class="flat",
    read_entry_timeout_s=5.0,
    reconnect_backoff_min_s=0.05,
    reconnect_backoff_max_s=0.5,
)
PASSWORD = b"flat"


def body(lid: int, i: int) -> bytes:
    return b"flat ledger %d entry %d " % (lid, i) * 20


async def force_gc(http_url: str) -> None:
    async with httpx.AsyncClient(base_url=http_url) as http:
        resp = await http.put("/api/v1/bookie/gc", json={"is_in_force_gc": True})
        assert resp.status_code == 200, resp.text
        with trio.fail_after(60):
            while (await http.get("/api/v1/bookie/gc")).json()["is_in_force_gc"] == "true":
                await trio.sleep(0.1)


async def wait_registered(bk: BookKeeper, bookie_id: str) -> None:
    with trio.fail_after(60):
        while bookie_id not in await bk.ledger_manager.list_bookies():
            await trio.sleep(0.1)


async def test_flat_layout_end_to_end(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/flat-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    port = free_port()
    bookie = RealBookie(
        tmp_path / "b0",
        url,
        [
            "--port",
            str(port),
            "--set",
            "ledgerManagerFactoryClass=flat",
            "--set",
            "flushInterval=200",
            "--set",
            "gcWaitTime=600000",
        ],
        bookie_id=f"127.0.0.1:{port}",
        http=True,
    )
    await trio.to_thread.run_sync(bookie.start)
    try:
        async with open_metadata_store(url) as store, BookKeeper.open(store, config=FLAT) as bk:
            await wait_registered(bk, bookie.bookie_id)
            data, _ = await store.get(layout_path(""))
            assert decode_layout(data) is LedgerLayout.FLAT  # the bookie, first to start, recorded it
            ids = []
            for _ in range(3):
                lh = await bk.create_ledger(1, 1, 1, password=PASSWORD)
                for i in range(10):
                    await lh.add_entry(body(lh.ledger_id, i))
                await lh.close()
                ids.append(lh.ledger_id)
            for lid in ids:
                assert await store.exists(ledger_path("", lid, LedgerLayout.FLAT)) is not None
                assert await store.exists(ledger_path("", lid)) is None
            assert [i async for i in bk.ledger_manager.iterate_ledger_ids()] == sorted(ids)

        await trio.to_thread.run_sync(bookie.stop)
        await trio.to_thread.run_sync(bookie.start)
        async with open_metadata_store(url) as store, BookKeeper.open(store, config=FLAT) as bk:
            await wait_registered(bk, bookie.bookie_id)
            for lid in ids:
                rh = await bk.open_ledger(lid, password=PASSWORD)
                assert [e.data for e in await rh.read(0, 9)] == [body(lid, i) for i in range(10)]
            await bk.delete_ledger(ids[0])
            await force_gc(bookie.http_url)
            with pytest.raises((NoSuchLedger, NoSuchEntry)):  # GC found its flat node gone
                await bk.bookie_client.read_entry(bookie.bookie_id, ids[0], 0)
            for lid in ids[1:]:  # the live ledgers' nodes were found: kept
                assert (await bk.bookie_client.read_entry(bookie.bookie_id, lid, 9)).endswith(body(lid, 9))

        async with open_metadata_store(url) as store:
            with pytest.raises(MetadataStoreError, match="ledgerManagerFactoryClass"):
                async with BookKeeper.open(store, config=ClientConfig(ledger_manager_factory_class="hierarchical")):
                    pass
            async with BookKeeper.open(store) as bk:  # none configured: the recorded layout
                assert bk.ledger_manager.layout is LedgerLayout.FLAT
        other = free_port()
        hier = RealBookie(
            tmp_path / "b1",
            url,
            ["--port", str(other), "--set", "ledgerManagerFactoryClass=hierarchical"],
            bookie_id=f"127.0.0.1:{other}",
        )
        with pytest.raises(RuntimeError, match="ledger_manager_factory_class"):
            await trio.to_thread.run_sync(hier.start)
    finally:
        await trio.to_thread.run_sync(bookie.stop)
