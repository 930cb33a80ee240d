"""The race behind the owner-change fix, in one process and fast (MockBookKeeper, memory store):
the old owner keeps appending and, after each fenced add, rolls to a new ledger; recovery takes a
while (as over real bookies). The new owner must still get in, and no acknowledged entry is lost.

Before the new owner claimed the list ahead of recovery, the old owner's roll won the list's
compare-and-set every time and opening failed with "the ledger list kept changing"."""

from __future__ import annotations

import uuid

import trio

from bk_client.testing import MockBookKeeper
from managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory, ManagedLedgerFenced
from metadata import open_metadata_store

NAME = "t/ns/persistent/race"
CONFIG = ManagedLedgerConfig(
    ensemble_size=1,
    write_quorum=1,
    ack_quorum=1,
    max_entries_per_ledger=20,
    min_ledger_rollover_time_minutes=0.0,
    cache_size_mb=1.0,
)


class SlowRecoveryBookKeeper(MockBookKeeper):
    """Recovery (fence, read the tail, close) takes ``delay`` seconds; fencing happens first."""

    def __init__(self, delay: float) -> None:
        super().__init__(add_delay=0.0005)
        self.delay = delay

    async def open_ledger(self, ledger_id: int, *, password: bytes = b"", recovery: bool = True):  # type: ignore[no-untyped-def]
        handle = await super().open_ledger(ledger_id, password=password, recovery=recovery)
        if recovery:
            await trio.sleep(self.delay)  # the injected recovery delay that opens the race window
        return handle


async def test_new_owner_gets_in_while_old_owner_keeps_rolling() -> None:
    bk = SlowRecoveryBookKeeper(delay=0.02)
    async with open_metadata_store(f"memory://race-{uuid.uuid4().hex}") as store:
        acked = []
        async with ManagedLedgerFactory(bk, store, CONFIG) as old_factory:
            old = await old_factory.open(NAME)
            fenced = trio.Event()

            async def append_until_fenced() -> None:
                i = 0
                while True:
                    try:
                        acked.append((await old.add_entry(b"%d" % i), i))
                    except ManagedLedgerFenced:
                        fenced.set()
                        return
                    i += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(append_until_fenced)
                while len(acked) < 30:
                    await trio.sleep(0.001)
                async with ManagedLedgerFactory(bk, store, CONFIG) as new_factory:
                    new = await new_factory.open(NAME)
                    with trio.fail_after(5):
                        await fenced.wait()
                    cursor = new.new_non_durable_cursor(InitialPosition.EARLIEST)
                    entries = await cursor.read_entries(10_000)
            assert acked
            assert [int(e.data) for e in entries] == list(range(len(entries)))
            at = {int(e.data): e.position for e in entries}
            assert all(at[i] == pos for pos, i in acked)
