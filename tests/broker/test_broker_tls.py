"""The Pulsar protocol over TLS (pulsar+ssl://) and the admin REST over https, with the official client.

Certificates come from trustme (tests/tls/certs.py), generated per run. A broker with its plain
ports switched off serves producers and consumers over TLS only; a client trusting another CA
cannot connect; with tlsRequireTrustedClientCertOnConnect a client must present a certificate
(the official client's AuthenticationTLS).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from click.testing import Result

from broker import BrokerConfig
from magnetar.common.config import ConfigError, load_config
from tests.support.broker_thread import BrokerThread
from tests.support.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("other"), name="other")


def _tls_config(certs: Certs, **kw: object) -> BrokerConfig:
    return BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=None,
        web_service_port=None,
        broker_service_port_tls=0,
        web_service_port_tls=0,
        tls_certificate_file_path=certs.server_cert,
        tls_key_file_path=certs.server_key,
        **kw,
    )  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def tls_broker(certs: Certs) -> Iterator[BrokerThread]:
    with BrokerThread(_tls_config(certs), admin=True) as b:
        yield b


@pytest.fixture(scope="module")
def mtls_broker(certs: Certs) -> Iterator[BrokerThread]:
    cfg = _tls_config(certs, tls_trust_certs_file_path=certs.ca, tls_require_trusted_client_cert_on_connect=True)
    with BrokerThread(cfg) as b:
        yield b


def _url(b: BrokerThread) -> str:
    assert b.service is not None
    assert b.service.service_url_tls.startswith("pulsar+ssl://127.0.0.1:")
    return b.service.service_url_tls


def _roundtrip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    got = []
    for _ in range(3):
        msg = consumer.receive(10_000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("validate_hostname", [False, True])
def test_produce_and_consume_over_tls_only(tls_broker: BrokerThread, certs: Certs, validate_hostname: bool) -> None:
    assert tls_broker.service is not None and tls_broker.service.service_url == ""  # plain port off
    client = pulsar.Client(
        _url(tls_broker),
        tls_trust_certs_file_path=certs.ca,
        tls_validate_hostname=validate_hostname,
        operation_timeout_seconds=10,
    )
    try:
        _roundtrip(client, f"persistent://public/default/tls-{validate_hostname}")
    finally:
        client.close()


def test_a_client_trusting_another_ca_cannot_connect(tls_broker: BrokerThread, other: Certs) -> None:
    client = pulsar.Client(_url(tls_broker), tls_trust_certs_file_path=other.ca, operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/tls-wrong-ca")
    finally:
        client.close()


def test_admin_rest_over_https_and_lookup_urls(tls_broker: BrokerThread, certs: Certs, other: Certs) -> None:
    service = tls_broker.service
    assert service is not None and service.web_service_url == ""  # plain HTTP off
    base = service.web_service_url_tls
    assert base.startswith("https://127.0.0.1:")
    with httpx.Client(verify=ssl.create_default_context(cafile=certs.ca), timeout=10) as http:
        assert http.get(f"{base}/admin/v2/tenants").status_code == 200
        lookup = http.get(f"{base}/lookup/v2/topic/persistent/public/default/tls-lookup").json()
    assert lookup["brokerUrlTls"] == service.service_url_tls
    assert lookup["httpUrlTls"] == base
    untrusted = ssl.create_default_context(cafile=other.ca)
    with httpx.Client(verify=untrusted, timeout=10) as http, pytest.raises(httpx.ConnectError):
        http.get(f"{base}/admin/v2/tenants")


def test_mutual_tls_refuses_a_client_without_a_certificate(mtls_broker: BrokerThread, certs: Certs) -> None:
    anonymous = pulsar.Client(_url(mtls_broker), tls_trust_certs_file_path=certs.ca, operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.PulsarException):
            anonymous.create_producer("persistent://public/default/mtls-anonymous")
    finally:
        anonymous.close()
    client = pulsar.Client(
        _url(mtls_broker),
        tls_trust_certs_file_path=certs.ca,
        operation_timeout_seconds=10,
        authentication=pulsar.AuthenticationTLS(certs.client_cert, certs.client_key),
    )
    try:
        _roundtrip(client, "persistent://public/default/mtls-ok")
    finally:
        client.close()


def test_tls_config_errors_name_the_key(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(BrokerConfig, {"brokerServicePortTls": 6651})
    assert e.value.key == "tlsCertificateFilePath"
    with pytest.raises(ConfigError) as e:
        load_config(
            BrokerConfig,
            {
                "brokerServicePortTls": 6651,
                "tlsCertificateFilePath": certs.server_cert,
                "tlsKeyFilePath": str(tmp_path / "missing.pem"),
            },
        )
    assert e.value.key == "tlsKeyFilePath"
    with pytest.raises(ConfigError) as e:
        load_config(BrokerConfig, {"brokerServicePort": "", "webServicePort": ""})
    assert e.value.key == "broker_service_port"
    cfg = load_config(
        BrokerConfig,
        {
            "brokerServicePort": "",
            "brokerServicePortTls": 6651,
            "tlsCertificateFilePath": certs.server_cert,
            "tlsKeyFilePath": certs.server_key,
            "tlsProtocols": ["TLSv1.3"],
        },
    )
    assert cfg.broker_service_port is None and cfg.tls_enabled


def test_admin_cli_over_https(tls_broker: BrokerThread, certs: Certs, other: Certs) -> None:
    from click.testing import CliRunner

    from magnetar.cli import main

    assert tls_broker.service is not None
    url = tls_broker.service.web_service_url_tls

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["admin", "--admin-url", url, *args, "tenants", "list"])

    ok = run("--tls-trust-cert-path", certs.ca, "--tls-enable-hostname-verification")
    assert ok.exit_code == 0 and "public" in ok.output, ok.output
    assert run("--tls-trust-cert-path", other.ca).exit_code == 1  # untrusted: cannot reach
    assert run("--tls-allow-insecure").exit_code == 0
    bad = run("--tls-trust-cert-path", "/nonexistent/ca.pem")
    assert bad.exit_code == 2 and "--tls-trust-cert-path" in bad.output
