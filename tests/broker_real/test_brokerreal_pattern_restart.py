"""Pattern subscriptions and auto-creation against a real ``magnetar standalone`` process,
SIGKILLed and restarted in the middle: the official client's periodic GET_TOPICS_OF_NAMESPACE
picks up topics created after it subscribed (also after the restart) and drops deleted ones.

The namespace has auto-creation disabled through ``autoTopicCreation`` (topics are made with the
admin API), so a consumer of a deleted topic cannot bring it back by reconnecting, and the policy
itself must survive the restart.
"""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest

from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.admin import new_namespace, rest
from tests.support.clients import subscribe_pattern
from tests.support.ports import free_port
from tests.support.raw_pulsar import RawPeer
from tests.support.standalone import Standalone, start_standalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def _topics_answer(sa: Standalone, ns: str, pattern: str) -> list[str]:
    """The broker's GET_TOPICS_OF_NAMESPACE answer, as a pattern consumer asks it."""
    peer = RawPeer(int(sa.service_url.rsplit(":", 1)[1]))
    try:
        peer.connect()
        peer.send(
            "GET_TOPICS_OF_NAMESPACE",
            request_id=1,
            namespace=ns,
            topics_pattern=pattern,
            mode=pb.CommandGetTopicsOfNamespace.PERSISTENT,
        )
        while True:
            cmd = peer.recv()
            assert cmd is not None, "the broker closed the connection"
            if cmd.type == pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE:
                return sorted(cmd.getTopicsOfNamespaceResponse.topics)
    finally:
        peer.close()


class _Collector:
    """Receives from a consumer, acking, and remembers every payload seen."""

    def __init__(self, consumer: pulsar.Consumer) -> None:
        self.consumer = consumer
        self.seen: set[bytes] = set()

    def has(self, *payloads: bytes) -> bool:
        try:
            msg = self.consumer.receive(500)
        except pulsar.Timeout:
            return set(payloads) <= self.seen
        self.seen.add(msg.data())
        self.consumer.acknowledge(msg)
        return set(payloads) <= self.seen


def _send(client: pulsar.Client, topic: str, payload: bytes) -> None:
    producer = client.create_producer(topic, send_timeout_millis=20_000)
    producer.send(payload)
    producer.close()


def test_pattern_consumer_follows_created_and_deleted_topics_across_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = f"broker.broker_service_port={free_port()}"  # the same port after the restart: the client reconnects
    sa = start_standalone(data, "--set", port)
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
    try:
        ns = new_namespace(sa.admin_url, "pattern")
        rest(
            "POST", sa.admin_url, f"/admin/v2/namespaces/{ns}/autoTopicCreation", json={"allowAutoTopicCreation": False}
        )
        for name in ("pat-a", "pat-b", "other"):
            rest("PUT", sa.admin_url, f"/admin/v2/persistent/{ns}/{name}")
        pattern = f"persistent://{ns}/pat-.*"
        assert _topics_answer(sa, ns, pattern) == [f"persistent://{ns}/pat-a", f"persistent://{ns}/pat-b"]
        assert _topics_answer(sa, ns, f"{ns}/pat-a") == [f"persistent://{ns}/pat-a"]  # without the scheme too
        collector = _Collector(
            subscribe_pattern(
                client, pattern, "p", discovery_period_s=1, initial_position=pulsar.InitialPosition.Earliest
            )
        )
        with pytest.raises(pulsar.TopicNotFound):  # auto-creation is off in this namespace
            client.create_producer(f"persistent://{ns}/pat-missing")
        for name in ("pat-a", "pat-b", "other"):
            _send(client, f"persistent://{ns}/{name}", f"{name}-1".encode())
        wait_until(lambda: collector.has(b"pat-a-1", b"pat-b-1"), "the first messages", timeout_s=30)
        # created after subscribing: picked up within a few discovery periods
        rest("PUT", sa.admin_url, f"/admin/v2/persistent/{ns}/pat-c")
        wait_until(
            lambda: (
                rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}/pat-c/stats")
                .json()["subscriptions"]
                .get("p", {})
                .get("consumers")
            ),
            "discovery of pat-c",
            timeout_s=30,
        )
        _send(client, f"persistent://{ns}/pat-c", b"pat-c-1")
        wait_until(lambda: collector.has(b"pat-c-1"), "pat-c's message", timeout_s=30)

        sa.kill()
        sa = start_standalone(data, "--set", port)
        # the policy and the topics survived; the consumer reconnects to each topic by itself
        assert rest("GET", sa.admin_url, f"/admin/v2/namespaces/{ns}/autoTopicCreation").json() == {
            "allowAutoTopicCreation": False,
            "topicType": "non-partitioned",
        }
        rest("PUT", sa.admin_url, f"/admin/v2/persistent/{ns}/pat-d")
        for name in ("pat-a", "pat-d"):
            _send(client, f"persistent://{ns}/{name}", f"{name}-2".encode())
        wait_until(
            lambda: collector.has(b"pat-a-2", b"pat-d-2"),
            "messages after the restart, from an old and a newly created topic",
            timeout_s=60,
        )

        # deleted: gone from the answer; the consumer goes on with the others
        rest("DELETE", sa.admin_url, f"/admin/v2/persistent/{ns}/pat-b?force=true")
        assert f"persistent://{ns}/pat-b" not in _topics_answer(sa, ns, pattern)
        _send(client, f"persistent://{ns}/pat-c", b"pat-c-2")
        wait_until(lambda: collector.has(b"pat-c-2"), "pat-c's message after the delete", timeout_s=30)
        # ... and a topic of that name made again later is a new topic to discover
        rest("PUT", sa.admin_url, f"/admin/v2/persistent/{ns}/pat-b")
        wait_until(
            lambda: (
                rest("GET", sa.admin_url, f"/admin/v2/persistent/{ns}/pat-b/stats")
                .json()["subscriptions"]
                .get("p", {})
                .get("consumers")
            ),
            "rediscovery of pat-b",
            timeout_s=30,
        )
        _send(client, f"persistent://{ns}/pat-b", b"pat-b-2")
        wait_until(lambda: collector.has(b"pat-b-2"), "the re-created pat-b's message", timeout_s=30)
        assert not any(p.startswith(b"other") for p in collector.seen)
        collector.consumer.close()
    finally:
        client.close()
        if sa.proc.poll() is None:
            assert sa.stop() == 0, sa.log()[-3000:]


def test_partitioned_auto_creation_from_the_broker_config(tmp_path: Path) -> None:
    """allowAutoTopicCreationType=partitioned with defaultNumPartitions in broker config: a new
    topic's PARTITIONED_METADATA creates it with that many partitions; a namespace override wins."""
    sa = start_standalone(
        tmp_path / "data",
        "--set",
        "broker.allowAutoTopicCreationType=partitioned",
        "--set",
        "broker.defaultNumPartitions=4",
    )
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
    try:
        topic = "persistent://public/default/auto-partitioned"
        consumer = client.subscribe(topic, "s")
        assert len(client.get_topic_partitions(topic)) == 4
        _send(client, topic, b"x")
        assert consumer.receive(10_000).data() == b"x"
        consumer.close()
        ns = new_namespace(sa.admin_url, "plain")
        rest(
            "POST",
            sa.admin_url,
            f"/admin/v2/namespaces/{ns}/autoTopicCreation",
            json={"allowAutoTopicCreation": True, "topicType": "non-partitioned"},
        )
        plain = f"persistent://{ns}/t"
        _send(client, plain, b"y")
        assert client.get_topic_partitions(plain) == [plain]
    finally:
        client.close()
        assert sa.stop() == 0, sa.log()[-3000:]
