"""Admin stats and /metrics while storage reads stall.

The backlog age in a topic's stats needs an entry read per subscription. Those reads queue behind
the dispatchers' reads of a backlog and wait on slow or unreachable bookies; a stats request that
awaited them was seen taking over 10 s in the chaos runs while its broker sat idle. Requests now
wait for such a refresh only briefly and answer with the age known so far
(`broker.topics._stats` Rule 6); the refresh lands for a later request. And an admin request on
a loaded topic no longer reads the metadata store to find that the topic exists.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import httpx
import pytest
import trio

from bk_client.api import LedgerEntry
from bk_client.testing import _MockReadHandle
from managed_ledger import ManagedLedgerConfig
from metadata import ConnectionLossError
from tests.support.broker_thread import BrokerThread
from tests.support.clients import pulsar_client
from tests.support.waiting import wait_until


def test_stats_and_metrics_answer_while_storage_reads_stall(topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stalled = threading.Event()
    reads_stalled = threading.Event()
    original = _MockReadHandle.read

    async def read(self: _MockReadHandle, first: int, last: int) -> Sequence[LedgerEntry]:
        while stalled.is_set():  # a bookie that does not answer (yet)
            reads_stalled.set()
            await trio.sleep(0.05)
        return await original(self, first, last)

    monkeypatch.setattr(_MockReadHandle, "read", read)
    # no entry cache: the backlog age's read goes to the bookies
    ml_config = ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1, cache_size_mb=0)
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    with (
        BrokerThread(ml_config=ml_config, admin=True) as b,
        pulsar_client(b.url) as client,
        httpx.Client(base_url=b.http, timeout=30) as http,
    ):
        client.subscribe(topic, "s").close()  # a durable subscription with a backlog
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        stalled.set()
        # answered (it used to wait for the stalled read: a ReadTimeout here)
        r = http.get(f"{path}/stats")
        assert r.status_code == 200, r.text
        assert r.json()["subscriptions"]["s"]["msgBacklog"] == 5
        assert reads_stalled.is_set()  # the refresh did try to read, and is still waiting
        metrics = http.get("/metrics")
        assert metrics.status_code == 200 and "pulsar_storage_backlog_age_seconds" in metrics.text

        stalled.clear()  # the bookies answer again: the refresh lands for a later request
        wait_until(
            lambda: http.get(f"{path}/stats").json()["oldestBacklogMessageAgeSeconds"] >= 0,
            "the backlog age once reads answer",
            timeout_s=30,
        )
        producer.close()


def test_internal_stats_of_a_loaded_topic_need_no_metadata_read(topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by the standalone chaos run: stats and internalStats of loaded topics took 9-22 s while
    # lookups took 0.2 s; each first read the namespace, the partitions and the topic's existence
    # from the metadata store, whose calls queue behind its writes (cursors, ledgers).
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    with (
        BrokerThread(admin=True) as b,
        pulsar_client(b.url) as client,
        httpx.Client(base_url=b.http, timeout=30) as http,
    ):
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"m")
        assert b.service is not None
        store = b.service.store

        async def unreachable(path: str, *args: object, **kwargs: object) -> object:
            raise ConnectionLossError(f"read {path}: the store does not answer", path)

        for read in ("get", "exists", "children"):
            monkeypatch.setattr(store, read, unreachable)
        r = http.get(f"{path}/internalStats")
        assert r.status_code == 200, r.text
        assert r.json()["entriesAddedCounter"] == 1
        producer.close()
