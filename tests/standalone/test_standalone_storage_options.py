"""Issue 19's storage options in standalone Magnetar with the official client: HMAC digests
(managedLedgerDigestType = MAC), the flat ledger manager, one entry log per ledger and incremental
entry-log flushing, all at once; messages survive a restart, and the metadata store shows the
flat LAYOUT node and HMAC ledgers."""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest
import trio

from metadata import open_metadata_store
from protocols.bookkeeper import DigestType, LedgerLayout, LedgerMetadata, decode_layout, flat_ledger_ids
from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow

OPTIONS = (
    "--set",
    "managed_ledger.managedLedgerDigestType=MAC",
    "--set",
    "managed_ledger.managedLedgerPassword=s3cret",
    "--set",
    "bookie.ledgerManagerFactoryClass=flat",
    "--set",
    "bk_client.ledgerManagerFactoryClass=flat",
    "--set",
    "bookie.entryLogPerLedgerEnabled=true",
    "--set",
    "bookie.flushEntrylogBytes=65536",
)


def test_storage_options_end_to_end(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data, *OPTIONS)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe("options-topic", "keep")
        producer = client.create_producer("options-topic", batching_enabled=False)
        for i in range(40):
            producer.send(b"opt-%d " % i * 50)
        for _ in range(10):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()
    sa = start_standalone(data, *OPTIONS)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe("options-topic", "keep")
        got = []
        for _ in range(30):
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()
    assert got == [b"opt-%d " % i * 50 for i in range(10, 40)]
    trio.run(_check_metadata, f"embedded://{data.resolve()}/metadata")


async def _check_metadata(url: str) -> None:
    async with open_metadata_store(url) as store:
        layout, _ = await store.get("/ledgers/LAYOUT")
        assert decode_layout(layout) is LedgerLayout.FLAT
        ids = flat_ledger_ids(await store.children("/ledgers"))
        assert ids  # the topic's ledgers, as children of /ledgers
        for lid in ids:
            data, _ = await store.get(f"/ledgers/L{lid:010d}")
            assert LedgerMetadata.decode(data).digest_type is DigestType.HMAC
