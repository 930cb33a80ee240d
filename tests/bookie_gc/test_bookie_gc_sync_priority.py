"""Compaction yields its syncs to the journal's (`bookie._io_priority.SyncPriority`): while a
journal sync is marked in flight, a compaction chunk waits before its fdatasync and before its
index commit (bounded, so it still finishes), and everything live reads back afterwards; a real
bookie's journal marks its syncs on the storage's gate."""

from __future__ import annotations

import math
from pathlib import Path

import trio

from bookie._io_priority import SyncPriority
from bookie.gc._compaction import RateLimiter, compact_log
from protocols.bookkeeper import encode_entry
from tests.support.bookie_server import KEY

from .gc_helpers import open_storage, payload, write_interleaved


async def test_gate_waits_for_the_foreground_and_is_bounded() -> None:
    gate = SyncPriority()
    await gate.background_turn()  # idle: returns at once
    assert gate.background_waits == 0
    order: list[str] = []

    async def background() -> None:
        await gate.background_turn(max_wait_s=math.inf)
        order.append("background")

    async with trio.open_nursery() as nursery:
        with gate.foreground():
            assert gate.foreground_busy
            nursery.start_soon(background)
            await trio.sleep(0.05)  # a bounded chance for the background to (wrongly) run first
            order.append("foreground done")
    assert order == ["foreground done", "background"] and not gate.foreground_busy
    with gate.foreground():  # a foreground that never ends does not starve the background
        await gate.background_turn(max_wait_s=0.01)
    assert gate.background_waits == 2


async def test_compaction_yields_to_journal_syncs_and_loses_nothing(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_size_limit=16 * 1024)
    try:
        await write_interleaved(storage, [1, 2], entries=40, size=500)
        await storage.delete_ledger(2)
        logger = storage.entry_logger
        rolled = sorted(set(logger.list_logs()) - logger.current_log_ids())
        assert rolled
        gate = storage.sync_priority
        with gate.foreground():  # a journal sync that stays in flight throughout
            res = await compact_log(storage, rolled[0], limiter=RateLimiter(math.inf), by_bytes=True, chunk_bytes=4096)
        assert res.removed and res.entries_copied > 0
        assert gate.background_waits >= 2  # at least the sync and the index commit of one chunk
        for eid in range(40):
            assert await storage.get_entry(1, eid) == payload(1, eid, 500)
    finally:
        await storage.aclose()


async def test_bookie_journal_marks_its_syncs_on_the_storage_gate(tmp_path: Path) -> None:
    from bookie import BookieConfig, open_bookie

    cfg = BookieConfig(journal_dir=str(tmp_path / "j"), ledger_dirs=(str(tmp_path / "l"),), port=0, http_port=0)
    async with open_bookie(cfg) as bookie:
        gate = bookie.storage.sync_priority
        seen: list[bool] = []
        original = gate.foreground

        def spy():  # type: ignore[no-untyped-def]
            seen.append(True)
            return original()

        gate.foreground = spy  # type: ignore[method-assign]
        bookie.storage.set_master_key(7, KEY)
        await bookie.add_entry(7, 0, KEY, encode_entry(7, 0, -1, 0, b"x"))
        assert seen and not gate.foreground_busy
