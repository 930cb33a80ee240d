"""Cursor operations: reads, acks, batch acks, seek/rewind/skip/reset/clear, tailing waits."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from managed_ledger import (
    CursorNotFound,
    InitialPosition,
    ManagedLedgerClosed,
    ManagedLedgerFactory,
    NoMoreEntries,
    Position,
)
from tests.support.managed_ledger import NAME, config


@pytest.fixture
async def ml(store, bk, clock):
    async with ManagedLedgerFactory(bk, store, config(max_entries_per_ledger=4), clock) as f:
        yield await f.open(NAME)


async def _fill(ml, n: int) -> list[Position]:
    return [await ml.add_entry(b"e%d" % i) for i in range(n)]


async def test_initial_positions_and_backlog(ml) -> None:
    first = await _fill(ml, 3)
    latest = await ml.open_cursor("latest")
    earliest = await ml.open_cursor("earliest", InitialPosition.EARLIEST)
    assert latest.backlog == 0 and not latest.has_more_entries()
    assert earliest.backlog == 3 and earliest.has_more_entries()
    more = await _fill(ml, 7)  # crosses ledgers (4 per ledger)
    pos = first + more
    assert latest.backlog == 7 and earliest.backlog == 10
    assert earliest.backlog_size == 10 * 2
    assert [e.position for e in await latest.read_entries(100)] == more
    await earliest.delete([pos[5], pos[6], pos[3]])
    assert earliest.backlog == 7
    assert earliest.individually_deleted_ranges == [(pos[2], pos[3]), (pos[4], pos[6])]
    await earliest.delete([pos[4]])
    assert earliest.backlog == 6
    assert earliest.individually_deleted_ranges == [(pos[2], pos[6])]  # (lower, upper] across ledgers
    await earliest.mark_delete(pos[2])  # absorbs the contiguous acked range
    assert earliest.mark_delete_position == pos[6]
    assert earliest.individually_deleted_ranges == []
    assert earliest.backlog == 3
    assert ml.internal_stats()["cursors"]["earliest"]["markDeletePosition"] == str(pos[6])


async def test_reads_skip_acked_and_respect_limits(ml) -> None:
    pos = await _fill(ml, 10)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    await c.delete([pos[1], pos[2], pos[7]])
    got = await c.read_entries(4)
    assert [e.position for e in got] == [pos[0], pos[3], pos[4], pos[5]]
    got = await c.read_entries(100, max_bytes=3)  # stops once the byte limit is reached
    assert [e.position for e in got] == [pos[6], pos[8]]
    assert [e.data for e in await c.read_entries(100)] == [b"e9"]
    assert await c.read_entries(100) == []
    c.rewind()
    assert c.read_position == pos[0]
    assert len(await c.read_entries(100)) == 7


async def test_seek_skip_reset_clear(ml) -> None:
    pos = await _fill(ml, 12)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    await c.seek(pos[5])
    assert (await c.read_entries(1))[0].position == pos[5]
    await c.delete([pos[1], pos[2]])
    await c.skip_entries(2)  # skips 0 and 3; 1 and 2 were already acked
    assert c.mark_delete_position == pos[3]
    assert c.backlog == 8
    await c.reset(pos[2])
    assert c.mark_delete_position == Position(pos[2].ledger_id, pos[2].entry_id - 1)
    assert c.individually_deleted_ranges == [] and c.read_position == pos[2]
    assert c.backlog == 10
    await c.reset(Position(-1, -1))  # earliest
    assert c.backlog == 12 and c.read_position == pos[0]
    await c.clear_backlog()
    assert c.backlog == 0 and c.mark_delete_position == pos[-1] and not c.has_more_entries()


async def test_batch_index_acks(ml) -> None:
    pos = await _fill(ml, 3)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    await c.delete_batch_indexes(pos[1], 4, [0, 2])
    assert c.batch_acked_indexes(pos[1]) == {0, 2}
    assert not c.is_acked(pos[1])
    await c.delete_batch_indexes(pos[1], 4, [1])
    assert c.batch_acked_indexes(pos[1]) == {0, 1, 2}
    await c.delete_batch_indexes(pos[0], 2, [0, 1])  # all acked: the entry is acked
    assert c.is_acked(pos[0]) and c.mark_delete_position == pos[0]
    await c.delete_batch_indexes(pos[1], 4, [3])
    assert c.mark_delete_position == pos[1] and c.batch_acked_indexes(pos[1]) is None
    await c.delete_batch_indexes(pos[2], 5, [4])
    await c.close()
    c2 = await ml.open_cursor("c")
    assert c2.batch_acked_indexes(pos[2]) == {4}


async def test_tailing_read_waits_and_hits_the_cache(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        c = await ml.open_cursor("c")
        got = []

        async def reader() -> None:
            got.extend(await c.read_entries_or_wait(10))

        async with trio.open_nursery() as n:
            n.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()  # the read is waiting
            assert got == []
            await ml.add_entry(b"hello")
        assert [e.data for e in got] == [b"hello"]
        assert f.metrics.sample("pulsar_ml_cache_hits_total") >= 1
        assert f.metrics.sample("pulsar_ml_cache_misses_total") == 0
        with trio.move_on_after(0.01) as scope:
            await c.read_entries_or_wait(10)
        assert scope.cancelled_caught


async def test_cold_reads_miss_the_cache(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(cache_size_mb=0.0), clock) as f:
        ml = await f.open(NAME)
        await _fill(ml, 5)
        await ml.rollover()
        c = await ml.open_cursor("c", InitialPosition.EARLIEST)
        assert len(await c.read_entries(10)) == 5
        assert f.metrics.sample("pulsar_ml_cache_misses_total") >= 5


async def test_waiting_read_on_terminated_or_closed(ml) -> None:
    await _fill(ml, 2)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    reader = ml.new_non_durable_cursor(InitialPosition.LATEST)

    async def wait_closed() -> None:
        with pytest.raises(ManagedLedgerClosed):
            await reader.read_entries_or_wait(1)

    async with trio.open_nursery() as n:
        n.start_soon(wait_closed)
        await trio.testing.wait_all_tasks_blocked()  # the read is waiting
        await reader.close()
    await ml.terminate()
    assert len(await c.read_entries_or_wait(10)) == 2
    with pytest.raises(NoMoreEntries):
        await c.read_entries_or_wait(10)


async def test_non_durable_cursor(ml) -> None:
    pos = await _fill(ml, 6)
    r = ml.new_non_durable_cursor(pos[2], inclusive=False)
    assert [e.position for e in await r.read_entries(100)] == pos[3:]
    r2 = ml.new_non_durable_cursor(InitialPosition.EARLIEST)
    assert len(await r2.read_entries(100)) == 6
    assert "reader" not in ml.cursors and not r.durable
    await r.persist()  # no-op


async def test_find_newest_matching(ml) -> None:
    pos = await _fill(ml, 11)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)

    def older_than_7(entry) -> bool:
        return int(entry.data[1:]) < 7

    assert await c.find_newest_matching(older_than_7) == pos[6]
    assert await c.find_newest_matching(lambda e: False) is None
    await c.mark_delete(pos[8])
    assert await c.find_newest_matching(older_than_7) is None
    assert await c.find_newest_matching(older_than_7, search_all=True) == pos[6]


async def test_delete_cursor(ml, store) -> None:
    await ml.open_cursor("c")
    await ml.delete_cursor("c")
    assert "c" not in ml.cursors
    assert await store.children(f"/managed-ledgers/{NAME}") == []
    with pytest.raises(CursorNotFound):
        await ml.delete_cursor("c")
