"""GC end to end over a real DbLedgerStorage and a memory:// metadata store: deleted ledgers'
space comes back, live entries survive, listing failures delete nothing."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import trio

from bookie.gc import CompactionKind, GarbageCollector, GcConfig
from bookie.metrics import GC_RESULTS
from metadata import open_metadata_store
from protocols.bookkeeper import ledger_path

from .gc_helpers import (
    BOOKIE,
    ROOT,
    FlakyStore,
    check_entries,
    create_metadata,
    delete_metadata,
    du,
    live_bytes,
    open_storage,
    write_interleaved,
)

LIMIT = 32 * 1024
SIZE = 500
_names = itertools.count()


def _store_url() -> str:
    return f"memory://gc-test-{next(_names)}"


def _gc(storage, store=None, **cfg) -> GarbageCollector:  # type: ignore[no-untyped-def]
    cfg.setdefault("compaction_free_space_reserve_bytes", 0)
    cfg.setdefault("compaction_rate_by_entries", 10**9)
    return GarbageCollector(storage, GcConfig(**cfg), store=store, metadata_root=ROOT, bookie_id=BOOKIE)


async def test_deleted_ledgers_space_comes_back(tmp_path: Path) -> None:
    phase_a = list(range(1, 11))  # alone in their logs: those logs die whole
    phase_b = list(range(100, 120))  # interleaved: half of them deleted -> logs ~50% used
    dead_b = phase_b[::2]
    live_b = phase_b[1::2]
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=LIMIT)
        await create_metadata(store, phase_a + phase_b)
        await write_interleaved(storage, phase_a, 20, SIZE)
        await write_interleaved(storage, phase_b, 30, SIZE)
        logs_before = storage.entry_logger.list_logs()
        assert len(logs_before) > 10
        await delete_metadata(store, phase_a + dead_b)

        gc = _gc(storage, store)
        # a run that is not forced and not due deletes ledgers and dead logs but compacts nothing
        first = await gc.run_once()
        assert first.result == "ok", first.errors
        assert first.deleted_ledgers == len(phase_a) + len(dead_b)
        assert first.deleted_logs > 0 and first.reclaimed_deletion > 0
        assert first.compaction is None
        assert storage.ledgers() == live_b
        # the forced run compacts the mixed logs (major threshold 0.8, usage about 0.5)
        second = await gc.run_once(force=True)
        assert second.result == "ok", second.errors
        assert second.compaction is CompactionKind.MAJOR
        assert second.compacted_logs > 0 and second.reclaimed_compaction > 0
        status = gc.status()
        assert status.major_compaction_counter == 1
        assert status.reclaimed_deletion_bytes == first.reclaimed_deletion
        assert status.reclaimed_compaction_bytes == second.reclaimed_compaction

        await check_entries(storage, live_b, 30, SIZE)
        assert du(tmp_path) <= 1.10 * (live_bytes(live_b, 30, SIZE) + LIMIT)
        await storage.aclose()
        # from disk, without any cache
        storage = await open_storage(tmp_path, log_size_limit=LIMIT)
        await check_entries(storage, live_b, 30, SIZE)
        await storage.aclose()


async def test_minor_compaction_leaves_logs_above_its_threshold(tmp_path: Path) -> None:
    ledgers = list(range(1, 5))
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=LIMIT)
        await create_metadata(store, ledgers)
        await write_interleaved(storage, ledgers, 40, SIZE)
        await delete_metadata(store, [1, 2])  # usage about 0.5: above minor 0.2, below major 0.8
        gc = _gc(storage, store)
        before = set(storage.entry_logger.list_logs())
        res = await gc.run_once(force=True, allow_major=False, allow_minor=True)
        assert res.compaction is CompactionKind.MINOR and res.compacted_logs == 0
        assert set(storage.entry_logger.list_logs()) == before
        assert gc.status().minor_compaction_counter == 1
        await delete_metadata(store, [3])  # now about 0.25 ... still above 0.2 for most logs
        await gc.run_once(force=True, allow_major=False, allow_minor=True)
        await check_entries(storage, [4], 40, SIZE)
        await storage.aclose()


async def test_scheduled_compaction_runs_when_due(tmp_path: Path) -> None:
    now = [1_000_000.0]
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path, log_size_limit=LIMIT)
        await create_metadata(store, [1, 2])
        await write_interleaved(storage, [1, 2], 40, SIZE)
        await delete_metadata(store, [1])
        gc = GarbageCollector(
            storage,
            GcConfig(compaction_free_space_reserve_bytes=0, compaction_rate_by_entries=10**9),
            store=store,
            metadata_root=ROOT,
            clock=lambda: now[0],
        )
        assert (await gc.run_once()).compaction is None
        now[0] += 3600 * 1000  # the minor interval passed; usage ~0.5 is above minor 0.2
        res = await gc.run_once()
        assert res.compaction is CompactionKind.MINOR and res.compacted_logs == 0
        now[0] += 86400 * 1000
        res = await gc.run_once()
        assert res.compaction is CompactionKind.MAJOR and res.compacted_logs > 0
        assert gc.status().last_major_compaction_time == int(now[0])
        assert gc.status().last_minor_compaction_time == int(now[0])
        await check_entries(storage, [2], 40, SIZE)
        await storage.aclose()


async def test_listing_failure_deletes_nothing(tmp_path: Path) -> None:
    ledgers = list(range(1, 9))
    async with open_metadata_store(_store_url()) as inner:
        storage = await open_storage(tmp_path, log_size_limit=LIMIT)
        await create_metadata(inner, ledgers)
        await write_interleaved(storage, ledgers, 10, SIZE)
        await delete_metadata(inner, ledgers[:4])
        store = FlakyStore(inner)
        gc = _gc(storage, store)  # type: ignore[arg-type]
        for fail_after in range(3):  # fail at every depth of the walk (3 levels: short hierarchical ids)
            store.children_calls = 0
            store.fail_children_after = fail_after
            res = await gc.run_once()
            assert res.result == "partial" and res.deleted_ledgers == 0, res
            assert storage.ledgers() == ledgers
        assert gc.metrics.errors.labels("ledgers")._value.get() >= 3
        store.fail_children_after = None
        res = await gc.run_once()
        assert res.deleted_ledgers == 4 and storage.ledgers() == ledgers[4:]
        await storage.aclose()


async def test_missing_ledgers_root_deletes_nothing(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path)
        await write_interleaved(storage, [1, 2], 3, SIZE)
        gc = _gc(storage, store)  # no metadata at all: a wrong root must not wipe the bookie
        res = await gc.run_once()
        assert res.result == "partial" and res.deleted_ledgers == 0
        assert storage.ledgers() == [1, 2]
        await storage.aclose()


async def test_absence_is_checked_again_before_deleting(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as inner:
        storage = await open_storage(tmp_path)
        await create_metadata(inner, [1, 2])
        await write_interleaved(storage, [1, 2], 3, SIZE)
        store = FlakyStore(inner)
        store.hide = {ledger_path(ROOT, 2)}  # the listing misses ledger 2, but it exists
        gc = _gc(storage, store)  # type: ignore[arg-type]
        res = await gc.run_once()
        assert res.deleted_ledgers == 0 and storage.ledgers() == [1, 2]
        await storage.aclose()


async def test_ledgers_not_in_any_ensemble(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as store:
        storage = await open_storage(tmp_path)
        await create_metadata(store, [1], ensemble=("other-1:3181", "other-2:3181"))  # closed, not us
        await create_metadata(store, [2], ensemble=("other-1:3181",), closed=False)  # open: kept
        await create_metadata(store, [3], ensemble=(BOOKIE, "other-1:3181"))  # ours
        await write_interleaved(storage, [1, 2, 3], 3, SIZE)
        kept = _gc(storage, store)
        assert (await kept.run_once()).deleted_ledgers == 0  # the switch is off by default
        gc = _gc(storage, store, delete_overreplicated_ledgers=True)
        res = await gc.run_once()
        assert res.deleted_ledgers == 1 and storage.ledgers() == [2, 3]
        assert gc.metrics.deleted_ledgers.labels("not_in_ensemble")._value.get() == 1
        await storage.aclose()


async def test_gc_without_store_reclaims_locally_deleted_ledgers(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_size_limit=LIMIT)
    await write_interleaved(storage, [1], 80, SIZE)  # at least one log of ledger 1 alone
    await write_interleaved(storage, [2], 5, SIZE)
    await storage.delete_ledger(1)
    gc = GarbageCollector(storage, GcConfig())
    res = await gc.run_once()
    assert res.deleted_logs > 0 and res.deleted_ledgers == 0
    await check_entries(storage, [2], 5, SIZE)
    await storage.aclose()


async def test_loop_runs_on_trigger_and_survives_errors(tmp_path: Path) -> None:
    async with open_metadata_store(_store_url()) as inner:
        storage = await open_storage(tmp_path, log_size_limit=LIMIT)
        await create_metadata(inner, [1, 2])
        await write_interleaved(storage, [1, 2], 30, SIZE)
        store = FlakyStore(inner)
        store.fail_children_after = 0
        gc = _gc(storage, store, gc_wait_time_ms=3_600_000)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)
            gc.trigger()
            while gc.status().last_run_time is None:
                await trio.sleep(0.01)
            assert gc.status().last_result == "partial"
            store.fail_children_after = None
            await delete_metadata(inner, [1])
            gc.trigger()

            def finished_runs() -> float:
                return sum(gc.metrics.runs.labels(r)._value.get() for r in GC_RESULTS)

            # a run counts its compaction before it ends: wait for the run itself to finish
            with trio.fail_after(30):
                while finished_runs() < 2:
                    await trio.sleep(0.01)
            assert gc.status().major_compaction_counter == 2
            assert gc.status().last_result == "ok"
            nursery.cancel_scope.cancel()
        assert storage.ledgers() == [2]
        await check_entries(storage, [2], 30, SIZE)
        await storage.aclose()


@pytest.mark.parametrize("dirs", [2])
async def test_several_ledger_directories(tmp_path: Path, dirs: int) -> None:
    storage = await open_storage(tmp_path, log_size_limit=LIMIT, dirs=dirs)
    ledgers = list(range(1, 9))
    await write_interleaved(storage, ledgers, 20, SIZE)
    dead, live = [1, 2, 5, 6], [3, 4, 7, 8]  # half of each directory's ledgers (ledger % 2)
    for lid in dead:
        await storage.delete_ledger(lid)
    gc = GarbageCollector(storage, GcConfig(compaction_free_space_reserve_bytes=0, compaction_rate_by_entries=10**9))
    res = await gc.run_once(force=True)
    assert res.compacted_logs > 0
    await check_entries(storage, live, 20, SIZE)
    assert du(tmp_path) <= 1.10 * (live_bytes(live, 20, SIZE) + dirs * LIMIT)
    await storage.aclose()
