"""The deduplication state stays bounded over a real ``magnetar standalone`` (its bookies, its
restarts), as Pulsar's broker bounds it:

* inactive producer names are forgotten after ``brokerDeduplicationProducerInactivityTimeoutMinutes``
  (also in the ``pulsar.dedup`` cursor's snapshot, so also after a restart);
* at most ``brokerDeduplicationMaxNumberOfProducers`` names are kept, the most recently active, and
  after a SIGKILL and restart exactly those are known;
* a snapshot of producers with long names never outgrows ZooKeeper's node limit, so the cursor
  keeps being persisted (before: every persist failed and the cursor stopped, pinning ledgers).

Each test asserts what a producer learns on (re)connecting (``last_sequence_id``, carried by
PRODUCER_SUCCESS) and what the cursor holds (``internalStats``).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest
import trio

from metadata import open_metadata_store
from protocols.managed_ledger import CursorInfo
from protocols.pulsar import TopicName
from tests.support.admin import new_namespace, rest
from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow


def _dedup_namespace(sa: Standalone, prefix: str) -> str:
    ns = new_namespace(sa.admin_url, prefix)
    rest("POST", sa.admin_url, f"/admin/v2/namespaces/{ns}/deduplication", json=True)
    rest(
        "POST",
        sa.admin_url,
        f"/admin/v2/namespaces/{ns}/retention",
        json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    return ns


def _snapshot(sa: Standalone, topic: str) -> dict[str, int]:
    """The producer names and sequence ids in the ``pulsar.dedup`` cursor's properties."""
    path = "/admin/v2/" + topic.replace("://", "/") + "/internalStats"
    return rest("GET", sa.admin_url, path).json()["cursors"]["pulsar.dedup"]["properties"]


def _send_once(client: pulsar.Client, topic: str, name: str, seq: int) -> None:
    producer = client.create_producer(topic, producer_name=name, batching_enabled=False)
    producer.send(f"{name}-{seq}".encode(), sequence_id=seq)
    producer.close()


def _last_sequence_ids(sa: Standalone, topic: str, names: list[str]) -> dict[str, int]:
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
    try:
        out = {}
        for name in names:
            producer = client.create_producer(topic, producer_name=name, batching_enabled=False)
            out[name] = producer.last_sequence_id()
            producer.close()
        return out
    finally:
        client.close()


def test_only_the_most_recent_producers_past_the_cap_survive_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = (
        "--set",
        "broker.brokerDeduplicationMaxNumberOfProducers=5",
        "--set",
        "broker.brokerDeduplicationEntriesInterval=1",
    )
    names = [f"p{i:02d}" for i in range(12)]
    sa = start_standalone(data, *args)
    try:
        topic = f"persistent://{_dedup_namespace(sa, 'dedup-cap')}/t"
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        for i, name in enumerate(names):
            _send_once(client, topic, name, 100 + i)
        client.close()
        newest = {name: 100 + i for i, name in enumerate(names) if i >= 7}
        wait_until(lambda: _snapshot(sa, topic) == newest, "a snapshot of the 5 most recent producers", timeout_s=20.0)
    finally:
        sa.kill()

    sa = start_standalone(data, *args)
    try:
        known = _last_sequence_ids(sa, topic, names)
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]
    assert known == {name: (100 + i if i >= 7 else -1) for i, name in enumerate(names)}


def test_inactive_producers_are_forgotten_and_stay_forgotten_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # 0.05 minutes = 3 s, checked every second
    args = (
        "--set",
        "broker.brokerDeduplicationProducerInactivityTimeoutMinutes=0.05",
    )
    sa = start_standalone(data, *args)
    try:
        topic = f"persistent://{_dedup_namespace(sa, 'dedup-purge')}/t"
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        _send_once(client, topic, "gone", 5)
        stays = client.create_producer(topic, producer_name="stays", batching_enabled=False)
        stays.send(b"stays-7", sequence_id=7)
        wait_until(
            lambda: _snapshot(sa, topic) == {"stays": 7}, "a snapshot without the inactive producer", timeout_s=20.0
        )
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]

    sa = start_standalone(data, *args)
    try:
        known = _last_sequence_ids(sa, topic, ["gone", "stays"])
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]
    assert known == {"gone": -1, "stays": 7}


def test_producers_with_long_names_never_stop_the_dedup_cursor(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    # 300 producers with 4000-character names: 1.2 MB of names, over ZooKeeper's 1 MiB node limit
    url = zookeeper.url(f"/dedup-long-names-{uuid.uuid4().hex[:10]}", session_timeout_ms=10000)
    sa = start_standalone(
        tmp_path / "data",
        "--set",
        f"standalone.metadata_url={url}",
        "--set",
        "broker.brokerDeduplicationEntriesInterval=50",
        "--set",
        "managed_ledger.managedLedgerCursorPositionFlushSeconds=0.5",
    )
    try:
        topic = f"persistent://{_dedup_namespace(sa, 'dedup-long')}/t"
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        names = [f"{i:03d}-" + "n" * 3996 for i in range(300)]
        for i, name in enumerate(names):
            _send_once(client, topic, name, i)
        client.close()
        path = "/managed-ledgers/" + TopicName.parse(topic).managed_ledger_name + "/pulsar.dedup"

        async def persisted() -> tuple[int, CursorInfo]:
            async with open_metadata_store(url) as store:
                data, _ = await store.get(path)
                return len(data), CursorInfo.decode(data)

        def caught_up() -> bool:
            size, info = trio.run(persisted)
            assert size < 1024 * 1024
            return info.mark_delete.entry_id >= 299

        # the snapshot after the 300th entry is persisted: the cursor did not stop
        wait_until(caught_up, "the dedup cursor's node to be persisted at the last snapshot", timeout_s=20.0)
        _, info = trio.run(persisted)
        assert names[-1] in info.properties  # the most recently active are in it
    finally:
        assert sa.stop() == 0, sa.log()[-3000:]
