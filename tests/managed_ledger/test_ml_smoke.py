from __future__ import annotations

import trio

from managed_ledger import InitialPosition, ManagedLedgerFactory, Position
from tests.managed_ledger.ml_util import NAME, config


async def test_add_read_reopen(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        positions = []
        async with trio.open_nursery() as n:
            async def add(i: int) -> None:
                positions.append(await ml.add_entry(b"m%d" % i))
            for i in range(20):
                n.start_soon(add, i)
        assert sorted(positions) == positions or len(set(positions)) == 20
        entries = await c.read_entries(100)
        assert len(entries) == 20
        await c.mark_delete(entries[9].position)
        assert c.backlog == 10
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert ml.number_of_entries == 20
        c = ml.cursors["sub"]
        assert c.backlog == 10
        entries = await c.read_entries(100)
        assert [e.data for e in entries] == [e.data for e in entries]
        assert len(entries) == 10
        assert isinstance(entries[0].position, Position)


async def test_properties_are_stored_with_the_ledger_list(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        await ml.set_property("pulsar.topic.epoch", "0")
        await ml.add_entry(b"x")
        await ml.set_property("pulsar.topic.epoch", "1")
        assert ml.properties == {"pulsar.topic.epoch": "1"}
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert ml.properties == {"pulsar.topic.epoch": "1"}
        assert ml.number_of_entries == 1
