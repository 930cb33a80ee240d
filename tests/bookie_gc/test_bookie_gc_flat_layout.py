"""GC over the flat ledger layout (``ledgerManagerFactoryClass = flat``): ledgers whose flat
metadata node is gone are deleted, the others kept, over-replication checks read the flat nodes;
and a bookie configured with the other layout than the cluster's LAYOUT node refuses to start
(its GC would see no ledger at all and delete every local one)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bookie import BookieConfig
from bookie.gc import GarbageCollector, GcConfig
from bookie.server import check_ledger_layout
from magnetar.common.config import ConfigError
from metadata import open_metadata_store
from protocols.bookkeeper import LedgerLayout, encode_layout, ledger_path

from .gc_helpers import BOOKIE, ROOT, check_entries, metadata_for, open_storage, write_interleaved

SIZE = 300


async def test_gc_deletes_ledgers_whose_flat_node_is_gone(tmp_path: Path) -> None:
    ledgers = list(range(1, 13))
    dead = ledgers[::3]
    elsewhere = [2]  # closed, and its metadata no longer lists this bookie
    async with open_metadata_store(f"memory://gc-flat-{uuid.uuid4().hex}") as store:
        for lid in ledgers:
            ensemble = ["other:3181"] if lid in elsewhere else [BOOKIE]
            await store.create(
                ledger_path(ROOT, lid, LedgerLayout.FLAT), metadata_for(ensemble).encode(), make_parents=True
            )
        storage = await open_storage(tmp_path)
        await write_interleaved(storage, ledgers, 6, SIZE)
        for lid in dead:
            await store.delete(ledger_path(ROOT, lid, LedgerLayout.FLAT))
        cfg = GcConfig(
            ledger_manager_factory_class="flat",
            delete_overreplicated_ledgers=True,
            gc_overreplicated_ledger_wait_time_ms=0,
            compaction_free_space_reserve_bytes=0,
        )
        gc = GarbageCollector(storage, cfg, store=store, metadata_root=ROOT, bookie_id=BOOKIE)
        result = await gc.run_once(force=True)
        assert result.result == "ok", result.errors
        live = [lid for lid in ledgers if lid not in dead and lid not in elsewhere]
        assert storage.ledgers() == live
        await check_entries(storage, live, 6, SIZE)
        await storage.aclose()


async def test_bookie_start_check_records_and_enforces_the_layout(tmp_path: Path) -> None:
    flat = BookieConfig(
        journal_dir=str(tmp_path / "j"),
        ledger_dirs=(str(tmp_path / "l"),),
        metadata_root=ROOT,
        ledger_manager_factory_class="flat",
    )
    hier = BookieConfig(
        journal_dir=str(tmp_path / "j"),
        ledger_dirs=(str(tmp_path / "l"),),
        metadata_root=ROOT,
        ledger_manager_factory_class="hierarchical",
    )
    unset = BookieConfig(journal_dir=str(tmp_path / "j"), ledger_dirs=(str(tmp_path / "l"),), metadata_root=ROOT)
    async with open_metadata_store(f"memory://gc-flat-{uuid.uuid4().hex}") as store:
        assert await check_ledger_layout(flat, store) is LedgerLayout.FLAT
        assert (await store.get(f"{ROOT}/ledgers/LAYOUT"))[0] == encode_layout(LedgerLayout.FLAT)
        assert await check_ledger_layout(flat, store) is LedgerLayout.FLAT
        with pytest.raises(ConfigError, match="ledger_manager_factory_class"):
            await check_ledger_layout(hier, store)
        assert await check_ledger_layout(unset, store) is LedgerLayout.FLAT  # nothing configured: the record
        await store.set(f"{ROOT}/ledgers/LAYOUT", b"2\norg.example.OtherFactory:1\n", version=0)
        with pytest.raises(ConfigError, match="does not implement"):
            await check_ledger_layout(flat, store)
    async with open_metadata_store(f"memory://gc-flat-{uuid.uuid4().hex}") as store:
        # a new cluster and nothing configured: BookKeeper's default, hierarchical, is recorded
        assert await check_ledger_layout(unset, store) is LedgerLayout.HIERARCHICAL
        assert (await store.get(f"{ROOT}/ledgers/LAYOUT"))[0] == encode_layout(LedgerLayout.HIERARCHICAL)


def test_bad_layout_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ledger_manager_factory_class"):
        GcConfig(ledger_manager_factory_class="nested").validate()
