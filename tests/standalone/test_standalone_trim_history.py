"""explain-storage remembers trimmed ledgers across a broker restart: retention trims a consumed
topic's ledgers on standalone (written with the official client), the process stops, a new one
starts on the same data, and explain-storage still lists each trimmed ledger as deleted, with the
time of its trim (read back from the metadata store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import httpx
import pulsar
import pytest

from tests.support.standalone import start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

T = TypeVar("T")
TOPIC = "persistent://public/default/trim-history"
EXPLAIN = "/admin/v2/persistent/public/default/trim-history/explain-storage"
ARGS = (
    "--set",
    "broker.retentionCheckIntervalInSeconds=1",
    "--set",
    "managed_ledger.managedLedgerMaxEntriesPerLedger=20",
    "--set",
    "managed_ledger.managedLedgerMinLedgerRolloverTimeMinutes=0",
)


def _deleted_rows(admin_url: str) -> dict[int, dict[str, Any]]:
    r = httpx.get(admin_url + EXPLAIN, timeout=30)
    assert r.status_code == 200, r.text
    gc = r.json()["bookieGc"]
    assert gc is not None and "ledgers" in gc, gc
    return {row["ledgerId"]: row for row in gc["ledgers"] if row["metadata"] == "deleted"}


def test_explain_storage_remembers_trims_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data, *ARGS)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(TOPIC, "s")
        producer = client.create_producer(
            TOPIC, batching_enabled=False, max_pending_messages=10, block_if_queue_full=True
        )
        for i in range(100):
            producer.send_async(i.to_bytes(4, "big") * 100, None)
        producer.flush()
        for _ in range(100):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        # retention 0/0 on public/default: the consumed, closed ledgers are trimmed
        before = wait_until(
            lambda: (rows := _deleted_rows(sa.admin_url)) and len(rows) >= 3 and rows,
            "retention to trim",
            timeout_s=60.0,
        )
        consumer.close()
        producer.close()
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-4000:]
    sa = start_standalone(data, *ARGS)
    try:
        after = _deleted_rows(sa.admin_url)
        assert set(before) <= set(after), (sorted(before), sorted(after))
        for lid, row in before.items():
            assert after[lid]["deletedAtMs"] == row["deletedAtMs"], (row, after[lid])
            assert "deleted from metadata at" in after[lid]["summary"], after[lid]
    finally:
        assert sa.stop() == 0, sa.log()[-4000:]
