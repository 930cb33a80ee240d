"""Issue 19's scenario in a real ``magnetar bookie`` process on ZooKeeper, with the default
``logSizeLimit`` (1 GiB, so the current entry log never rolls by size): ledgers written over the
bookie protocol, most of them deleted, one forced ``PUT /api/v1/bookie/gc`` -> at least 60% of the
deleted bytes have left the disk; the live ledgers read back, also after a restart; and a bookie
SIGKILLed right after GC rolled its current log loses no acknowledged entry."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from bookie.gc._compaction import KILL_AT_GC_ENV
from metadata import open_metadata_store
from protocols.bookkeeper import ledger_path
from tests.support.bookie_server import check_reads, entry, write_entries
from tests.support.bookies import RealBookie

from .gc_helpers import RECORD_PREFIX, log_bytes, metadata_for

BOOKIE_ID = "gc-early-roll-bookie"
ENTRIES = 20
SIZE = 4000
LEDGERS = list(range(1, 17))
DELETED = LEDGERS[:12]  # 75% of the current log dies
LIVE = LEDGERS[12:]

pytestmark = pytest.mark.slow


def _bookie(base: Path, metadata_url: str, flush_interval_ms: int, *more: str) -> RealBookie:
    """Default logSizeLimit, GC only when forced (its timer is 10 min away)."""
    sets = [
        "gcWaitTime=600000",
        f"flushInterval={flush_interval_ms}",
        "compaction_free_space_reserve_bytes=0",
        "compactionRateByEntries=1000000",
        *more,
    ]
    return RealBookie(
        base, metadata_url, [a for s in sets for a in ("--set", s)], bookie_id=BOOKIE_ID, http=True, log_level="INFO"
    )


def _body(lid: int, eid: int) -> bytes:
    return entry(lid, eid, bytes([lid]) * SIZE)


def _record_bytes(ledgers: list[int]) -> int:
    return sum(len(_body(lid, eid)) + RECORD_PREFIX for lid in ledgers for eid in range(ENTRIES))


async def _register(zk_url: str) -> None:
    async with open_metadata_store(zk_url) as store:
        for lid in LEDGERS:
            await store.create(ledger_path("", lid), metadata_for([BOOKIE_ID]).encode(), make_parents=True)


async def _delete(zk_url: str) -> None:
    async with open_metadata_store(zk_url) as store:
        for lid in DELETED:
            await store.delete(ledger_path("", lid))


async def _force_gc_and_wait(http: httpx.AsyncClient) -> dict:  # type: ignore[type-arg]
    resp = await http.put("/api/v1/bookie/gc", json={"is_in_force_gc": True, "is_force_major_gc": True})
    assert resp.status_code == 200, resp.text
    with trio.fail_after(60):
        while (await http.get("/api/v1/bookie/gc")).json()["is_in_force_gc"] == "true":
            await trio.sleep(0.1)
    (details,) = (await http.get("/api/v1/bookie/gc_details")).json()
    return details  # type: ignore[no-any-return]


async def test_one_forced_gc_gives_most_deleted_bytes_back(tmp_path: Path, zk_url: str) -> None:
    bookie = _bookie(tmp_path, zk_url, flush_interval_ms=200)
    await _register(zk_url)
    await trio.to_thread.run_sync(bookie.start)
    try:
        await write_entries(bookie.port, LEDGERS, ENTRIES, _body)
        with trio.fail_after(30):  # the periodic checkpoint moves the entries into the current log
            while log_bytes(tmp_path) < _record_bytes(LEDGERS):
                await trio.sleep(0.1)
        before = log_bytes(tmp_path)
        await _delete(zk_url)
        async with httpx.AsyncClient(base_url=bookie.http_url, timeout=30) as http:
            details = await _force_gc_and_wait(http)
            assert details["lastResult"] == "ok", details
            freed = before - log_bytes(tmp_path)
            assert freed >= 0.6 * _record_bytes(DELETED), (before, freed, _record_bytes(DELETED))
            explain = (await http.get("/api/v1/bookie/gc/explain")).json()
            assert all(e["reason"] in ("still_being_written", "usage_above_threshold") for e in explain["logs"])
            metrics = (await http.get("/metrics")).text
            assert 'bookie_gc_entry_log_early_rolls_total{why="dead"} 1.0' in metrics
        await check_reads(bookie.port, LIVE, DELETED, ENTRIES, _body)
        await trio.to_thread.run_sync(bookie.stop)
        await trio.to_thread.run_sync(bookie.start)
        await check_reads(bookie.port, LIVE, DELETED, ENTRIES, _body)
    finally:
        await trio.to_thread.run_sync(bookie.stop)


async def test_sigkill_right_after_the_early_roll_loses_nothing(tmp_path: Path, zk_url: str) -> None:
    # no periodic flush and a 1 MiB write cache: the entries reach the current log as the cache
    # fills, and the last ones are only in the journal and the cache when GC starts, so the forced
    # run's checkpoint, the roll and the crash all happen with acknowledged entries at stake
    bookie = _bookie(tmp_path, zk_url, 600_000, "write_cache_max_mb=1")
    await _register(zk_url)
    await trio.to_thread.run_sync(lambda: bookie.start(env={KILL_AT_GC_ENV: "after_roll"}))
    try:
        await write_entries(bookie.port, LEDGERS, ENTRIES, _body)
        await _delete(zk_url)
        async with httpx.AsyncClient(base_url=bookie.http_url, timeout=30) as http:
            resp = await http.put("/api/v1/bookie/gc", json={"is_in_force_gc": True})
            assert resp.status_code == 200, resp.text
        rc = await trio.to_thread.run_sync(bookie.wait_exit, 60)
        assert rc == -9, rc  # killed at the hook, right after the roll
        await trio.to_thread.run_sync(bookie.start)
        await check_reads(bookie.port, LIVE, DELETED, ENTRIES, _body)
        async with httpx.AsyncClient(base_url=bookie.http_url, timeout=30) as http:
            details = await _force_gc_and_wait(http)  # finishes the job the crash interrupted
            assert details["lastResult"] == "ok", details
        assert log_bytes(tmp_path) <= 2 * _record_bytes(LIVE) + 64 * 1024
        await check_reads(bookie.port, LIVE, DELETED, ENTRIES, _body)
        await trio.to_thread.run_sync(bookie.stop)
        await trio.to_thread.run_sync(bookie.start)
        await check_reads(bookie.port, LIVE, DELETED, ENTRIES, _body)
    finally:
        await trio.to_thread.run_sync(bookie.stop)
