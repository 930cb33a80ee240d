"""Adds against fake bookies: pipelining and order, ack quorum, in-flight bounds, ensemble change,
fencing and failures."""

from __future__ import annotations

import pytest
import trio

from bk_client import (
    BookKeeperClient,
    ClientConfig,
    EntryTooLarge,
    LedgerClosed,
    LedgerFenced,
    NotEnoughBookies,
    ReadHandle,
    WriteHandle,
)
from protocols.bookkeeper import MAX_ENTRY_HEADER_SIZE, StatusCode, max_add_payload
from tests.support.fake_bookie import fake_cluster

FAST = ClientConfig(
    add_entry_timeout_s=0.5, reconnect_backoff_min_s=0.05, reconnect_backoff_max_s=0.2, read_entry_timeout_s=1.0
)


async def test_handles_implement_the_contract() -> None:
    async with fake_cluster(3) as c:
        assert isinstance(c.bk, BookKeeperClient)
        lh = await c.bk.create_ledger(3, 2, 2)
        assert isinstance(lh, WriteHandle)
        await lh.add_entry(b"a")
        await lh.close()
        rh = await c.bk.open_ledger(lh.ledger_id, recovery=False)
        assert isinstance(rh, ReadHandle)


async def test_pipelined_adds_complete_in_id_order_despite_a_slow_bookie() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        # the bookie at index 1 is slow: entries 0 and 1 (write sets {0,1}, {1,2}) are acked after
        # entry 2 ({2,0}), which must still complete after them
        c.bookie(lh.metadata.last_segment.ensemble[1]).add_delay = 0.05
        completed: list[int] = []

        async def add(i: int) -> None:
            eid = await lh.add_entry(b"entry-%d" % i)
            assert eid == i
            # rule 1: when add n returns, every entry below n was acknowledged (tasks may wake
            # in any order, the acknowledgements may not)
            assert lh.last_add_confirmed >= eid
            completed.append(eid)

        async with trio.open_nursery() as n:
            for i in range(30):
                n.start_soon(add, i)
                await trio.lowlevel.checkpoint()  # start the calls in order
        assert sorted(completed) == list(range(30))
        assert lh.last_add_confirmed == 29
        entries = await lh.read(0, 29)
        assert [e.data for e in entries] == [b"entry-%d" % i for i in range(30)]
        assert lh.length == sum(len(b"entry-%d" % i) for i in range(30))


async def test_add_completes_with_ack_quorum_while_one_replica_is_silent() -> None:
    async with fake_cluster(3, ClientConfig(add_entry_timeout_s=60)) as c:
        lh = await c.bk.create_ledger(3, 3, 2)
        silent = c.bookie(lh.metadata.last_segment.ensemble[2])
        silent.silent_adds = True
        for i in range(5):
            assert await lh.add_entry(b"x") == i
        assert silent.entry_ids(lh.ledger_id) == []
        assert len(lh.metadata.segments) == 1  # no ensemble change: Qa was reached


async def test_in_flight_adds_are_bounded() -> None:
    cfg = ClientConfig(max_in_flight_adds=4, max_in_flight_bytes=1 << 20)
    async with fake_cluster(3, cfg) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        for b in c.bookies:
            b.add_delay = 0.01
        ops = []
        for _ in range(20):
            ops.append(await lh.append(b"p" * 10))
            assert lh.statistics()["in_flight"] <= 4
        assert [await op.result() for op in ops] == list(range(20))


async def test_in_flight_bytes_are_bounded() -> None:
    cfg = ClientConfig(max_in_flight_bytes=1000)
    async with fake_cluster(3, cfg) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        for b in c.bookies:
            b.add_delay = 0.01
        ops = []
        for _ in range(10):
            ops.append(await lh.append(b"p" * 400))
            assert lh.statistics()["in_flight_bytes"] <= 1000
        assert [await op.result() for op in ops] == list(range(10))


async def _ensemble_change(fail: str) -> None:
    async with fake_cluster(4, FAST) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        ensemble = lh.metadata.last_segment.ensemble
        victim = c.bookie(ensemble[1])
        acked: list[int] = []
        async with trio.open_nursery() as n:

            async def writer() -> None:
                for i in range(60):
                    acked.append(await lh.add_entry(b"e%d" % i))

            n.start_soon(writer)
            while len(acked) < 20:
                await trio.sleep(0.001)
            if fail == "kill":
                await victim.kill()
            elif fail == "eio":
                victim.add_status = StatusCode.EIO
            else:
                victim.silent_adds = True
        assert acked == list(range(60))
        meta = lh.metadata
        assert len(meta.segments) == 2
        new = meta.last_segment
        assert victim.bookie_id not in new.ensemble
        assert new.ensemble[0] == ensemble[0] and new.ensemble[2] == ensemble[2]
        assert 20 <= new.first_entry_id <= 60
        stored, _ = await c.bk.ledger_manager.read(lh.ledger_id)
        assert stored == meta
        assert [e.data for e in await lh.read(0, 59)] == [b"e%d" % i for i in range(60)]
        await lh.close()
        rh = await c.bk.open_ledger(lh.ledger_id)
        assert [e.data for e in await rh.read(0, 59)] == [b"e%d" % i for i in range(60)]
        assert c.bk.metrics.statistics()["bookkeeper_client_NUM_ENSEMBLE_CHANGE_total"] >= 1


