"""DbLedgerStorage: add/flush/reopen, entry -1, ledger state durability, failures, checkpoints."""

from __future__ import annotations

import errno
import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from bookie.storage import DbLedgerStorage, FlushReason, StorageIOError, WriteCacheFull
from protocols.bookkeeper import NoSuchEntry, NoSuchLedger
from tests.support.fake_files import BlockingFileOps, FailingFileOps, RecordingCheckpointSource


def _payload(lid: int, eid: int) -> bytes:
    return random.Random(lid * 1_000_003 + eid).randbytes(50 + (lid * 7919 + eid * 104729) % 2000)


def _open(tmp_path: Path, **kw: Any) -> DbLedgerStorage:
    kw.setdefault("log_size_limit", 256 * 1024)
    kw.setdefault("write_cache_max_bytes", 4 << 20)
    kw.setdefault("read_cache_max_bytes", 1 << 20)
    return DbLedgerStorage([tmp_path / "d0", tmp_path / "d1"], **kw)


async def test_add_flush_reopen_read_byte_for_byte(tmp_path: Path) -> None:
    st = _open(tmp_path, log_size_limit=32 * 1024)
    order = [(lid, eid) for lid in range(1, 6) for eid in range(60)]
    random.Random(1).shuffle(order)  # entry ids may arrive out of order
    for lid, eid in order:
        await st.add_entry(lid, eid, _payload(lid, eid))
    assert await st.get_entry(3, 10) == _payload(3, 10)  # from the write cache
    await st.flush()
    await st.aclose()
    st = _open(tmp_path, log_size_limit=32 * 1024)
    async with trio.open_nursery() as nursery:
        await nursery.start(st.run)
        for lid in range(1, 6):
            assert st.last_entry_id(lid) == 59
            for eid in range(60):
                assert await st.get_entry(lid, eid) == _payload(lid, eid)
        nursery.cancel_scope.cancel()
    stats = st.statistics()
    assert stats.read_cache.misses > 0 and stats.entry_logs.log_count > 2  # logs rolled at 32 KiB
    assert stats.read_ahead.entries_read > 0 and stats.read_cache.hits > 0  # in-order reads read ahead
    with pytest.raises(NoSuchEntry):
        await st.get_entry(1, 60)
    with pytest.raises(NoSuchLedger):
        await st.get_entry(99, 0)
    await st.aclose()


async def test_entry_minus_one_reads_last_entry(tmp_path: Path) -> None:
    st = _open(tmp_path)
    st.set_master_key(7, b"key")
    with pytest.raises(NoSuchEntry):
        await st.get_entry(7, -1)
    for eid in (0, 2, 1):
        await st.add_entry(7, eid, b"e%d" % eid)
    assert await st.get_entry(7, -1) == b"e2"
    await st.flush()
    await st.add_entry(7, 3, b"e3")
    assert await st.get_entry(7, -1) == b"e3"  # write cache beats the index
    await st.flush()
    await st.aclose()
    st = _open(tmp_path)
    assert st.last_entry_id(7) == 3
    assert await st.get_entry(7, -1) == b"e3"
    await st.aclose()


async def test_ledger_state_persists_across_reopen(tmp_path: Path) -> None:
    st = _open(tmp_path)
    st.set_master_key(1, b"secret")
    assert st.set_fenced(1) is False
    assert st.set_fenced(1) is True
    st.set_explicit_lac(1, b"\x00lac")
    st.set_master_key(2, b"other")
    with pytest.raises(NoSuchLedger):
        st.is_fenced(3)
    await st.flush()
    await st.aclose()
    st = _open(tmp_path)
    assert st.ledger_exists(1) and st.ledger_exists(2) and not st.ledger_exists(3)
    assert st.master_key(1) == b"secret"
    assert st.is_fenced(1) and not st.is_fenced(2)
    assert st.explicit_lac(1) == b"\x00lac" and st.explicit_lac(2) is None
    assert st.last_entry_id(1) == -1
    assert st.ledgers() == [1, 2]
    await st.aclose()


