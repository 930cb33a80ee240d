"""Reads against fake bookies: LAC from the bookies, failover, speculative reads, digests,
long-poll LAC, and the connection's failure handling."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from bk_client import BookieUnavailable, ClientConfig, DigestMismatch, NoSuchEntry, NoSuchLedger
from protocols.bookkeeper import encode_entry
from tests.support.fake_bookie import fake_cluster

FAST = ClientConfig(
    read_entry_timeout_s=1.0, speculative_read_timeout_s=0.05, reconnect_backoff_min_s=0.05, reconnect_backoff_max_s=0.2
)


async def _ledger(c, n: int, e: int = 3, qw: int = 2, qa: int = 2):  # type: ignore[no-untyped-def]
    lh = await c.bk.create_ledger(e, qw, qa)
    for i in range(n):
        await lh.add_entry(b"e%d" % i)
    return lh


async def test_reader_follows_an_open_ledger_through_the_bookies_lac() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 10)
        async with c.client() as other:
            rh = await other.open_ledger(lh.ledger_id, recovery=False)
            # each add carries the LAC before it: the bookies know 8 once entry 9 is stored
            assert rh.last_add_confirmed == 8
            assert not rh.is_closed
            assert [e.data for e in await rh.read(0, 8)] == [b"e%d" % i for i in range(9)]
            with pytest.raises(NoSuchEntry):
                await rh.read(0, 9)
            await lh.add_entry(b"e10")
            assert [e.data for e in await rh.read(9, 9)] == [b"e9"]  # a read past the LAC refreshes it
            await lh.close()
            assert await rh.read_last_add_confirmed() == 10
            assert rh.is_closed
            assert not any(b.is_fenced(lh.ledger_id) for b in c.bookies)


async def test_read_fails_over_to_the_next_replica() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 6)
        await lh.close()
        await c.bookie(lh.metadata.last_segment.ensemble[0]).kill()
        rh = await c.bk.open_ledger(lh.ledger_id)
        assert [e.data for e in await rh.read(0, 5)] == [b"e%d" % i for i in range(6)]


async def test_read_fails_over_when_a_replica_lost_the_entry() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 6)
        await lh.close()
        b0 = c.bookie(lh.metadata.last_segment.ensemble[0])
        b0.ledgers[lh.ledger_id].entries.clear()
        rh = await c.bk.open_ledger(lh.ledger_id)
        assert [e.data for e in await rh.read(0, 5)] == [b"e%d" % i for i in range(6)]
        assert c.bk.metrics.statistics()["bookkeeper_client_READ_FAILOVER_COUNT_total"] >= 1


async def test_speculative_read_goes_to_the_next_replica_of_a_slow_bookie() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 3)
        await lh.close()
        for b in c.bookies:
            b.read_delay = 0.5  # slow everywhere but on the replica the test speeds up below
        rh = await c.bk.open_ledger(lh.ledger_id)
        ensemble = lh.metadata.last_segment.ensemble
        c.bookie(ensemble[1]).read_delay = 0.0  # entry 0's second replica answers at once
        assert [e.data for e in await rh.read(0, 0)] == [b"e0"]
        assert c.bk.metrics.statistics()["bookkeeper_client_SPECULATIVE_READ_COUNT_total"] >= 1


async def test_a_corrupt_copy_is_rejected_and_the_other_replica_used() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 3)
        await lh.close()
        ensemble = lh.metadata.last_segment.ensemble
        b0, b1 = c.bookie(ensemble[0]), c.bookie(ensemble[1])
        good = b0.ledgers[lh.ledger_id].entries[0]
        b0.ledgers[lh.ledger_id].entries[0] = good[:-1] + b"X"
        rh = await c.bk.open_ledger(lh.ledger_id)
        assert [e.data for e in await rh.read(0, 0)] == [b"e0"]
        # a copy that verifies but belongs to another entry is rejected too
        b1.ledgers[lh.ledger_id].entries[0] = encode_entry(lh.ledger_id, 1, -1, 2, b"e1")
        with pytest.raises(DigestMismatch):
            await rh.read(0, 0)


async def test_all_replicas_without_the_entry_is_no_such_entry() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 3)
        await lh.close()
        for b in c.bookies:
            b.ledgers[lh.ledger_id].entries.pop(1, None)
        rh = await c.bk.open_ledger(lh.ledger_id)
        with pytest.raises(NoSuchEntry):
            await rh.read(0, 2)


async def test_long_poll_returns_when_the_lac_moves() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 2)
        async with c.client() as other:
            rh = await other.open_ledger(lh.ledger_id, recovery=False)
            assert rh.last_add_confirmed == 0
            assert await rh.wait_for_lac(0, 0.1) == 0  # nothing new: returns at the timeout
            got: list[int] = []

            async def tail() -> None:
                got.append(await rh.wait_for_lac(0, 30))

            async with trio.open_nursery() as n:
                n.start_soon(tail)
                await trio.testing.wait_all_tasks_blocked()  # the long poll is waiting
                assert not got
                await lh.add_entry(b"e2")  # carries LAC 1 to the bookies
            assert got == [1]
            assert c.bk.metrics.statistics()["bookkeeper_client_READ_LAST_CONFIRMED_AND_ENTRY_total"] == 0
            assert other.metrics.statistics()["bookkeeper_client_READ_LAST_CONFIRMED_AND_ENTRY_total"] >= 1


async def test_long_poll_sees_the_close() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 2)
        async with c.client() as other:
            rh = await other.open_ledger(lh.ledger_id, recovery=False)
            await lh.close()
            assert await rh.wait_for_lac(0, 5) == 1
            assert rh.is_closed


async def test_writer_handle_wait_for_lac() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 1)
        got: list[int] = []
        async with trio.open_nursery() as n:

            async def tail() -> None:
                got.append(await lh.wait_for_lac(0, 30))

            n.start_soon(tail)
            await trio.testing.wait_all_tasks_blocked()  # the long poll is waiting
            await lh.add_entry(b"x")
        assert got == [1]


async def test_open_and_delete_of_missing_ledgers() -> None:
    async with fake_cluster(3, FAST) as c:
        with pytest.raises(NoSuchLedger):
            await c.bk.open_ledger(12345)
        lh = await _ledger(c, 1)
        await lh.close()
        await c.bk.delete_ledger(lh.ledger_id)
        with pytest.raises(NoSuchLedger):
            await c.bk.open_ledger(lh.ledger_id, recovery=False)
        with pytest.raises(NoSuchLedger):
            await c.bk.delete_ledger(lh.ledger_id)


async def test_connection_backoff_then_reconnect() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await _ledger(c, 3)
        await lh.close()
        bookie = lh.metadata.last_segment.ensemble[0]
        pool = c.bk._ctx.pool  # white box: the connection of one bookie
        conn = pool.get(bookie)
        victim = c.bookie(bookie)
        await victim.kill()
        with pytest.raises(BookieUnavailable):
            await conn.call(pool.next_txn(), b"\x00\x00\x00\x00")  # the dropped connection
        with pytest.raises(BookieUnavailable):  # in backoff: fails at once
            conn.send(pool.next_txn(), b"", lambda *a: None, None)
        assert pool.is_down(bookie)
        # a restarted bookie on a new port is a different id; the old one stays down after retries
        await trio.sleep(0.25)
        assert not pool.is_down(bookie)
