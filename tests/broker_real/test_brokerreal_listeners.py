"""Advertised listeners (``advertisedListeners`` / ``internalListenerName``) with the official client
against a real ``magnetar standalone`` process.

The broker listens on one port; ``external`` advertises that port, ``internal`` (the internal
listener) an address nothing listens on. A client that connects with ``listener_name="external"``
is told the external URL in its lookups and works; one without a listener name is told the
internal listener's URL (and so cannot reach the topic); an unknown listener name fails the lookup
instead of being ignored.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest

from broker import BrokerConfig
from magnetar.common.config import ConfigError
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.ports import free_port
from tests.support.raw_pulsar import RawPeer
from tests.support.standalone import Standalone, start_standalone

pytestmark = pytest.mark.slow

_requests = itertools.count(1)


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Standalone, int, int]]:
    port, unreachable = free_port(), free_port()
    listeners = (
        f"internal:pulsar://127.0.0.1:{unreachable},external:pulsar://127.0.0.1:{port},"
        f"external:pulsar+ssl://127.0.0.1:{unreachable + 1}"
    )
    proc = start_standalone(
        Path(tmp_path_factory.mktemp("sa")) / "data",
        "--set",
        f"broker.broker_service_port={port}",
        "--set",
        f"broker.advertisedListeners={listeners}",
        "--set",
        "broker.internalListenerName=internal",
    )
    try:
        yield proc, port, unreachable
    finally:
        if proc.proc.poll() is None:
            assert proc.stop() == 0, proc.log()[-3000:]


def test_a_client_with_a_listener_name_gets_that_listener(sa: tuple[Standalone, int, int]) -> None:
    _, port, _ = sa
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", listener_name="external", operation_timeout_seconds=10)
    try:
        topic = "persistent://public/default/listeners-external"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"through the external listener")
        assert consumer.receive(5000).data() == b"through the external listener"
    finally:
        client.close()


def _lookup(peer: RawPeer, topic: str, listener_name: str | None = None) -> pb.CommandLookupTopicResponse:
    fields = {} if listener_name is None else {"advertised_listener_name": listener_name}
    peer.send("LOOKUP", topic=topic, request_id=next(_requests), authoritative=False, **fields)
    answer = peer.recv()
    assert answer is not None and answer.type == pb.BaseCommand.LOOKUP_RESPONSE, answer
    return answer.lookupTopicResponse


def test_lookup_answers_by_listener_name(sa: tuple[Standalone, int, int]) -> None:
    _, port, unreachable = sa
    topic = "persistent://public/default/listeners-raw"
    peer = RawPeer(port)
    try:
        peer.connect()
        ext = _lookup(peer, topic, "external")
        assert ext.response == pb.CommandLookupTopicResponse.Connect
        assert ext.brokerServiceUrl == f"pulsar://127.0.0.1:{port}"
        assert ext.brokerServiceUrlTls == f"pulsar+ssl://127.0.0.1:{unreachable + 1}"
        for blank in (None, ""):  # no listener name (or a blank one, as Pulsar): the internal listener
            internal = _lookup(peer, topic, blank)
            assert internal.brokerServiceUrl == f"pulsar://127.0.0.1:{unreachable}"
            assert not internal.HasField("brokerServiceUrlTls")
        unknown = _lookup(peer, topic, "nope")
        assert unknown.response == pb.CommandLookupTopicResponse.Failed
        assert unknown.error == pb.ServiceNotReady
        assert unknown.message == "the broker do not have nope listener"
    finally:
        peer.close()


def test_http_lookup_answers_by_listener_name(sa: tuple[Standalone, int, int]) -> None:
    proc, port, unreachable = sa
    path = "/lookup/v2/topic/persistent/public/default/listeners-http"
    by_param = httpx.get(f"{proc.admin_url}{path}", params={"listenerName": "external"}, timeout=10).json()
    assert by_param["brokerUrl"] == by_param["nativeUrl"] == f"pulsar://127.0.0.1:{port}"
    assert by_param["brokerUrlTls"] == f"pulsar+ssl://127.0.0.1:{unreachable + 1}"
    by_header = httpx.get(f"{proc.admin_url}{path}", headers={"X-Pulsar-ListenerName": "external"}, timeout=10)
    assert by_header.json()["brokerUrl"] == f"pulsar://127.0.0.1:{port}"
    # the parameter wins over the header, and no name means the internal listener
    both = httpx.get(
        f"{proc.admin_url}{path}",
        params={"listenerName": "internal"},
        headers={"X-Pulsar-ListenerName": "external"},
        timeout=10,
    ).json()
    assert (
        both["brokerUrl"]
        == httpx.get(f"{proc.admin_url}{path}", timeout=10).json()["brokerUrl"]
        == f"pulsar://127.0.0.1:{unreachable}"
    )
    unknown = httpx.get(f"{proc.admin_url}{path}", params={"listenerName": "nope"}, timeout=10)
    assert unknown.status_code == 500 and "the broker do not have nope listener" in unknown.json()["reason"]

    # (the official client 3.13 / C++ 4.2.0 sends no listener name in its HTTP lookups, so an
    # http:// service URL cannot select a listener from that client)


def test_an_unknown_listener_name_fails_the_lookup(sa: tuple[Standalone, int, int]) -> None:
    _, port, _ = sa
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", listener_name="nope", operation_timeout_seconds=3)
    try:
        # ServiceNotReady is retryable: the client looks up again until its operation timeout
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/listeners-unknown")
    finally:
        client.close()


def test_listener_config_is_validated() -> None:
    ok = BrokerConfig(advertised_listeners="a:pulsar://h:1,a:pulsar+ssl://h:2,b:pulsar://g:1")
    listeners, internal = ok.listeners()
    assert internal == "a" and listeners["a"].service_url_tls == "pulsar+ssl://h:2"
    for bad in (
        "a:http://h:1",
        "a:pulsar://h:1,a:pulsar://h:2",
        "a:pulsar://h:1,b:pulsar://h:1",
        "pulsar://h:1",
        "a:pulsar://h",
    ):
        with pytest.raises(ConfigError, match="advertised_listeners"):
            BrokerConfig(advertised_listeners=bad).validate()
    with pytest.raises(ConfigError, match="internal_listener_name"):
        BrokerConfig(advertised_listeners="a:pulsar://h:1", internal_listener_name="b").validate()
