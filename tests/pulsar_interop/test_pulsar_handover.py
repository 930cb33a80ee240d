"""Apache Pulsar's broker and Magnetar's broker on the same ZooKeeper and the same bookies.

One real ZooKeeper chroot, two Magnetar bookies (registered in BookKeeper's layout), Pulsar's
cluster metadata written by Pulsar's own ``PulsarClusterMetadataSetup``. Then, one broker at a
time on that metadata, with the official Python client:

1. Pulsar's broker: a topic with a String schema, 12 messages; subscription ``holes`` (Shared)
   acknowledges every third one (holes after the mark-delete position), ``upto`` (Exclusive)
   acknowledges cumulatively up to ``m4``. Pulsar stops (SIGTERM: a graceful close).
2. Magnetar's broker: both subscriptions get exactly their unacknowledged messages; the String
   schema Pulsar stored (a SchemaLocator and a ledger entry) is the topic's version 0 and String
   consumers and a String producer use it; ``holes`` acknowledges three more, six messages are
   added, two of them acknowledged; ``upto`` moves to ``mag-2``. Magnetar stops.
3. Pulsar's broker again: each subscription gets exactly what is left; the String schema Pulsar
   registered is still the topic's, and a String producer still works.

No message is copied: both brokers read the same ledgers. Pulsar's jars come from Maven Central
through ``bench/pulsar_dist.py`` (skipped when they cannot be had). Marked ``slow``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pulsar
import pytest
import trio

from metadata import open_metadata_store
from protocols.managed_ledger import CursorInfo, ManagedLedgerInfo, Position
from tests.support.bookies import RealCluster, wait_registered
from tests.support.brokers import BrokerProcess
from tests.support.pulsar_broker import PulsarBroker, PulsarUnavailable, initialize_cluster, pulsar_jars
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

CLUSTER = "handover"
TOPIC = "persistent://public/default/handover"
ML_PATH = "/managed-ledgers/public/default/persistent/handover"
QUORUM = ("2", "2", "2")  # ensemble, write, ack: both bookies hold every entry


@pytest.fixture(scope="module")
def jars() -> None:
    try:
        pulsar_jars()
    except PulsarUnavailable as exc:
        pytest.skip(f"Apache Pulsar's broker cannot be fetched here: {exc}")


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, jars: None) -> Iterator[tuple[str, str]]:
    """(chroot, magnetar metadata url) with two Magnetar bookies registered and Pulsar's cluster
    metadata initialised."""
    chroot = f"/handover-{uuid.uuid4().hex[:8]}"
    url = zookeeper.url(chroot)
    bookies = RealCluster(tmp_path / "bookies", url)
    bookies.start(2)
    try:
        wait_registered(url, 2)
        yield chroot, url
    finally:
        bookies.stop_all()


def _stats(web_url: str) -> dict[str, Any]:
    r = httpx.get(f"{web_url}/admin/v2/persistent/public/default/handover/stats", timeout=10)
    r.raise_for_status()
    stats: dict[str, Any] = r.json()
    return stats


def _wait_backlogs(web_url: str, expected: dict[str, int]) -> None:
    """Wait until each subscription's backlog is as expected (the broker has taken every ack)."""

    def seen() -> dict[str, int]:
        subs = _stats(web_url)["subscriptions"]
        return {name: subs[name]["msgBacklog"] for name in expected}

    wait_until(lambda: seen() == expected, f"backlogs {expected}", timeout_s=60)


def _receive(consumer: pulsar.Consumer, n: int) -> list[bytes]:
    """Exactly ``n`` messages (each within 30 s), then nothing more for a second."""
    got = [consumer.receive(timeout_millis=30_000).data() for _ in range(n)]
    with pytest.raises(pulsar.Timeout):
        extra = consumer.receive(timeout_millis=1000)
        got.append(extra.data())
    return got


def _ack_where(consumer: pulsar.Consumer, n: int, to_ack: set[bytes]) -> list[bytes]:
    """Receive ``n`` messages, acknowledging individually those in ``to_ack``; their data in order."""
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=30_000)
        out.append(msg.data())
        if msg.data() in to_ack:
            consumer.acknowledge(msg)
    return out


def _read_node(url: str, path: str) -> bytes:
    async def read() -> bytes:
        async with open_metadata_store(url) as store:
            data, _ = await store.get(path)
            return bytes(data)

    return trio.run(read)