async def test_failed_flush_keeps_entries_readable_and_flushable_later(tmp_path: Path) -> None:
    ops = FailingFileOps()
    events: list[str] = []
    source = RecordingCheckpointSource(events)
    st = _open(tmp_path, file_ops=ops, checkpoint_source=source)
    for eid in range(20):
        await st.add_entry(1, eid, _payload(1, eid))
    st.set_fenced(1)
    ops.fail_writes = True
    with pytest.raises(StorageIOError) as info:
        await st.flush()
    assert info.value.errno == errno.ENOSPC
    assert source.completed == []  # LastLogMark must not advance
    for eid in range(20):
        assert await st.get_entry(1, eid) == _payload(1, eid)
    await st.add_entry(1, 20, _payload(1, 20))  # new adds still accepted meanwhile
    ops.fail_writes = False
    ops.fail_syncs = True
    with pytest.raises(StorageIOError):
        await st.flush()
    ops.fail_syncs = False
    await st.flush()  # writes the failed half first, then captures a mark and flushes the rest
    assert source.completed == [2]
    assert events == ["mark1", "mark2", "complete2"]
    assert st.statistics().flush_failures == 2
    await st.aclose()
    st = _open(tmp_path)
    for eid in range(21):
        assert await st.get_entry(1, eid) == _payload(1, eid)
    assert st.is_fenced(1)
    await st.aclose()


async def test_checkpoint_mark_before_swap_and_complete_after_index(tmp_path: Path) -> None:
    events: list[str] = []

    class Source(RecordingCheckpointSource):
        def new_checkpoint(self) -> int:
            # at capture time the entry added before is still in the active half (not yet swapped)
            assert st.statistics().write_cache.active_bytes == 3
            return super().new_checkpoint()

        async def checkpoint_complete(self, checkpoint: int) -> None:
            # by now the entry is indexed: the write cache is empty and the index has it
            assert st.statistics().write_cache.count == 0
            assert st.index.get_location(5, 0) is not None
            await super().checkpoint_complete(checkpoint)

    st = _open(tmp_path, checkpoint_source=Source(events))
    await st.add_entry(5, 0, b"abc")
    await st.flush()
    assert events == ["mark1", "complete1"]
    await st.aclose()


def _reason(st: DbLedgerStorage, reason: FlushReason) -> float:
    return st.metrics.registry.get_sample_value("bookie_flush_reason_total", {"reason": reason.value}) or 0


