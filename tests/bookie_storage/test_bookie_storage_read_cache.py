"""Read cache ring eviction and asynchronous read-ahead."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from bookie.storage._read_cache import InOrderReaders, ReadAhead, ReadCache


def test_ring_evicts_the_oldest_segment() -> None:
    rc = ReadCache(400, segments=4)  # segments of 100 bytes
    for i in range(4):
        assert rc.put(1, i, b"x" * 60)  # each entry fills its own segment
    assert all(rc.get(1, i) is not None for i in range(4))
    rc.put(1, 4, b"y" * 60)  # wraps: segment 0 (entry 0) goes
    assert rc.get(1, 0) is None
    assert rc.get(1, 4) == b"y" * 60
    assert rc.get(1, 1) is not None
    stats = rc.statistics()
    assert stats.size_bytes <= 400
    assert stats.count == 4
    assert stats.evicted_segments == 1
    assert stats.hits == 6 and stats.misses == 1
    assert not rc.put(1, 9, b"z" * 101)  # bigger than a segment: not cached


def test_size_stays_bounded_under_churn() -> None:
    rc = ReadCache(10_000, segments=5)
    for i in range(5000):
        rc.put(i % 7, i, b"q" * (i % 300 + 1))
        assert rc.statistics().size_bytes <= 10_000


def test_delete_ledger() -> None:
    rc = ReadCache(1000)
    rc.put(1, 1, b"a")
    rc.put(2, 1, b"b")
    rc.delete_ledger(1)
    assert rc.get(1, 1) is None
    assert rc.get(2, 1) == b"b"
    assert rc.statistics().size_bytes == 1


async def test_read_ahead_fills_cache_off_the_readers_path() -> None:
    rc = ReadCache(1 << 20)
    release = threading.Event()
    calls: list[tuple[int, int, int, int]] = []

    def reader(location: int, ledger_id: int, max_entries: int, max_bytes: int) -> list[tuple[int, bytes]]:
        calls.append((location, ledger_id, max_entries, max_bytes))
        release.wait(5)
        return [(e, b"e%d" % e) for e in range(location, location + max_entries)]

    ra = ReadAhead(rc, reader, batch_size=5, max_bytes=1000, concurrency=1, max_pending=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(ra.run)
        ra.request(7, 10, 10)  # returns at once: the read happens in a worker
        assert rc.get(7, 10) is None
        await trio.testing.wait_all_tasks_blocked()
        ra.request(7, 12, 12)  # overlaps the one in flight: skipped
        ra.request(8, 0, 0)  # queued (max_pending=1)
        ra.request(9, 0, 0)  # queue full: dropped, the caller never waits
        release.set()
        with trio.fail_after(5):
            while rc.get(8, 4) is None:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert [rc.get(7, e) for e in range(10, 15)] == [b"e%d" % e for e in range(10, 15)]
    assert calls[0] == (10, 7, 5, 1000)
    stats = ra.statistics()
    assert (stats.skipped, stats.dropped, stats.batches) == (1, 1, 2)


async def test_read_ahead_errors_are_counted_not_raised() -> None:
    rc = ReadCache(1000)

    def reader(*_: int) -> list[tuple[int, bytes]]:
        raise FileNotFoundError("compacted away")

    ra = ReadAhead(rc, reader, batch_size=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(ra.run)
        ra.request(1, 1, 0)
        with trio.fail_after(5):
            while ra.statistics().errors == 0:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_two_read_aheads_of_one_ledger_each_wake_their_waiters() -> None:
    """Two readers of one ledger at different positions: each read-ahead in flight is tracked on
    its own, so a reader waiting for the first is woken when it ends even though a second one
    was requested meanwhile (it used to be forgotten: that reader waited forever)."""
    rc = ReadCache(1 << 20)
    releases = {0: threading.Event(), 500: threading.Event()}

    def reader(location: int, ledger_id: int, max_entries: int, max_bytes: int) -> list[tuple[int, bytes]]:
        releases[location].wait(5)
        return [(e, b"e%d" % e) for e in range(location, location + max_entries)]

    ra = ReadAhead(rc, reader, batch_size=5, max_bytes=1000, concurrency=2)
    got: dict[int, bytes | None] = {}

    async def wait_for(entry: int) -> None:
        assert await ra.wait_pending(7, entry)
        got[entry] = rc.get(7, entry, count=False)

    async with trio.open_nursery() as nursery:
        await nursery.start(ra.run)
        ra.request(7, 0, 0)
        ra.request(7, 500, 500)  # another reader, further on in the same ledger
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait_for, 2)
        nursery.start_soon(wait_for, 502)
        await trio.testing.wait_all_tasks_blocked()
        releases[0].set()  # the first read-ahead ends first
        with trio.fail_after(5):
            while 2 not in got:
                await trio.sleep(0.01)
        releases[500].set()
        with trio.fail_after(5):
            while 502 not in got:
                await trio.sleep(0.01)
        assert got == {2: b"e2", 502: b"e502"}
        assert not await ra.wait_pending(7, 3)  # nothing in flight any more
        nursery.cancel_scope.cancel()


def test_in_order_readers_are_told_apart_per_ledger() -> None:
    seen = InOrderReaders(3, streams=2, max_ledgers=2)
    assert not seen.miss(1, 0)  # the first miss of a ledger starts a run
    assert seen.miss(1, 2)  # within the window after it
    assert not seen.miss(1, 100)  # far away: a second reader of the ledger
    # the two readers take turns; each continues its own run
    assert [seen.miss(1, e) for e in (4, 102, 6, 104)] == [True, True, True, True]
    assert not seen.miss(1, 5)  # backwards is not in order (and starts a run of its own,
    assert seen.miss(1, 106)  # in place of the least recently continued one: 6's)
    assert not seen.miss(1, 10)
    assert not seen.miss(2, 0) and seen.miss(2, 1)  # ledgers are separate
    assert not seen.miss(3, 1)  # a third ledger forgets the other two (bounded)
    assert not seen.miss(1, 107)
    with pytest.raises(ValueError):
        InOrderReaders(0)
