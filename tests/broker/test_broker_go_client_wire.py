"""What the official Go client (pulsar-client-go) relies on from the broker, over a raw socket:
each test pins one behaviour of Pulsar's broker that its test suite exercises and the C++ core
never asks for."""

from __future__ import annotations

from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker.broker_harness import BrokerThread
from tests.broker.raw_pulsar import RawPeer


def test_topics_of_a_namespace_that_does_not_exist_is_an_empty_list(broker: BrokerThread) -> None:
    # Pulsar lists the namespace's stored topics without checking that it exists; the Go client
    # retries an ERROR until its operation timeout
    peer = RawPeer(broker.port)
    try:
        peer.connect()
        for mode in (pb.CommandGetTopicsOfNamespace.PERSISTENT, pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
                     pb.CommandGetTopicsOfNamespace.ALL):
            peer.send("GET_TOPICS_OF_NAMESPACE", request_id=7 + mode, namespace="public/no-such-ns", mode=mode)
            answer = peer.recv()
            assert answer is not None and answer.type == pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE, answer
            assert answer.getTopicsOfNamespaceResponse.request_id == 7 + mode
            assert list(answer.getTopicsOfNamespaceResponse.topics) == []
    finally:
        peer.close()
