"""managedLedgerDigestType over real bookies and ZooKeeper: a managed ledger written with CRC32C,
reopened with MAC, then with CRC32 and DUMMY, holds ledgers of four digest types; each ledger's
metadata records its own type, and a reader configured with yet another type reads every entry
(the digest comes from each ledger's metadata, not from the reader's config)."""

from __future__ import annotations

import dataclasses

import pytest

from bk_client import BookKeeper
from managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
from metadata import open_metadata_store
from protocols.bookkeeper import DigestType
from tests.managed_ledger_real.mlr_cluster import ROOT, BookieCluster

pytestmark = pytest.mark.slow

NAME = "t/ns/persistent/digests"
BASE = ManagedLedgerConfig(
    ensemble_size=1,
    write_quorum=1,
    ack_quorum=1,
    max_entries_per_ledger=3,
    min_ledger_rollover_time_minutes=0.0,
    cache_size_mb=1.0,
    password="pw",
)
TYPES = [
    ("CRC32C", DigestType.CRC32C),
    ("MAC", DigestType.HMAC),
    ("CRC32", DigestType.CRC32),
    ("DUMMY", DigestType.DUMMY),
]


async def test_ledgers_of_every_digest_type_in_one_managed_ledger(cluster1: BookieCluster) -> None:
    written: list[bytes] = []
    types_by_ledger: dict[int, DigestType] = {}
    async with open_metadata_store(cluster1.url) as store, BookKeeper.open(store, root=ROOT) as bk:
        for name, dtype in TYPES:
            cfg = dataclasses.replace(BASE, digest_type=name)
            cfg.validate()
            async with ManagedLedgerFactory(bk, store, cfg) as factory:
                ml = await factory.open(NAME)
                if not written:
                    await ml.open_cursor("sub", InitialPosition.EARLIEST)
                before = {info.ledger_id for info in ml.ledgers}
                for i in range(4):  # rolls at 3 entries: at least one ledger of this type
                    data = b"%s entry %d" % (name.encode(), i)
                    await ml.add_entry(data)
                    written.append(data)
                for lid in {info.ledger_id for info in ml.ledgers} - before:
                    types_by_ledger[lid] = dtype
        assert set(types_by_ledger.values()) == {d for _, d in TYPES}
        for lid, dtype in types_by_ledger.items():
            meta, _ = await bk.ledger_manager.read(lid)
            assert meta.digest_type is dtype
        reader = dataclasses.replace(BASE, digest_type="CRC32")
        async with ManagedLedgerFactory(bk, store, reader) as factory:
            ml = await factory.open(NAME)
            entries = await ml.cursors["sub"].read_entries(100)
            assert [e.data for e in entries] == written
