"""Compaction beside foreground traffic: adds, checkpoints and reads go on while a throttled
compaction moves entries; every read succeeds and nothing is lost."""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.lowlevel

from bookie.gc import GarbageCollector, GcConfig

from .gc_helpers import check_entries, open_storage, payload, write_interleaved

LIMIT = 32 * 1024
SIZE = 500


async def test_reads_adds_and_flushes_during_compaction(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_size_limit=LIMIT, read_cache_bytes=8 * 1024)
    await write_interleaved(storage, list(range(1, 9)), 60, SIZE)
    for lid in (1, 3, 5, 7):
        await storage.delete_ledger(lid)
    gc = GarbageCollector(
        storage,
        GcConfig(compaction_free_space_reserve_bytes=0, throttle_by_bytes=True, compaction_rate_by_bytes=200_000),
    )
    rng = random.Random(7)
    reads = 0
    added: dict[int, int] = {2: 60, 4: 60, 100: 0}
    done = trio.Event()

    async def reader() -> None:
        nonlocal reads
        while not done.is_set():
            lid, eid = rng.choice((2, 4, 6, 8)), rng.randrange(60)
            assert await storage.get_entry(lid, eid) == payload(lid, eid, SIZE)
            reads += 1
            await trio.lowlevel.checkpoint()

    async def writer() -> None:
        n = 0
        while not done.is_set():
            lid = (2, 4, 100)[n % 3]
            await storage.add_entry(lid, added[lid], payload(lid, added[lid], SIZE))
            added[lid] += 1
            n += 1
            if n % 20 == 0:
                await storage.flush()
            await trio.sleep(0.001)
        await storage.flush()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)
        res = await gc.run_once(force=True)
        done.set()
    assert res.result == "ok" and res.compacted_logs > 0, res
    assert reads > 0 and added[100] > 0  # both really ran beside the compaction
    await check_entries(storage, [6, 8], 60, SIZE)
    for lid in (2, 4, 100):
        await check_entries(storage, [lid], added[lid], SIZE)
    await storage.aclose()
    storage = await open_storage(tmp_path, log_size_limit=LIMIT)
    await check_entries(storage, [6, 8], 60, SIZE)
    for lid in (2, 4, 100):
        await check_entries(storage, [lid], added[lid], SIZE)
    await storage.aclose()
