from __future__ import annotations

import trio

from managed_ledger import InitialPosition, ManagedLedgerFactory, Position
from tests.support.managed_ledger import NAME, config


async def test_add_read_reopen(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        position_of: dict[bytes, Position] = {}
        async with trio.open_nursery() as n:

            async def add(i: int) -> None:
                position_of[b"m%d" % i] = await ml.add_entry(b"m%d" % i)

            for i in range(20):
                n.start_soon(add, i)
        assert len(set(position_of.values())) == 20
        first = await c.read_entries(100)
        # every entry in position order, each at the position its add returned
        assert [e.position for e in first] == sorted(position_of.values())
        assert all(position_of[e.data] == e.position for e in first)
        await c.mark_delete(first[9].position)
        assert c.backlog == 10
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:
        ml = await f.open(NAME)
        assert ml.number_of_entries == 20
        c = ml.cursors["sub"]
        assert c.backlog == 10
        entries = await c.read_entries(100)
        # exactly the entries after the mark-delete position, as they were written
        assert [(e.position, e.data) for e in entries] == [(e.position, e.data) for e in first[10:]]


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
