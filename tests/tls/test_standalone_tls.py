"""A TLS-only standalone with client authentication everywhere: the official client over
pulsar+ssl:// with its certificate, the admin REST over https, the broker's BookKeeper client over
TLS with its own certificate to a bookie that requires one, and the bookie REST over https."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx
import pulsar
import pytest
import trio

from bk_client import ClientConfig
from bookie import BookieConfig
from broker import BrokerConfig
from magnetar.common.config import load_config
from magnetar.stack import StandaloneConfig, serve_standalone
from managed_ledger import ManagedLedgerConfig
from tests.support.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _produce_consume(url: str, certs: Certs, topic: str) -> list[bytes]:
    client = pulsar.Client(
        url,
        tls_trust_certs_file_path=certs.ca,
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationTLS(certs.client_cert, certs.client_key),
        operation_timeout_seconds=15,
    )
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"m{i}".encode())
        out = []
        for _ in range(5):
            msg = consumer.receive(15_000)
            out.append(msg.data())
            consumer.acknowledge(msg)
        return out
    finally:
        client.close()


async def test_tls_only_standalone(tmp_path: Path, certs: Certs) -> None:
    broker = load_config(
        BrokerConfig,
        {
            "bindAddress": "127.0.0.1",
            "brokerServicePort": "",
            "webServicePort": "",
            "brokerServicePortTls": 0,
            "webServicePortTls": 0,
            "tlsCertificateFilePath": certs.server_cert,
            "tlsKeyFilePath": certs.server_key,
            "tlsTrustCertsFilePath": certs.ca,
            "tlsRequireTrustedClientCertOnConnect": True,
        },
    )
    tls: dict[str, Any] = {
        "tlsCertificatePath": certs.server_cert,
        "tlsKeyStore": certs.server_key,
        "tlsTrustStore": certs.ca,
    }
    bookie = load_config(
        BookieConfig,
        {
            "listen_address": "127.0.0.1",
            "http_address": "127.0.0.1",
            "journal_prealloc_size_mb": 1,
            "write_cache_max_mb": 4,
            "read_cache_max_mb": 4,
            "tls_enabled": True,
            "tlsClientAuthentication": True,
            "httpServerTlsEnable": True,
            **tls,
        },
    )
    client = load_config(
        ClientConfig,
        {
            "tls_enabled": True,
            "tlsTrustStore": certs.ca,
            "tlsCertificatePath": certs.client_cert,
            "tlsKeyStore": certs.client_key,
        },
    )
    standalone = StandaloneConfig(data_dir=str(tmp_path / "data"), bookie_port=0, bookie_http_port=0)
    async with trio.open_nursery() as nursery:
        ep = await nursery.start(
            lambda task_status: serve_standalone(
                standalone, broker, bookie, ManagedLedgerConfig(), client, task_status=task_status
            )
        )
        assert ep.broker.service_url == "" and ep.broker.web_url == ""
        assert ep.broker.service_url_tls.startswith("pulsar+ssl://127.0.0.1:")
        got = await trio.to_thread.run_sync(
            _produce_consume, ep.broker.service_url_tls, certs, "persistent://public/default/tls-standalone"
        )
        assert got == [f"m{i}".encode() for i in range(5)]
        (bookie_http,) = ep.bookies[0].http_urls
        assert bookie_http.startswith("https://")
        ctx = ssl.create_default_context(cafile=certs.ca)
        ctx.load_cert_chain(certs.client_cert, certs.client_key)
        async with httpx.AsyncClient(verify=ctx, timeout=10) as http:
            r = await http.get(
                f"{ep.broker.web_url_tls}/admin/v2/persistent/public/default/tls-standalone/explain-storage"
            )
            assert r.status_code == 200, r.text
            # the broker reached the bookie's https REST with the BookKeeper client's CA and certificate
            gc = r.json()["bookieGc"]
            assert [b["reachable"] for b in gc["bookies"].values()] == [True]
            assert (await http.get(f"{bookie_http}/api/v1/bookie/state")).status_code == 200
        nursery.cancel_scope.cancel()
