"""Redelivery and delayed delivery over real bookie processes and a real broker process.

1. A bookie stops while a message waits to be delivered again (a negative ack, then a delayed
   message coming due): the broker's reads fail, it keeps retrying with its backoff, and once the
   bookie is back (same id, same data) the message is delivered to the consumer that was attached
   all along.
2. The broker is SIGKILLed with delayed messages not yet due, most of them in stored buckets
   (small buckets, so several are sealed): a new broker process recovers the index from the
   bucket ledgers and delivers every message once, none before its time.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pulsar
import pytest
import trio

from metadata import open_metadata_store
from protocols.managed_ledger import CursorInfo
from tests.support.admin import rest
from tests.support.bookies import RealBookie, RealCluster
from tests.support.brokers import BrokerProcess, wait_bookies
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer, free_port

pytestmark = pytest.mark.slow

SINGLE_COPY = (
    "--set",
    "managed_ledger.managedLedgerDefaultEnsembleSize=1",
    "--set",
    "managed_ledger.managedLedgerDefaultWriteQuorum=1",
    "--set",
    "managed_ledger.managedLedgerDefaultAckQuorum=1",
)


def _consumer_count(broker: BrokerProcess, topic: str, sub: str) -> int:
    stats = rest("GET", broker.admin_url, f"/admin/v2/persistent/public/default/{topic}/stats").json()
    return len(stats["subscriptions"][sub]["consumers"])


def test_redelivery_waits_for_a_stopped_bookie(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/brokerreal-redeliver-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    port = free_port()
    bookie = RealBookie(tmp_path / "bookie", url, ["--port", str(port)], bookie_id=f"127.0.0.1:{port}")
    broker = BrokerProcess(
        tmp_path / "broker",
        url,
        *SINGLE_COPY,
        # every redelivery reads the bookie (no entry cache to answer it)
        "--set",
        "managed_ledger.managedLedgerCacheSizeMB=0",
        "--set",
        "broker.dispatcherReadFailureBackoffInitialTimeInMs=200",
        "--set",
        "broker.dispatcherReadFailureBackoffMaxTimeInMs=1000",
        "--set",
        "broker.delayedDeliveryTickTimeMillis=100",
        "--set",
        "bk_client.read_entry_timeout_s=2",
    )
    topic = "redeliver"
    full = f"persistent://public/default/{topic}"
    try:
        bookie.start()
        wait_bookies(url, {bookie.bookie_id})
        broker.start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(
            full, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=300
        )
        producer = client.create_producer(full, batching_enabled=False)

        # 1. a negative ack while the bookie is down
        producer.send(b"nacked")
        first = consumer.receive(10_000)
        bookie.stop()
        failures = broker.log().count("read failed")
        consumer.negative_acknowledge(first)
        wait_until(
            lambda: broker.log().count("read failed") >= failures + 2, "the broker to retry its read", timeout_s=30
        )
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)
        assert _consumer_count(broker, topic, "s") == 1
        bookie.start()
        again = consumer.receive(60_000)
        assert again.data() == b"nacked" and again.redelivery_count() >= 1
        consumer.acknowledge(again)

        # 2. a delayed message comes due while the bookie is down
        due_ms = int(time.time() * 1000) + 3000
        producer.send(b"delayed", deliver_at=due_ms)
        producer.send(b"plain")
        assert consumer.receive(10_000).data() == b"plain"
        bookie.stop()
        failures = broker.log().count("read failed")
        wait_until(
            lambda: broker.log().count("read failed") >= failures + 2, "the due read to fail and retry", timeout_s=30
        )
        assert _consumer_count(broker, topic, "s") == 1
        bookie.start()
        later = consumer.receive(60_000)
        assert later.data() == b"delayed" and time.time() * 1000 >= due_ms
        consumer.acknowledge(later)
        assert _consumer_count(broker, topic, "s") == 1
        client.close()
    finally:
        broker.stop()
        bookie.stop()


def _bucket_keys(url: str, topic: str, sub: str) -> dict[str, str]:
    async def read() -> dict[str, str]:
        async with open_metadata_store(url) as store:
            value, _ = await store.get(f"/managed-ledgers/public/default/persistent/{topic}/{sub}")
            props = CursorInfo.decode(value).cursor_properties
            return {k: v for k, v in props.items() if k.startswith("#pulsar.internal.delayed.bucket")}

    return trio.run(read)


def test_delayed_messages_survive_a_broker_sigkill_and_come_no_earlier(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    url = zookeeper.url(f"/brokerreal-delayed-{uuid.uuid4().hex[:10]}", session_timeout_ms=4000)
    bookies = RealCluster(tmp_path / "bookies", url)
    args = (
        *SINGLE_COPY,
        "--set",
        "broker.delayedDeliveryMinIndexCountPerBucket=20",
        "--set",
        "broker.delayedDeliveryMaxIndexesPerBucketSnapshotSegment=5",
        "--set",
        "broker.delayedDeliveryTickTimeMillis=100",
    )
    broker = BrokerProcess(tmp_path / "broker", url, *args)
    topic = "delayed-kill"
    full = f"persistent://public/default/{topic}"
    n = 50
    try:
        bookies.start(1)
        wait_bookies(url, set(bookies.live_ids))
        broker.start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(full, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(full, batching_enabled=False, block_if_queue_full=True)
        start_ms = int(time.time() * 1000)
        due = {f"d{i}": start_ms + 15_000 + 100 * i for i in range(n)}
        for key, at in due.items():
            producer.send_async(json.dumps({"key": key, "due": at}).encode(), None, deliver_at=at)
        producer.flush()
        for i in range(5):
            producer.send(f"plain-{i}".encode())
        for _ in range(5):  # undelayed messages are not held behind the delayed ones
            m = consumer.receive(10_000)
            assert m.data().startswith(b"plain-")
            consumer.acknowledge(m)
        # two buckets sealed (at 20, and what the dispatcher's read batch added meanwhile) and stored
        wait_until(lambda: len(_bucket_keys(url, topic, "s")) == 2, "two stored buckets", timeout_s=30)
        broker.kill()
        client.close()
        assert int(time.time() * 1000) < min(due.values()), "too slow: messages came due before the kill"

        broker.start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(full, "s", consumer_type=pulsar.ConsumerType.Shared)
        got: dict[str, int] = {}
        deadline = time.monotonic() + 90
        while len(got) < n and time.monotonic() < deadline:
            try:
                m = consumer.receive(2_000)
            except pulsar.Timeout:
                continue
            now_ms = int(time.time() * 1000)
            if m.data().startswith(b"plain-"):  # its ack was not persisted before the kill: again
                consumer.acknowledge(m)
                continue
            body = json.loads(m.data())
            assert now_ms >= body["due"], f"{body['key']} came {body['due'] - now_ms} ms early"
            assert body["key"] not in got, f"{body['key']} delivered twice"
            got[body["key"]] = now_ms
            consumer.acknowledge(m)
        assert set(got) == set(due)
        assert "delayed-kill/s: recovered 2 buckets" in broker.log()  # from storage, not by reading again
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1_000)
        client.close()
        # every message acknowledged: the buckets are used up and deleted, their keys removed
        wait_until(lambda: not _bucket_keys(url, topic, "s"), "the used-up buckets to be deleted", timeout_s=30)
    finally:
        broker.stop()
        bookies.stop_all()
