"""`broker.replication._remote`: the replicator's producer on a remote broker (here a token-secured
in-process one): CONNECT with credentials, lookup, PRODUCER, SENDs answered in order, schema
registration, and `RemoteError` for refusals and a lost connection."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pulsar
import pytest
import trio

from broker import BrokerConfig
from broker.auth import create_token, new_secret_key
from broker.replication import Dialer, RemoteError, open_remote_producer
from magnetar.common.tls import TlsSettings, client_context
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.broker_thread import BrokerThread
from tests.support.certs import make_certs
from tests.support.clients import drain, pulsar_client

SECRET = new_secret_key()
TOKEN = create_token("replicator", secret_key=SECRET, expires_in_s=3600)


@pytest.fixture(scope="module")
def remote() -> Iterator[BrokerThread]:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        authentication_enabled=True,
        authentication_providers=("token",),
        token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
    )
    with BrokerThread(config) as b:
        yield b


def _md(origin: str, seq: int, **extra: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name=origin, sequence_id=seq, publish_time=1, replicated_from="a", **extra)


def test_sends_are_confirmed_in_order_with_the_metadata_kept(remote: BrokerThread) -> None:
    topic = "persistent://public/default/remote-producer"
    with pulsar_client(remote.url, authentication=pulsar.AuthenticationToken(TOKEN)) as client:
        consumer = client.subscribe(topic, "s")

        async def replicate() -> list[tuple[int, int]]:
            async with open_remote_producer(
                remote.url, topic, "pulsar.repl.a-->b", queue_size=2, dialer=Dialer(("token", TOKEN.encode()))
            ) as producer:
                pending = [
                    await producer.send(_md("p", i, partition_key=f"k{i}"), f"m{i}".encode(), 1) for i in range(5)
                ]
                for p in pending:
                    await p.wait()
                schema = {"name": "s", "schema_data": b'{"type":"string"}', "type": 2, "properties": []}
                version = await producer.schema_version(schema, b"\x00" * 8)
                assert version == await producer.schema_version(schema, b"\x00" * 8)  # cached
                return [(p.sequence_id, p.entry_id) for p in pending]

        confirmed = trio.run(replicate)
        got = drain(consumer)
    assert [seq for seq, _ in confirmed] == list(range(5))
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(5)]


def test_refusals_are_remote_errors(remote: BrokerThread) -> None:
    topic = "persistent://public/default/refused"

    async def without_credentials() -> None:
        async with open_remote_producer(remote.url, topic, "pulsar.repl.a-->b", queue_size=10):
            pass

    with pytest.raises(RemoteError, match="CONNECT"):
        trio.run(without_credentials)

    async def nobody_listens() -> None:
        async with open_remote_producer("pulsar://127.0.0.1:1", topic, "pulsar.repl.a-->b", queue_size=10):
            pass

    with pytest.raises(RemoteError, match="no broker"):
        trio.run(nobody_listens)
    with pytest.raises(ValueError, match="pulsar://"):
        trio.run(without_url)


async def without_url() -> None:
    async with open_remote_producer("http://127.0.0.1:1", "persistent://public/default/x", "n", queue_size=1):
        pass


def test_tls_connections_follow_the_tls_urls(tmp_path_factory: pytest.TempPathFactory) -> None:
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=None,
        broker_service_port_tls=0,
        tls_certificate_file_path=certs.server_cert,
        tls_key_file_path=certs.server_key,
        tls_trust_certs_file_path=certs.ca,
    )
    topic = "persistent://public/default/over-tls"
    with BrokerThread(config) as tls_broker:
        assert tls_broker.service is not None
        url = tls_broker.service.service_url_tls
        assert url.startswith("pulsar+ssl://")
        ctx = client_context(TlsSettings(trust_certs_file=certs.ca))

        async def replicate() -> int:
            async with open_remote_producer(
                url, topic, "pulsar.repl.a-->b", queue_size=10, dialer=Dialer(ssl_context=ctx)
            ) as producer:
                pending = await producer.send(_md("p", 7), b"secret", 1)
                await pending.wait()
                return pending.sequence_id

        assert trio.run(replicate) == 7

        async def untrusted() -> None:
            async with open_remote_producer(url, topic, "pulsar.repl.a-->b", queue_size=10, dialer=Dialer()):
                pass

        with pytest.raises(RemoteError):  # plain TCP to a TLS port: no CONNECTED
            trio.run(untrusted)