async def test_flush_loop_runs_on_full_cache_and_periodically(tmp_path: Path) -> None:
    events: list[str] = []
    st = _open(
        tmp_path,
        write_cache_max_bytes=20_000,
        flush_interval_ms=50,
        checkpoint_source=RecordingCheckpointSource(events),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(st.run)
        for eid in range(100):  # 100 KB through a 20 KB cache: needs flushes when halves fill
            await st.add_entry(1, eid, b"x" * 1000)
        with trio.fail_after(5):
            while st.statistics().write_cache.count or _reason(st, FlushReason.PERIODIC) < 1:
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    assert _reason(st, FlushReason.CACHE_FULL) >= 1
    for eid in range(100):
        assert await st.get_entry(1, eid) == b"x" * 1000
    await st.aclose()


async def test_blocked_flush_gives_write_cache_full_then_recovers(tmp_path: Path) -> None:
    ops = BlockingFileOps()
    errors: list[StorageIOError] = []
    st = _open(
        tmp_path, file_ops=ops, write_cache_max_bytes=20_000, max_throttle_time_ms=100, on_flush_error=errors.append
    )
    await st.add_entry(1, 0, b"warm")  # create the log before blocking writes
    await st.flush()
    ops.gate.clear()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(st.run)
            with trio.fail_after(10):
                with pytest.raises(WriteCacheFull):
                    for eid in range(1, 1000):
                        await st.add_entry(1, eid, b"y" * 1000)
            assert st.statistics().write_cache.size_bytes <= 20_000
            assert ops.entered.is_set()
            ops.gate.set()
            with trio.fail_after(10):
                while st.statistics().write_cache.count:
                    await trio.sleep(0.02)
            await st.add_entry(1, 5000, b"after")
            nursery.cancel_scope.cancel()
    finally:
        ops.gate.set()
    assert errors == []
    assert await st.get_entry(1, 5000) == b"after"
    assert await st.get_entry(1, 1) == b"y" * 1000
    await st.aclose()


async def test_flush_loop_reports_errors_and_retries(tmp_path: Path) -> None:
    ops = FailingFileOps()
    errors: list[StorageIOError] = []
    st = _open(tmp_path, file_ops=ops, flush_interval_ms=20, on_flush_error=errors.append)
    await st.add_entry(1, 0, b"data")
    ops.fail_writes = True
    async with trio.open_nursery() as nursery:
        await nursery.start(st.run)
        with trio.fail_after(5):
            while not errors:
                await trio.sleep(0.01)
        ops.fail_writes = False
        with trio.fail_after(5):
            while st.statistics().write_cache.count:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert await st.get_entry(1, 0) == b"data"
    await st.aclose()


async def test_delete_ledger_removes_it_everywhere(tmp_path: Path) -> None:
    st = _open(tmp_path)
    for lid in (1, 2):
        for eid in range(5):
            await st.add_entry(lid, eid, b"v")
    await st.flush()
    assert await st.get_entry(1, 0) == b"v"  # now in the read cache too
    await st.add_entry(1, 5, b"w")  # and one in the write cache
    await st.delete_ledger(1)
    assert not st.ledger_exists(1)
    with pytest.raises(NoSuchLedger):
        await st.get_entry(1, 0)
    await st.flush()
    await st.aclose()
    st = _open(tmp_path)
    assert st.ledgers() == [2]
    assert st.index.get_location(1, 0) is None
    await st.aclose()


async def test_gc_view_of_entry_logs(tmp_path: Path) -> None:
    st = _open(tmp_path)
    for lid in range(4):
        for eid in range(10):
            await st.add_entry(lid, eid, b"p" * 100)
    await st.flush()
    el = st.entry_logger
    usage: dict[int, int] = {}
    for log_id in el.list_logs():
        for lid, size in el.usage(log_id).ledgers.items():
            usage[lid] = usage.get(lid, 0) + size
    assert usage == {lid: 10 * 120 for lid in range(4)}
    await st.aclose()


async def test_two_storages_have_separate_metrics(tmp_path: Path) -> None:
    a = DbLedgerStorage([tmp_path / "a"])
    b = DbLedgerStorage([tmp_path / "b"])
    await a.add_entry(1, 0, b"xyz")
    assert a.metrics.registry.get_sample_value("bookie_write_cache_size") == 3
    assert b.metrics.registry.get_sample_value("bookie_write_cache_size") == 0
    await a.aclose()
    await b.aclose()


async def test_open_in_thread(tmp_path: Path) -> None:
    st = await DbLedgerStorage.open([tmp_path], write_cache_max_bytes=1 << 20)
    await st.add_entry(1, 0, bytearray(b"ba"))  # non-bytes payloads are copied
    assert await st.get_entry(1, 0) == b"ba"
    await st.aclose()


# ------------------------------------------------------------------ paced checkpoints


def _big(lid: int, eid: int) -> bytes:
    return (_payload(lid, eid)[:50] * 2700)[: 128 * 1024]


async def _fill(st: DbLedgerStorage, mib: int) -> list[tuple[int, int, bytes]]:
    """Add ``mib`` MiB to each of ledgers 1 and 2, in 128 KiB entries."""
    added = [(lid, eid, _big(lid, eid)) for lid in (1, 2) for eid in range(mib * 8)]
    for lid, eid, data in added:
        await st.add_entry(lid, eid, data)
    return added


async def test_a_periodic_checkpoint_is_spread_over_its_share_of_the_interval(tmp_path: Path) -> None:
    st = _open(tmp_path, write_cache_max_bytes=64 << 20, flush_interval_ms=1000, flush_pace_fraction=0.5)
    added = await _fill(st, 3)  # 6 MiB: 6 pieces over 0.5 s
    syncs = st.statistics().entry_logs.syncs
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(st.flush, FlushReason.PERIODIC)
        await trio.sleep(0.15)  # a paced checkpoint is time-based: 0.15 s of its 0.5 s is under way
        # mid-checkpoint: part of the half is in the logs, all of it still readable
        assert st.statistics().entry_logs.syncs > syncs
        for lid, eid, data in added[::50]:
            assert await st.get_entry(lid, eid) == data
    took = trio.current_time() - t0
    assert took >= 0.5 * 5 / 6 - 0.02, took  # the last piece starts 5/6 of the way through
    assert st.statistics().entry_logs.syncs - syncs >= 6  # one sync per piece
    await st.aclose()
    st = _open(tmp_path)
    for lid, eid, data in added:
        assert await st.get_entry(lid, eid) == data
    await st.aclose()


async def test_a_cache_full_checkpoint_is_spread_over_the_time_its_half_took_to_fill(tmp_path: Path) -> None:
    st = _open(tmp_path, write_cache_max_bytes=64 << 20, flush_interval_ms=60_000, flush_pace_fraction=0.5)
    await st.flush()  # the previous swap
    await trio.sleep(0.6)  # pacing follows how long the half took to fill: make it about 0.6 s
    added = await _fill(st, 3)  # filled in about 0.6 s: 6 pieces over about 0.3 s, not 30 s
    t0 = trio.current_time()
    with trio.fail_after(20):
        await st.flush(FlushReason.CACHE_FULL)
    took = trio.current_time() - t0
    assert took >= 0.3 * 5 / 6 - 0.02, took
    for lid, eid, data in added[::5]:
        assert await st.get_entry(lid, eid) == data
    await st.aclose()


@pytest.mark.parametrize("sooner", ["explicit flush", "ledger deletion", "write lock", "cache full"])
async def test_a_paced_checkpoint_wanted_sooner_goes_at_full_speed(tmp_path: Path, sooner: str) -> None:
    # paced over 60 s: only being wanted sooner lets it finish within the test
    st = _open(
        tmp_path,
        write_cache_max_bytes=16 << 20,
        flush_interval_ms=60_000,
        flush_pace_fraction=1.0,
        max_throttle_time_ms=30_000,
        log_size_limit=64 << 20,
    )
    added = await _fill(st, 3)
    syncs = st.statistics().entry_logs.syncs
    with trio.fail_after(20):
        async with trio.open_nursery() as outer:
            await outer.start(st.run)  # the flush loop: a full active half gets its flush
            async with trio.open_nursery() as nursery:
                nursery.start_soon(st.flush, FlushReason.PERIODIC)
                await trio.sleep(0.2)  # paced: within 0.2 s only the first piece is written
                assert st.statistics().entry_logs.syncs == syncs + 1  # the first of 6 pieces
                if sooner == "explicit flush":
                    await st.flush()
                elif sooner == "ledger deletion":
                    await st.delete_ledger(99)
                elif sooner == "write lock":
                    async with st.write_lock:
                        pass
                else:  # adds fill the active half (8 MiB): they wait for the checkpoint, which hurries
                    for eid in range(8 * 8 + 8):
                        await st.add_entry(3, eid, _big(3, eid))
                if sooner == "write lock":
                    # the other 5 pieces as unpaced: one sync per log they touch (ledger 2 has its own
                    # directory), not one per piece
                    assert st.statistics().entry_logs.syncs == syncs + 3
            outer.cancel_scope.cancel()
    for lid, eid, data in added[::5]:
        assert await st.get_entry(lid, eid) == data
    await st.aclose()


async def test_a_task_queued_before_a_paced_checkpoint_took_the_lock_hurries_it(tmp_path: Path) -> None:
    st = _open(tmp_path, write_cache_max_bytes=64 << 20, flush_interval_ms=60_000, flush_pace_fraction=1.0)
    await _fill(st, 3)
    deleted = trio.Event()

    async def delete() -> None:
        await st.delete_ledger(99)
        deleted.set()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            async with st.write_lock:  # someone holds the lock (GC, say)
                nursery.start_soon(st.flush, FlushReason.PERIODIC)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(delete)  # queued behind the checkpoint
                await trio.testing.wait_all_tasks_blocked()
    assert deleted.is_set()
    await st.aclose()


async def test_only_periodic_checkpoints_are_paced(tmp_path: Path) -> None:
    st = _open(tmp_path, write_cache_max_bytes=64 << 20, flush_interval_ms=60_000, flush_pace_fraction=1.0)
    await _fill(st, 3)
    with trio.fail_after(20):  # paced, it would take about a minute
        await st.flush(FlushReason.EXPLICIT)
    await st.aclose()
    with pytest.raises(ValueError, match="flush_pace_fraction"):
        _open(tmp_path, flush_pace_fraction=1.5)
