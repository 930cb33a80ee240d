"""mTLS authentication (the ``tls`` provider, Pulsar's AuthenticationProviderTls): the role is the
client certificate's CN, on the Pulsar protocol (the official client's AuthenticationTLS over
pulsar+ssl://) and on the admin REST (a client certificate on the https port)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator

import httpx
import pulsar
import pytest

from broker import BrokerConfig
from broker.auth import AuthenticationError, AuthenticationService, TlsAuthenticationProvider, certificate_common_name
from magnetar.common.config import ConfigError
from tests.support.broker_thread import BrokerThread
from tests.support.certs import Certs, make_certs

ROLES = ("admin", "app", "nobody")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"), clients=ROLES)


def _config(certs: Certs, **kw: object) -> BrokerConfig:
    keys: dict[str, object] = dict(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=None,
        web_service_port=None,
        broker_service_port_tls=0,
        web_service_port_tls=0,
        tls_certificate_file_path=certs.server_cert,
        tls_key_file_path=certs.server_key,
        tls_trust_certs_file_path=certs.ca,
        authentication_enabled=True,
        authentication_providers=("org.apache.pulsar.broker.authentication.AuthenticationProviderTls",),
        authorization_enabled=True,
        super_user_roles=("admin",),
    )
    keys.update(kw)
    return BrokerConfig(**keys)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def broker(certs: Certs) -> Iterator[BrokerThread]:
    with BrokerThread(_config(certs), admin=True) as b:
        yield b


def _client(b: BrokerThread, certs: Certs, role: str | None, timeout_s: int = 10) -> pulsar.Client:
    assert b.service is not None
    auth = pulsar.AuthenticationTLS(*certs.clients[role]) if role is not None else None
    return pulsar.Client(
        b.service.service_url_tls,
        tls_trust_certs_file_path=certs.ca,
        authentication=auth,
        operation_timeout_seconds=timeout_s,
        logger=logging.getLogger("pulsar-client"),
    )


def _http(certs: Certs, role: str | None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=certs.ca)
    if role is not None:
        ctx.load_cert_chain(*certs.clients[role])
    return httpx.Client(verify=ctx, timeout=10)


def test_admin_rest_role_is_the_certificate_cn(broker: BrokerThread, certs: Certs) -> None:
    assert broker.service is not None
    base = broker.service.web_service_url_tls
    with _http(certs, "admin") as admin:
        assert admin.get(f"{base}/admin/v2/tenants").status_code == 200
        r = admin.post(f"{base}/admin/v2/namespaces/public/default/permissions/app", json=["produce", "consume"])
        assert r.status_code == 204, r.text
    with _http(certs, "app") as app:  # authenticated, but not a super user
        r = app.get(f"{base}/admin/v2/tenants")
        assert r.status_code == 403 and "'app'" in r.json()["reason"]
    with _http(certs, None) as anonymous:
        r = anonymous.get(f"{base}/admin/v2/tenants")
        assert r.status_code == 401 and "reason" in r.json()
        assert anonymous.get(f"{base}/metrics").status_code == 200


def test_protocol_role_is_the_certificate_cn(broker: BrokerThread, certs: Certs) -> None:
    assert broker.service is not None
    with _http(certs, "admin") as admin:
        r = admin.post(
            f"{broker.service.web_service_url_tls}/admin/v2/namespaces/public/default/permissions/app",
            json=["produce", "consume"],
        )
        assert r.status_code == 204, r.text
    topic = "persistent://public/default/mtls-role"
    c = _client(broker, certs, "app")
    try:
        consumer = c.subscribe(topic, "s")
        c.create_producer(topic).send(b"by-cn")
        assert consumer.receive(10_000).data() == b"by-cn"
        roles = {conn.auth_session.role for conn in broker.service.connections if conn.auth_session.role}
        assert roles == {"app"}
    finally:
        c.close()
    c = _client(broker, certs, "nobody")
    try:  # authenticated as "nobody", which has no permission: refused, and the connection stays
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            c.subscribe(topic, "s2")
    finally:
        c.close()


def test_a_client_without_a_certificate_is_refused(broker: BrokerThread, certs: Certs) -> None:
    c = _client(broker, certs, None, timeout_s=2)
    try:
        with pytest.raises(pulsar.PulsarException):
            c.create_producer("persistent://public/default/mtls-anonymous")
    finally:
        c.close()


def test_provider_unit_and_config_errors(certs: Certs) -> None:
    cert = {"subject": ((("countryName", "US"),), (("commonName", "svc-a"),))}
    assert certificate_common_name(cert) == "svc-a"
    provider = TlsAuthenticationProvider()
    identity = provider.authenticate(b"", peer_cert=cert)
    assert (identity.role, identity.method, identity.expires_at) == ("svc-a", "tls", None)
    with pytest.raises(AuthenticationError):
        provider.authenticate(b"")
    with pytest.raises(AuthenticationError, match="common name"):
        provider.authenticate(b"", peer_cert={"subject": ((("organizationName", "x"),),)})
    with pytest.raises(ConfigError) as e:
        AuthenticationService(_config(certs, tls_trust_certs_file_path=""))
    assert e.value.key == "tls_trust_certs_file_path"
    with pytest.raises(ConfigError) as e:
        AuthenticationService(_config(certs, tls_allow_insecure_connection=True))
    assert e.value.key == "tls_allow_insecure_connection"
    service = AuthenticationService(_config(certs, authentication_providers=("tls",)))
    assert service.authenticate_http(None, peer_cert=cert).role == "svc-a"
    with pytest.raises(AuthenticationError):
        service.authenticate_http(None)
