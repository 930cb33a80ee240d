"""Per-ledger placement (``entryLogPerLedgerEnabled``) under GC: ledgers written interleaved,
half of them deleted, one forced GC run: the deleted ledgers' logs are removed whole (the current
ones rolled first, being dead) and compaction copies nothing, where interleaved placement has to
copy the live half out of every log."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bookie import DbLedgerStorage
from bookie.gc import GarbageCollector, GcConfig
from metadata import open_metadata_store

from .gc_helpers import BOOKIE, ROOT, check_entries, create_metadata, delete_metadata, du, write_interleaved

SIZE = 1000
ENTRIES = 40


@pytest.mark.parametrize("per_ledger", [True, False], ids=["per-ledger", "interleaved"])
async def test_deleted_ledgers_go_without_copying_when_placed_apart(tmp_path: Path, per_ledger: bool) -> None:
    ledgers = list(range(1, 9))
    dead, live = ledgers[::2], ledgers[1::2]
    async with open_metadata_store(f"memory://placement-{uuid.uuid4().hex}") as store:
        await create_metadata(store, ledgers)
        storage = await DbLedgerStorage.open(
            [tmp_path / "ledgers0"],
            log_size_limit=64 * 1024,
            index_path=tmp_path / "index.sqlite",
            flush_interval_ms=0,
            entry_log_per_ledger=per_ledger,
        )
        await write_interleaved(storage, ledgers, ENTRIES, SIZE)
        before = du(tmp_path)
        await delete_metadata(store, dead)
        gc = GarbageCollector(
            storage,
            GcConfig(compaction_free_space_reserve_bytes=0, compaction_rate_by_entries=10**9),
            store=store,
            metadata_root=ROOT,
            bookie_id=BOOKIE,
        )
        explained = (await gc.explain()).to_json()
        assert explained["placement"] == ("per-ledger" if per_ledger else "interleaved")
        if per_ledger:  # every log (current ones included) holds one ledger
            assert all(len(log["ledgers"]) + log["other_ledgers"] <= 1 for log in explained["logs"])
        result = await gc.run_once(force=True)
        assert result.result == "ok", result.errors
        assert storage.ledgers() == live
        copied = gc.metrics.compaction_written_bytes._value.get()
        if per_ledger:
            assert copied == 0  # every log held one ledger: dead ones were deleted whole
            assert result.reclaimed_compaction == 0 and result.deleted_logs > 0
        else:
            assert copied > 0  # the live half had to be copied out of the mixed logs
        assert du(tmp_path) < 0.65 * before
        await check_entries(storage, live, ENTRIES, SIZE)
        await storage.aclose()
