"""GC rolls the current entry log early (issue 19, item 1): deleted data in the log still being
written leaves the disk within one forced GC run instead of after ``logSizeLimit`` more bytes;
a timer run rolls only for the compaction it does (or a wholly dead log), an old log is rolled by
age, explain says which current log will be rolled and which log was, and the switches turn it off.
Real storage and a memory metadata store; the real-process scenario is in
``test_bookie_gc_early_roll_process``."""

from __future__ import annotations

import itertools
from pathlib import Path

from bookie.gc import GarbageCollector, GcConfig
from bookie.gc._explain import Reason
from metadata import open_metadata_store

from .gc_helpers import (
    ROOT,
    check_entries,
    create_metadata,
    delete_metadata,
    du,
    live_bytes,
    open_storage,
    payload,
    write_interleaved,
)

_names = itertools.count()
BIG = 1 << 30  # logSizeLimit's default: the current log never rolls by size in these tests
SIZE = 1000
ENTRIES = 20
LEDGERS = list(range(1, 9))


def _store_url() -> str:
    return f"memory://gc-early-roll-{next(_names)}"


def _gc(storage, store, **kw: object) -> GarbageCollector:  # type: ignore[no-untyped-def]
    values: dict = dict(compaction_free_space_reserve_bytes=0, compaction_rate_by_entries=10**9)
    values.update(kw)
    return GarbageCollector(storage, GcConfig(**values), store=store, metadata_root=ROOT)


async def test_forced_gc_rolls_a_mostly_dead_current_log_and_gives_the_space_back(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=BIG)
        await create_metadata(store, LEDGERS)
        await write_interleaved(storage, LEDGERS, ENTRIES, SIZE)
        assert len(storage.entry_logger.list_logs()) == 1  # all in the current log
        dead, live = LEDGERS[:6], LEDGERS[6:]
        await delete_metadata(store, dead)
        gc = _gc(storage, store)
        doc = await gc.explain()
        (cur,) = doc.logs
        assert cur.reason is Reason.STILL_BEING_WRITTEN  # GC has not deleted the ledgers yet
        before = du(tmp_path)
        res = await gc.run_once(force=True)
        assert res.result == "ok", res.errors
        assert res.deleted_ledgers == 6 and res.rolled_logs == 1 and res.compacted_logs == 1
        freed = before - du(tmp_path)
        assert freed >= 0.6 * live_bytes(dead, ENTRIES, SIZE), (before, freed)
        await check_entries(storage, live, ENTRIES, SIZE)
        assert gc.metrics.early_rolls.labels("dead")._value.get() == 1
        assert storage.statistics().entry_logs.early_rolls == 1
        await storage.aclose()
        storage = await open_storage(tmp_path, log_size_limit=BIG)  # from disk: rolled map + index
        await check_entries(storage, live, ENTRIES, SIZE)
        await storage.aclose()


async def test_forced_gc_flushes_the_write_cache_before_deciding(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=BIG)
        await create_metadata(store, LEDGERS)
        await write_interleaved(storage, LEDGERS, ENTRIES, SIZE)
        for lid in LEDGERS:  # more entries, still in the write cache only
            await storage.add_entry(lid, ENTRIES, payload(lid, ENTRIES, SIZE))
        assert storage.statistics().write_cache.count == len(LEDGERS)
        await delete_metadata(store, LEDGERS[:6])
        gc = _gc(storage, store)
        res = await gc.run_once(force=True)
        assert res.rolled_logs == 1 and res.compacted_logs == 1
        assert storage.statistics().write_cache.count == 0
        await check_entries(storage, LEDGERS[6:], ENTRIES + 1, SIZE)
        await storage.aclose()