def test_pulsar_to_magnetar_and_back(zookeeper: ZooKeeperServer, cluster: tuple[str, str], tmp_path: Path) -> None:
    chroot, url = cluster
    pulsar_broker = PulsarBroker(
        tmp_path / "pulsar", zookeeper.hosts, chroot, CLUSTER, ensemble=2, write_quorum=2, ack_quorum=2
    )
    initialize_cluster(
        tmp_path / "pulsar-init",
        zookeeper.hosts,
        chroot,
        CLUSTER,
        broker_port=pulsar_broker.broker_port,
        web_port=pulsar_broker.web_port,
    )
    first = [f"m{i}".encode() for i in range(12)]

    # 1. Pulsar writes, with a schema, and leaves holes in one subscription, a cumulative ack in another
    with pulsar_broker:
        pulsar_broker.start()
        client = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=30)
        try:
            holes = client.subscribe(
                TOPIC, "holes", consumer_type=pulsar.ConsumerType.Shared, schema=pulsar.schema.StringSchema()
            )
            upto = client.subscribe(
                TOPIC, "upto", consumer_type=pulsar.ConsumerType.Exclusive, schema=pulsar.schema.StringSchema()
            )
            producer = client.create_producer(TOPIC, schema=pulsar.schema.StringSchema(), batching_enabled=False)
            for m in first:
                producer.send(m.decode())
            acked = {m for i, m in enumerate(first) if i % 3 == 0}
            assert _ack_where(holes, 12, acked) == first
            cumulative = [upto.receive(timeout_millis=30_000) for _ in range(5)]
            upto.acknowledge_cumulative(cumulative[-1])
            _wait_backlogs(pulsar_broker.web_url, {"holes": 8, "upto": 7})
            schema = httpx.get(
                f"{pulsar_broker.web_url}/admin/v2/schemas/public/default/handover/schema", timeout=10
            ).json()
            assert schema["type"] == "STRING"
        finally:
            client.close()
    assert pulsar_broker.stop() is not None

    # what Pulsar left in ZooKeeper is read by Magnetar's own record types
    info = ManagedLedgerInfo.decode(_read_node(url, ML_PATH))
    pulsar_ledger = info.ledgers[0].ledger_id
    holes_state = CursorInfo.decode(_read_node(url, f"{ML_PATH}/holes"))
    assert holes_state.mark_delete == Position(pulsar_ledger, 0)
    assert [(r.lower.entry_id, r.upper.entry_id) for r in holes_state.individual_deleted] == [(2, 3), (5, 6), (8, 9)]
    assert CursorInfo.decode(_read_node(url, f"{ML_PATH}/upto")).mark_delete == Position(pulsar_ledger, 4)

    # 2. Magnetar serves the same topic from the same ledgers and cursors
    magnetar = BrokerProcess(
        tmp_path / "magnetar",
        url,
        "--set",
        f"broker.clusterName={CLUSTER}",
        *[
            a
            for q, v in zip(("EnsembleSize", "WriteQuorum", "AckQuorum"), QUORUM, strict=True)
            for a in ("--set", f"managed_ledger.managedLedgerDefault{q}={v}")
        ],
    )
    magnetar.start()
    unacked = [m for i, m in enumerate(first) if i % 3 != 0]
    added = [f"mag-{i}".encode() for i in range(6)]
    try:
        client = pulsar.Client(magnetar.service_url, operation_timeout_seconds=30)
        try:
            string = pulsar.schema.StringSchema()
            holes = client.subscribe(TOPIC, "holes", consumer_type=pulsar.ConsumerType.Shared, schema=string)
            upto = client.subscribe(TOPIC, "upto", consumer_type=pulsar.ConsumerType.Exclusive, schema=string)
            assert _receive(holes, len(unacked)) == unacked
            assert _receive(upto, 7) == first[5:]
            # Pulsar's schema, read from its SchemaLocator and ledger, is the topic's version 0
            schema = httpx.get(
                f"{magnetar.admin_url}/admin/v2/schemas/public/default/handover/schema", timeout=10
            ).json()
            assert (schema["type"], schema["version"]) == ("STRING", 0)
            producer = client.create_producer(TOPIC, schema=string, batching_enabled=False)
            for m in added:
                producer.send(m.decode())
            # the unacked Pulsar messages come back to a new consumer: ack three of them, and two new ones
            holes.close()
            holes = client.subscribe(TOPIC, "holes", consumer_type=pulsar.ConsumerType.Shared, schema=string)
            got = _ack_where(holes, len(unacked) + len(added), {b"m1", b"m4", b"m7", b"mag-1", b"mag-3"})
            assert sorted(got) == sorted(unacked + added)
            tail = [upto.receive(timeout_millis=30_000) for _ in range(6)]
            assert [m.data() for m in tail] == added
            upto.acknowledge_cumulative(tail[2])
            _wait_backlogs(magnetar.admin_url, {"holes": 5 + 4, "upto": 3})
        finally:
            client.close()
    finally:
        assert magnetar.stop() == 0, magnetar.log()[-3000:]

    # 3. Pulsar again: each subscription is where Magnetar left it, and the schema is Pulsar's
    left_holes = [b"m2", b"m5", b"m8", b"m10", b"m11", b"mag-0", b"mag-2", b"mag-4", b"mag-5"]
    with pulsar_broker:
        pulsar_broker.start()
        client = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=30)
        try:
            holes = client.subscribe(TOPIC, "holes", consumer_type=pulsar.ConsumerType.Shared)
            upto = client.subscribe(TOPIC, "upto", consumer_type=pulsar.ConsumerType.Exclusive)
            assert _receive(holes, len(left_holes)) == left_holes
            assert _receive(upto, 3) == added[3:]
            schema = httpx.get(
                f"{pulsar_broker.web_url}/admin/v2/schemas/public/default/handover/schema", timeout=10
            ).json()
            assert schema["type"] == "STRING" and schema["version"] == 0
            producer = client.create_producer(TOPIC, schema=pulsar.schema.StringSchema())
            producer.send("after")
            assert holes.receive(timeout_millis=30_000).data() == b"after"
        finally:
            client.close()
