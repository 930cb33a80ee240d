"""What the official Go client (pulsar-client-go) relies on from the broker, over a raw socket:
each test pins one behaviour of Pulsar's broker that its test suite exercises and the C++ core
never asks for."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from broker import BrokerConfig
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.broker_thread import BrokerThread
from tests.support.clients import pulsar_client
from tests.support.raw_pulsar import RawPeer


def test_topics_of_a_namespace_that_does_not_exist_is_an_empty_list(broker: BrokerThread) -> None:
    # Pulsar lists the namespace's stored topics without checking that it exists; the Go client
    # retries an ERROR until its operation timeout
    peer = RawPeer(broker.port)
    try:
        peer.connect()
        for mode in (
            pb.CommandGetTopicsOfNamespace.PERSISTENT,
            pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
            pb.CommandGetTopicsOfNamespace.ALL,
        ):
            peer.send("GET_TOPICS_OF_NAMESPACE", request_id=7 + mode, namespace="public/no-such-ns", mode=mode)
            answer = peer.recv()
            assert answer is not None and answer.type == pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE, answer
            assert answer.getTopicsOfNamespaceResponse.request_id == 7 + mode
            assert list(answer.getTopicsOfNamespaceResponse.topics) == []
    finally:
        peer.close()


def test_producer_creates_its_initial_subscription(broker: BrokerThread, client: pulsar.Client, topic: str) -> None:
    # the Go client's dead-letter producer names the DLQ's initial subscription, so that what it
    # writes there is kept for that subscription from the first message on
    peer = RawPeer(broker.port)
    try:
        peer.connect()
        peer.send("PRODUCER", topic=topic, producer_id=1, request_id=1, initial_subscription_name="init-sub")
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.PRODUCER_SUCCESS, answer
        peer.send_message(1, 0, b"first")
        receipt = peer.recv()
        assert receipt is not None and receipt.type == pb.BaseCommand.SEND_RECEIPT, receipt
        # a producer naming a subscription that exists leaves it where it is
        peer.send("PRODUCER", topic=topic, producer_id=2, request_id=2, initial_subscription_name="init-sub")
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.PRODUCER_SUCCESS, answer
        peer.send("PRODUCER", topic=topic, producer_id=3, request_id=3, initial_subscription_name="bad/name")
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.ERROR and answer.error.request_id == 3, answer
    finally:
        peer.close()
    consumer = client.subscribe(topic, "init-sub")  # the default initial position is Latest
    assert consumer.receive(timeout_millis=10_000).data() == b"first"


@pytest.fixture(scope="module")
def slow_failover_broker() -> Iterator[BrokerThread]:
    with BrokerThread(
        BrokerConfig(
            advertised_address="127.0.0.1",
            bind_address="127.0.0.1",
            broker_service_port=0,
            active_consumer_failover_delay_ms=600_000,
        )
    ) as b:
        yield b


def _failover_consumer(peer: RawPeer, topic: str) -> None:
    peer.connect()
    peer.send(
        "SUBSCRIBE",
        topic=topic,
        subscription="fo",
        subType=pb.CommandSubscribe.Failover,
        consumer_id=1,
        request_id=1,
        consumer_name="c1",
        initialPosition=pb.CommandSubscribe.Earliest,
    )
    answer = peer.recv()
    assert answer is not None and answer.type == pb.BaseCommand.SUCCESS, answer
    peer.send("FLOW", consumer_id=1, messagePermits=100)


def test_failover_switch_waits_for_the_failover_delay(slow_failover_broker: BrokerThread, topic: str) -> None:
    # Pulsar tells Failover consumers of a new active consumer, and delivers to it, only
    # activeConsumerFailoverDelayTimeMillis after the switch; the Go client registers a consumer
    # only once SUBSCRIBE's SUCCESS is processed, so an immediate ACTIVE_CONSUMER_CHANGE is lost
    with pulsar_client(slow_failover_broker.url) as c:
        c.create_producer(topic).send(b"m0")
    peer = RawPeer(slow_failover_broker.port)
    try:
        _failover_consumer(peer, topic)
        peer.send("PING")
        answer = peer.recv()  # neither the switch nor the message comes before the delay
        assert answer is not None and answer.type == pb.BaseCommand.PONG, answer
    finally:
        peer.close()


def test_failover_consumer_is_told_it_is_active_then_gets_messages(broker: BrokerThread, topic: str) -> None:
    with pulsar_client(broker.url) as c:
        c.create_producer(topic).send(b"m0")
    peer = RawPeer(broker.port)
    try:
        _failover_consumer(peer, topic)
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.ACTIVE_CONSUMER_CHANGE, answer
        assert answer.active_consumer_change.consumer_id == 1 and answer.active_consumer_change.is_active
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.MESSAGE, answer
    finally:
        peer.close()
