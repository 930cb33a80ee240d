"""Non-persistent topics and Key_Shared delayed delivery on a real standalone process.

Non-persistent: nothing reaches storage, so nothing of the topic is left after the broker is
killed and restarted, and the topic works again on first use. Delayed
Key_Shared messages are stored: one not yet due when the broker is killed is delivered after the
restart, when due, to its key's consumer.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import httpx
import pulsar
import pytest

from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow


def _receive_all(consumer: pulsar.Consumer, quiet_ms: int = 2000) -> list[bytes]:
    out = []
    while True:
        try:
            m = consumer.receive(quiet_ms)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(m)
        out.append(m.data())


def test_non_persistent_topic_on_standalone_survives_a_broker_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic = "non-persistent://public/default/np-restart"
    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"a{i}".encode())
        assert _receive_all(consumer) == [f"a{i}".encode() for i in range(20)]
        stats = httpx.get(f"{sa.admin_url}/admin/v2/non-persistent/public/default/np-restart/stats", timeout=10).json()
        assert stats["msgInCounter"] == 20 and stats["storageSize"] == 0
        # nothing of it is stored: the persistent listing does not know it
        persistent = httpx.get(f"{sa.admin_url}/admin/v2/persistent/public/default", timeout=10).json()
        assert not [t for t in persistent if "np-restart" in t]
        client.close()
        sa.kill()
        sa = start_standalone(data)
        # nothing of the topic survived the restart (it was never stored) ...
        r = httpx.get(f"{sa.admin_url}/admin/v2/non-persistent/public/default/np-restart/stats", timeout=10)
        assert r.status_code == 404
        # ... and it works again on first use
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"after")
        assert _receive_all(consumer) == [b"after"]
        client.close()
    finally:
        sa.stop()


def test_delayed_key_shared_message_is_delivered_after_a_broker_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic = "persistent://public/default/delayed-ks"
    sa = start_standalone(data)
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"late", partition_key="k", deliver_after=datetime.timedelta(seconds=8))
        producer.send(b"now", partition_key="k")
        assert _receive_all(consumer) == [b"now"]
        client.close()
        sa.kill()
        sa = start_standalone(data)
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
        m = consumer.receive(60_000)
        if m.data() == b"now":  # its ack may not have been persisted before SIGKILL (at-least-once)
            consumer.acknowledge(m)
            m = consumer.receive(60_000)
        assert m.data() == b"late" and m.partition_key() == "k"
        assert time.time() * 1000 >= m.publish_timestamp() + 7_900  # not before it was due
        consumer.acknowledge(m)
        client.close()
    finally:
        sa.stop()
