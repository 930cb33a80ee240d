"""GC end to end in a real ``magnetar bookie`` process on ZooKeeper: ledgers written over the bookie
protocol, their metadata registered and then partly deleted, ``PUT /api/v1/bookie/gc``, and the
entry logs shrink on disk while every live entry still reads back (also after a restart)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from click.testing import CliRunner

from magnetar.cli import main as cli
from metadata import open_metadata_store
from protocols.bookkeeper import ledger_path
from tests.support.bookie_server import check_reads, entry, write_entries
from tests.support.bookies import RealBookie

from .gc_helpers import log_bytes, metadata_for

BOOKIE_ID = "gc-e2e-bookie"
LOG_LIMIT = 64 * 1024
ENTRIES = 24
SIZE = 1500

pytestmark = pytest.mark.slow


def _bookie(base: Path, metadata_url: str) -> RealBookie:
    """``magnetar bookie`` with HTTP, GC every second and compaction due every few seconds."""
    sets = [
        f"logSizeLimit={LOG_LIMIT}",
        "gcWaitTime=1000",
        "minorCompactionInterval=2",
        "majorCompactionInterval=3",
        "flushInterval=200",
        "compaction_free_space_reserve_bytes=0",
        "compactionRateByEntries=1000000",
    ]
    return RealBookie(
        base, metadata_url, [a for s in sets for a in ("--set", s)], bookie_id=BOOKIE_ID, http=True, log_level="INFO"
    )


def _body(lid: int, eid: int) -> bytes:
    return entry(lid, eid, bytes([lid]) * SIZE)


async def _get_json(http: httpx.AsyncClient, path: str):  # type: ignore[no-untyped-def]
    resp = await http.get(path)
    assert resp.status_code == 200, resp.text
    return resp.json()


async def test_bookie_process_gives_deleted_ledgers_space_back(tmp_path: Path, zk_url: str) -> None:
    # a checkpoint writes entries sorted by ledger, so consecutive ledgers share logs:
    alone = list(range(1, 9))  # the first half deleted: its logs die whole
    mixed = list(range(20, 36))  # every other one deleted: half-used logs for compaction
    deleted = alone[:4] + mixed[::2]
    live = sorted(set(alone + mixed) - set(deleted))
    bookie = _bookie(tmp_path, zk_url)
    await trio.to_thread.run_sync(bookie.start)
    try:
        async with open_metadata_store(zk_url) as store:
            for lid in alone + mixed:
                ml_name = f"tenant/ns/persistent/t{lid}".encode()
                md = metadata_for([BOOKIE_ID], custom={"pulsar/managed-ledger": ml_name})
                await store.create(ledger_path("", lid), md.encode(), make_parents=True)
            await write_entries(bookie.port, alone, ENTRIES, _body)
            await write_entries(bookie.port, mixed, ENTRIES, _body)
            written = len(alone + mixed) * ENTRIES * SIZE
            with trio.fail_after(30):  # the periodic checkpoint moves the entries into entry logs
                while log_bytes(tmp_path) < written:
                    await trio.sleep(0.1)
            before = log_bytes(tmp_path)

            for lid in deleted:
                await store.delete(ledger_path("", lid))
            async with httpx.AsyncClient(base_url=bookie.http_url, timeout=30) as http:
                resp = await http.put("/api/v1/bookie/gc", json={"is_in_force_gc": "true"})
                assert resp.status_code == 200, resp.text
                assert (await http.put("/api/v1/bookie/gc", content=b"[1")).status_code == 400
                with trio.fail_after(60):
                    while True:
                        (details,) = await _get_json(http, "/api/v1/bookie/gc_details")
                        if details["reclaimedSpaceViaDeletion"] > 0 and details["reclaimedSpaceViaCompaction"] > 0:
                            break
                        await trio.sleep(0.2)
                assert details["majorCompactionCounter"] >= 1
                assert {
                    "forceCompacting",
                    "majorCompacting",
                    "minorCompacting",
                    "lastMajorCompactionTime",
                    "lastMinorCompactionTime",
                    "minorCompactionCounter",
                } <= set(details)
                after = log_bytes(tmp_path)
                live_bytes = len(live) * ENTRIES * SIZE
                assert after < before
                assert after <= 1.1 * live_bytes + 2 * LOG_LIMIT, (before, after, live_bytes)

                explain = await _get_json(http, "/api/v1/bookie/gc/explain")
                assert explain["logs"], explain
                pinned = {pin["ledger_id"] for e in explain["logs"] for pin in e["ledgers"]}
                assert pinned and pinned <= set(live)
                belongs = {pin["belongs_to"] for e in explain["logs"] for pin in e["ledgers"]}
                assert any(b and "tenant/ns/persistent/t" in b for b in belongs), belongs
                metrics = (await http.get("/metrics")).text
                assert "bookie_RECLAIMED_DELETION_SPACE_BYTES_total" in metrics

            cli_result = await trio.to_thread.run_sync(
                lambda: CliRunner().invoke(cli, ["bookie", "gc-explain", "--http-url", bookie.http_url])
            )
            assert cli_result.exit_code == 0, cli_result.output
            assert "Entry logs" in cli_result.output

            await check_reads(bookie.port, live, deleted, ENTRIES, _body)
            await trio.to_thread.run_sync(bookie.stop)
            await trio.to_thread.run_sync(bookie.start)  # from disk: the compacted logs and the index
            await check_reads(bookie.port, live, deleted, ENTRIES, _body)
    finally:
        await trio.to_thread.run_sync(bookie.stop)
