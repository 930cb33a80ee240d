"""`ManagedLedgerFactory(read_transform=...)`: entries read back from the bookies pass through it
(the broker's way to read entries Apache Pulsar's broker stored with their checksum header);
entries added through the factory reach readers as they were added."""

from __future__ import annotations

from managed_ledger import InitialPosition, ManagedLedgerFactory
from protocols.pulsar import stored_entry_block
from tests.support.managed_ledger import NAME, config

PULSAR_SHAPED = b"\x0e\x01\x00\x00\x00\x00" + b"\x00\x00\x00\x02md" + b"payload"


async def test_entries_read_from_the_bookies_are_transformed(store, bk, clock) -> None:
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:  # another writer's shape
        ml = await f.open(NAME)
        await ml.open_cursor("sub", InitialPosition.EARLIEST)
        await ml.add_entry(PULSAR_SHAPED)
    async with ManagedLedgerFactory(bk, store, config(), clock, read_transform=stored_entry_block) as f:
        ml = await f.open(NAME)
        await ml.add_entry(b"\x00\x00\x00\x02md" + b"mine")
        entries = await ml.cursors["sub"].read_entries(10)
        assert [e.data for e in entries] == [b"\x00\x00\x00\x02mdpayload", b"\x00\x00\x00\x02mdmine"]
    async with ManagedLedgerFactory(bk, store, config(), clock) as f:  # without it: the bytes stored
        ml = await f.open(NAME)
        entries = await ml.cursors["sub"].read_entries(10)
        assert entries[0].data == PULSAR_SHAPED
