"""Write cache: double buffer swap, reads of both halves, backpressure, throttle timeout."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from bookie.storage import WriteCacheFull
from bookie.storage._write_cache import WriteCache


async def test_add_get_last_entry_and_sorted_flush() -> None:
    wc = WriteCache(1000)
    for lid, eid in [(2, 5), (1, 3), (2, 1), (1, 0)]:
        await wc.add(lid, eid, b"x%d%d" % (lid, eid))
    assert wc.get(2, 5) == b"x25"
    assert wc.get(3, 0) is None
    assert wc.last_entry(2) == 5
    assert wc.last_entry(9) == -1
    batch = wc.swap()
    assert wc.get(1, 3) == b"x13"  # the flushing half stays readable
    await wc.add(1, 7, b"new")
    assert wc.last_entry(1) == 7
    assert [(lid, eid) for lid, eid, _ in batch.sorted_entries()] == [(1, 0), (1, 3), (2, 1), (2, 5)]
    with pytest.raises(RuntimeError):
        wc.swap()
    wc.complete_flush()
    assert wc.get(1, 3) is None
    assert wc.statistics().count == 1


async def test_replacing_an_entry_keeps_size_right() -> None:
    wc = WriteCache(1000)
    await wc.add(1, 1, b"a" * 10)
    await wc.add(1, 1, b"b" * 4)
    assert wc.statistics().size_bytes == 4
    assert wc.get(1, 1) == b"bbbb"


async def test_full_half_marks_flush_wanted_and_waits_for_swap() -> None:
    wc = WriteCache(200, max_throttle_time_ms=10_000)  # halves of 100 bytes
    for i in range(10):
        await wc.add(1, i, b"x" * 10)
    assert wc.flush_wanted
    done = trio.Event()

    async def writer() -> None:
        await wc.add(1, 10, b"y" * 10)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        wc.swap()  # the storage's flush frees the active half
        await done.wait()
    assert wc.get(1, 10) == b"y" * 10


async def test_a_wait_for_a_full_half_outlives_a_swap_by_another_flush() -> None:
    # the flush loop waits for the active half to fill; an explicit flush swaps meanwhile, then
    # the new active half fills: the loop must still hear of it (it once waited on the old half's
    # signal until its interval ran out, while adds were throttled and then refused)
    wc = WriteCache(200)
    woke = trio.Event()

    async def flush_loop() -> None:
        await wc.wait_flush_wanted()
        woke.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flush_loop)
        await wc.add(1, 0, b"x" * 10)
        await trio.testing.wait_all_tasks_blocked()
        wc.swap()  # an explicit flush
        wc.complete_flush()
        await trio.testing.wait_all_tasks_blocked()
        assert not woke.is_set()  # nothing filled yet
        await wc.add(1, 1, b"y" * 100)  # the new active half fills
        with trio.fail_after(5):
            await woke.wait()


async def test_both_halves_full_raises_after_throttle_time() -> None:
    wc = WriteCache(200, max_throttle_time_ms=50)
    for i in range(10):
        await wc.add(1, i, b"x" * 10)
    wc.swap()  # a flush starts and blocks (never completes)
    for i in range(10, 20):
        await wc.add(1, i, b"x" * 10)
    with trio.fail_after(5):
        with pytest.raises(WriteCacheFull):
            await wc.add(1, 99, b"z")
    stats = wc.statistics()
    assert stats.rejected_adds == 1 and stats.throttled_adds == 1
    assert stats.size_bytes == 200  # nothing beyond the bound
    # once the blocked flush completes and the next swap happens, adds go through again
    wc.complete_flush()
    wc.swap()
    await wc.add(1, 99, b"z")


async def test_entry_larger_than_a_half_is_refused_at_once() -> None:
    wc = WriteCache(100, max_throttle_time_ms=60_000)
    with trio.fail_after(1):
        with pytest.raises(WriteCacheFull):
            await wc.add(1, 1, b"x" * 51)


async def test_delete_ledger_from_both_halves() -> None:
    wc = WriteCache(1000)
    await wc.add(1, 0, b"aa")
    await wc.add(2, 0, b"bb")
    wc.swap()
    await wc.add(1, 1, b"cc")
    wc.delete_ledger(1)
    assert wc.get(1, 0) is None and wc.get(1, 1) is None
    assert wc.last_entry(1) == -1
    assert wc.get(2, 0) == b"bb"
    assert [(lid, eid) for lid, eid, _ in wc.pending_batch().sorted_entries()] == [(2, 0)]
    assert wc.statistics().size_bytes == 2


async def test_flush_batch_reads_the_flushing_half_and_complete_hands_it_over() -> None:
    # the batch is the flushing half itself (no copy on the event loop): adds go to the new
    # active half and do not show up in it; complete_flush returns the entries for freeing
    wc = WriteCache(1000)
    await wc.add(1, 0, b"a")
    await wc.add(1, 1, b"bb")
    batch = wc.swap()
    await wc.add(1, 2, b"ccc")
    assert len(batch) == 2 and batch.size == 3
    assert batch.bytes_by_directory(2, 10) == [0, 23]
    assert [e for _, e, _ in wc.pending_batch().sorted_entries()] == [0, 1]
    handed = wc.complete_flush()
    assert sorted(handed) == [(1, 0), (1, 1)]
    assert wc.get(1, 0) is None and wc.get(1, 2) == b"ccc"
    assert wc.complete_flush() == {}  # nothing flushing: nothing to hand over