async def test_timer_run_rolls_only_for_its_compaction_or_a_wholly_dead_log(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=BIG)
        await create_metadata(store, LEDGERS)
        await write_interleaved(storage, LEDGERS, ENTRIES, SIZE)
        await delete_metadata(store, LEDGERS[:4])
        gc = _gc(storage, store)
        res = await gc.run_once()  # no compaction due: a half-live log stays current
        assert res.deleted_ledgers == 4 and res.compaction is None and res.rolled_logs == 0
        doc = await gc.explain()
        (cur,) = doc.logs
        assert cur.reason is Reason.ROLLS_AT_NEXT_GC, cur
        assert "major" in cur.detail and cur.next_attempt_ms == gc.schedule().next_major_ms
        res = await gc.run_once(force=True, allow_major=False)  # minor: usage 0.5 is above 0.2
        assert res.rolled_logs == 0
        await delete_metadata(store, LEDGERS[4:])
        res = await gc.run_once()  # nothing live: rolled and deleted whole, nothing copied
        assert res.rolled_logs == 1 and res.deleted_logs == 1 and res.compaction is None
        assert storage.entry_logger.list_logs() == []
        assert du(tmp_path) < 1024
        await storage.aclose()


async def test_an_old_current_log_is_rolled_by_age_and_explained(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=BIG)
        now = [0.0]
        storage.entry_logger._clock = lambda: now[0]  # the logger dates its current logs by this
        await create_metadata(store, LEDGERS)
        await write_interleaved(storage, LEDGERS, ENTRIES, SIZE)
        gc = _gc(storage, store, gc_roll_current_log_after_s=600)
        assert (await gc.run_once()).rolled_logs == 0
        (cur,) = (await gc.explain()).logs
        assert cur.reason is Reason.STILL_BEING_WRITTEN
        now[0] = 601.0
        (cur,) = (await gc.explain()).logs
        assert cur.reason is Reason.ROLLS_AT_NEXT_GC and "gc_roll_current_log_after_s" in cur.detail
        res = await gc.run_once()
        assert res.rolled_logs == 1 and res.deleted_logs == 0 and res.compacted_logs == 0
        (rolled,) = (await gc.explain()).logs
        assert rolled.log_id == cur.log_id and rolled.reason is Reason.USAGE_ABOVE_THRESHOLD
        assert rolled.rolled_for_gc is not None and "open for 601 s" in rolled.rolled_for_gc
        assert rolled.detail.startswith("rolled early for GC")
        assert (await gc.explain()).to_json()["logs"][0]["rolled_for_gc"] == rolled.rolled_for_gc
        assert gc.metrics.early_rolls.labels("age")._value.get() == 1
        await check_entries(storage, LEDGERS, ENTRIES, SIZE)
        await storage.aclose()


async def test_why_a_log_was_rolled_early_survives_a_restart_and_goes_with_the_log(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=BIG)
        now = [0.0]
        storage.entry_logger._clock = lambda: now[0]
        await create_metadata(store, LEDGERS)
        await write_interleaved(storage, LEDGERS, ENTRIES, SIZE)
        gc = _gc(storage, store, gc_roll_current_log_after_s=600)
        now[0] = 601.0
        assert (await gc.run_once()).rolled_logs == 1
        (before,) = (await gc.explain()).logs
        assert before.rolled_for_gc is not None
        await storage.aclose()

        storage = await open_storage(tmp_path, log_size_limit=BIG)  # a new process: nothing in memory
        gc = _gc(storage, store, gc_roll_current_log_after_s=600)
        (after,) = (await gc.explain()).logs
        assert after.log_id == before.log_id and after.rolled_for_gc == before.rolled_for_gc
        assert after.detail.startswith("rolled early for GC")

        await delete_metadata(store, LEDGERS)
        res = await gc.run_once(force=True)
        assert res.deleted_logs == 1
        assert storage.index.rolled_logs() == {}  # the record went with the log
        await storage.aclose()


async def test_early_rolls_can_be_turned_off(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=BIG)
        await create_metadata(store, LEDGERS)
        await write_interleaved(storage, LEDGERS, ENTRIES, SIZE)
        await delete_metadata(store, LEDGERS)
        gc = _gc(storage, store, gc_roll_dead_current_log=False, gc_roll_current_log_after_s=0)
        res = await gc.run_once(force=True)
        assert res.deleted_ledgers == len(LEDGERS) and res.rolled_logs == 0 and res.deleted_logs == 0
        (cur,) = (await gc.explain()).logs
        assert cur.reason is Reason.STILL_BEING_WRITTEN  # BookKeeper's behaviour
        await storage.aclose()
