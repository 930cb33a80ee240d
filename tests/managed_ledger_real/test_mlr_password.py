"""managedLedgerPassword over real bookies and ZooKeeper: a managed ledger written with the old
empty password, reopened after the password is set, recovers and reads its old ledgers, writes
new ones under the secret (the real client refuses them to the empty password)."""

from __future__ import annotations

import dataclasses

import pytest

from bk_client import BookKeeper, Unauthorized
from managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
from metadata import open_metadata_store
from tests.managed_ledger_real.mlr_cluster import ROOT, BookieCluster

pytestmark = pytest.mark.slow

NAME = "t/ns/persistent/password"
OLD = ManagedLedgerConfig(
    ensemble_size=1,
    write_quorum=1,
    ack_quorum=1,
    max_entries_per_ledger=4,
    min_ledger_rollover_time_minutes=0.0,
    cache_size_mb=1.0,
)
NEW = dataclasses.replace(OLD, password="s3cret")


async def test_old_ledgers_stay_readable_after_the_password_is_set(cluster1: BookieCluster) -> None:
    async with open_metadata_store(cluster1.url) as store, BookKeeper.open(store, root=ROOT) as bk:
        async with ManagedLedgerFactory(bk, store, OLD) as factory:
            ml = await factory.open(NAME)
            await ml.open_cursor("sub", InitialPosition.EARLIEST)
            for i in range(6):  # two ledgers, the second left open
                await ml.add_entry(b"old %d" % i)
            old_ledgers = {info.ledger_id for info in ml.ledgers}
        async with ManagedLedgerFactory(bk, store, NEW) as factory:
            ml = await factory.open(NAME)  # fences and recovers the open old ledger with ''
            await ml.add_entry(b"new 0")
            new_ledgers = {info.ledger_id for info in ml.ledgers} - old_ledgers
        async with ManagedLedgerFactory(bk, store, NEW) as factory:
            ml = await factory.open(NAME)
            entries = await ml.cursors["sub"].read_entries(100)
            assert [e.data for e in entries] == [b"old %d" % i for i in range(6)] + [b"new 0"]
        assert new_ledgers
        for lid in new_ledgers:
            with pytest.raises(Unauthorized):
                await bk.open_ledger(lid, password=b"", recovery=False)
            handle = await bk.open_ledger(lid, password=b"s3cret", recovery=False)
            await handle.close()