async def test_ensemble_change_when_a_bookie_dies() -> None:
    await _ensemble_change("kill")


async def test_ensemble_change_when_a_bookie_answers_errors() -> None:
    await _ensemble_change("eio")


async def test_ensemble_change_when_a_bookie_stops_answering() -> None:
    await _ensemble_change("silent")


async def test_no_replacement_bookie_fails_the_handle_for_good() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"ok")
        await c.bookie(lh.metadata.last_segment.ensemble[1]).kill()  # in entry 1's write set
        failures = 0
        for _ in range(3):
            try:
                await lh.add_entry(b"no")
            except NotEnoughBookies:
                failures += 1
        assert failures == 3
        assert lh.last_add_confirmed == 0


async def test_efenced_answer_fails_the_handle_with_ledger_fenced() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 3, 3)
        await lh.add_entry(b"a")
        c.bookies[0].ledgers[lh.ledger_id].fenced = True
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"b")
        with pytest.raises(LedgerFenced):
            await lh.add_entry(b"c")
        assert lh.last_add_confirmed == 0
        await lh.close()  # a fenced handle is released without error


async def test_adds_after_close_raise_ledger_closed() -> None:
    async with fake_cluster(3) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"a")
        await lh.close()
        with pytest.raises(LedgerClosed):
            await lh.add_entry(b"b")


async def test_writer_reconnects_after_a_dropped_connection() -> None:
    async with fake_cluster(3, FAST) as c:
        lh = await c.bk.create_ledger(3, 3, 2)
        await lh.add_entry(b"a")
        for b in c.bookies:
            await b.drop_connections()
        await trio.sleep(0.3)  # past the reconnect backoff
        ids = [await lh.add_entry(b"b%d" % i) for i in range(3)]
        assert ids == [1, 2, 3]


async def test_an_entry_over_the_frame_limit_is_refused_and_the_handle_stays_usable() -> None:
    # The bookie closes a connection on a frame over its limit, failing every add in flight on
    # it; the client refuses such an entry itself, before an entry id is taken.
    cfg = ClientConfig(max_frame_size=64 * 1024)
    async with fake_cluster(3, cfg) as c:
        lh = await c.bk.create_ledger(3, 2, 2)
        # the bound holds for every digest type: the largest digest header (HMAC) is assumed
        assert c.bk.max_entry_size == max_add_payload(64 * 1024, header_size=MAX_ENTRY_HEADER_SIZE) < 64 * 1024
        assert await lh.add_entry(b"a") == 0
        try:
            await lh.add_entry(b"x" * (c.bk.max_entry_size + 1))
        except EntryTooLarge as exc:
            assert exc.code == -100 and exc.ledger_id == lh.ledger_id
        else:
            raise AssertionError("an entry over the limit was accepted")
        # the largest entry that fits goes through, and the ledger goes on with no gap
        assert await lh.add_entry(b"y" * c.bk.max_entry_size) == 1
        assert await lh.add_entry(b"b") == 2
        assert [len(e.data) for e in await lh.read(0, 2)] == [1, c.bk.max_entry_size, 1]
        assert len(lh.metadata.segments) == 1  # no bookie was treated as failed


def _rss_anon_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


async def test_a_write_handle_keeps_no_copy_of_the_entries_it_sent() -> None:
    # A protobuf request reused across adds kept every body assigned to it (upb arenas), so a
    # writer's memory grew with every byte written to its ledger. Bookies that store nothing
    # leave the handle as the only place such copies could live.
    async with fake_cluster(1) as c:
        c.bookies[0].add_status = StatusCode.EOK  # acknowledge without storing
        lh = await c.bk.create_ledger(1, 1, 1)
        payload = b"p" * (1 << 20)
        for _ in range(16):  # warm up pools and buffers
            await lh.add_entry(payload)
        before = _rss_anon_bytes()
        for _ in range(256):
            await lh.add_entry(payload)
        grown = _rss_anon_bytes() - before
        assert grown < 64 << 20, f"RssAnon grew by {grown >> 20} MiB over 256 MiB written"
