"""REACHED_END_OF_TOPIC after ``topics terminate``.

Once a subscription of a terminated topic has everything acknowledged, its consumers are told
REACHED_END_OF_TOPIC (a raw peer announcing a Java client sees the command), except clients of the
libpulsar family: the official Python client (built on libpulsar, which closes its connection on
any command outside a fixed set, this one included) keeps its connection and its consumer simply
receives nothing more, instead of reconnecting in a loop.
"""

from __future__ import annotations

import httpx
import pulsar
import pytest

from broker.topics._consumer import understands_end_of_topic
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.raw_pulsar import RawPeer
from tests.support.waiting import wait_until


def _terminate(http: httpx.Client, name: str) -> None:
    r = http.post(f"/admin/v2/persistent/public/default/{name}/terminate")
    assert r.status_code == 200, r.text


def _connections(broker: AdminBroker) -> int:
    return len(broker.service.connections)  # type: ignore[union-attr]


def test_client_versions() -> None:
    assert understands_end_of_topic("Pulsar-Java-v3.3.0")
    assert understands_end_of_topic("Pulsar Go 0.12.0")
    assert not understands_end_of_topic("Pulsar-CPP-v3.13.0")


def test_raw_java_client_is_told_end_of_topic(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    producer = client.create_producer(name, batching_enabled=False)
    producer.send(b"m0")
    peer = RawPeer(broker.port)
    try:
        peer.send("CONNECT", client_version="Pulsar-Java-v3.3.0", protocol_version=20)
        assert peer.recv().type == pb.BaseCommand.CONNECTED  # type: ignore[union-attr]
        peer.send(
            "SUBSCRIBE",
            topic=f"persistent://public/default/{name}",
            subscription="s",
            subType=0,
            consumer_id=7,
            request_id=1,
            initialPosition=1,
        )
        assert peer.recv().type == pb.BaseCommand.SUCCESS  # type: ignore[union-attr]
        peer.send("FLOW", consumer_id=7, messagePermits=10)
        msg = peer.recv()
        assert msg is not None and msg.type == pb.BaseCommand.MESSAGE
        _terminate(http, name)
        # not yet: the message is unacknowledged; the ack (cumulative) then ends the backlog
        peer.send("ACK", consumer_id=7, ack_type=1, message_id=[msg.message.message_id])
        end = peer.recv()
        assert end is not None and end.type == pb.BaseCommand.REACHED_END_OF_TOPIC, end
        assert end.reachedEndOfTopic.consumer_id == 7
        peer.assert_alive()
        # a consumer subscribing after the end is told at once
        peer.send(
            "SUBSCRIBE",
            topic=f"persistent://public/default/{name}",
            subscription="s2",
            subType=0,
            consumer_id=8,
            request_id=2,
            initialPosition=0,
        )  # Latest: nothing to read
        got = [peer.recv(), peer.recv()]
        assert [c.type for c in got if c is not None] == [pb.BaseCommand.SUCCESS, pb.BaseCommand.REACHED_END_OF_TOPIC]
    finally:
        peer.close()


def test_official_client_keeps_its_connection(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    consumer = client.subscribe(name, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(name, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    _terminate(http, name)
    got = []
    for _ in range(3):
        msg = consumer.receive(timeout_millis=10000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [b"m0", b"m1", b"m2"]
    wait_until(
        lambda: (
            http.get(f"/admin/v2/persistent/public/default/{name}/stats").json()["subscriptions"]["sub"]["msgBacklog"]
            == 0
        ),
        "the acks to reach the broker",
        timeout_s=20.0,
    )
    before = _connections(broker)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1500)
    assert consumer.is_connected()
    assert _connections(broker) == before  # no reconnect loop
    consumer.close()
