"""The broker's own client to the other brokers (broker.cluster._broker_client): Pulsar's brokerClient*
keys parsed into credentials and a transport, bad keys refused by name, and the start-up check
that the broker's own role would be accepted (a super user) by the brokers it calls."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from broker import BrokerConfig
from broker.auth import AuthenticationService, AuthorizationService, create_token
from broker.cluster._broker_client import BrokerClient, own_role_problem, parse_plugin
from magnetar.common.config import ConfigError
from tests.support.certs import make_certs

SECRET = b"0123456789abcdef0123456789abcdef"
SECRET_KEY = "data:;base64," + base64.b64encode(SECRET).decode()


def _cfg(**kw: Any) -> BrokerConfig:
    return BrokerConfig(**kw)


def _token(subject: str) -> str:
    return create_token(subject=subject, secret_key=SECRET)


def test_plugin_names_short_and_pulsar_classes() -> None:
    assert parse_plugin("") == ""
    assert parse_plugin("token") == "token"
    assert parse_plugin("org.apache.pulsar.client.impl.auth.AuthenticationToken") == "token"
    assert parse_plugin("org.apache.pulsar.client.impl.auth.AuthenticationTls") == "tls"
    assert parse_plugin("org.apache.pulsar.client.impl.auth.AuthenticationBasic") == "basic"
    with pytest.raises(ConfigError, match="unknown plugin"):
        parse_plugin("kerberos")


def test_token_inline_and_file_read_at_each_call(tmp_path: Path) -> None:
    inline = BrokerClient(
        _cfg(broker_client_authentication_plugin="token", broker_client_authentication_parameters="token:abc.def.ghi")
    )
    assert inline.headers() == {"Authorization": "Bearer abc.def.ghi"}
    path = tmp_path / "broker.token"
    path.write_text("first\n")
    from_file = BrokerClient(
        _cfg(broker_client_authentication_plugin="token", broker_client_authentication_parameters=f"file://{path}")
    )
    assert from_file.authorization() == "Bearer first"
    path.write_text("rotated")  # a rotated token is used by the next call, no restart
    assert from_file.authorization() == "Bearer rotated"


def test_basic_and_no_credentials() -> None:
    basic = BrokerClient(
        _cfg(
            broker_client_authentication_plugin="basic",
            broker_client_authentication_parameters='{"userId": "broker", "password": "pw"}',
        )
    )
    assert basic.authorization() == "Basic " + base64.b64encode(b"broker:pw").decode()
    none = BrokerClient(_cfg())
    assert none.method == "" and none.headers() == {}


@pytest.mark.parametrize(
    ("plugin", "params", "key", "message"),
    [
        ("token", "", "broker_client_authentication_parameters", "token:<jwt> or file"),
        ("token", "token:", "broker_client_authentication_parameters", "empty"),
        ("token", "file:///nonexistent/broker.token", "broker_client_authentication_parameters", "does not exist"),
        ("basic", '{"userId": "x"}', "broker_client_authentication_parameters", "userId"),
        ("tls", "tlsCertFile:/x", "broker_client_authentication_parameters", "tlsKeyFile"),
        ("", "token:abc", "broker_client_authentication_plugin", "no plugin"),
        ("basic", "{not json", "broker_client_authentication_parameters", "JSON"),
    ],
)
def test_bad_keys_are_refused_by_name(plugin: str, params: str, key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        BrokerClient(_cfg(broker_client_authentication_plugin=plugin, broker_client_authentication_parameters=params))
    assert info.value.key == key


def test_tls_transport_and_admin_url_choice(tmp_path: Path) -> None:
    certs = make_certs(tmp_path, clients=("broker",))
    cert, key = certs.clients["broker"]
    info = {"httpUrl": "http://h:8080", "httpUrlTls": "https://h:8443"}
    plain = BrokerClient(_cfg())
    assert plain.admin_url(info) == "http://h:8080"
    assert plain.admin_url({"httpUrlTls": "https://h:8443"}) == "https://h:8443"  # the only one it has
    secure = BrokerClient(
        _cfg(
            broker_client_tls_enabled=True,
            broker_client_trust_certs_file_path=certs.ca,
            broker_client_authentication_plugin="tls",
            broker_client_authentication_parameters=f"tlsCertFile:{cert},tlsKeyFile:{key}",
        )
    )
    assert secure.admin_url(info) == "https://h:8443"
    assert secure.headers() == {}  # the certificate is the credential
    with pytest.raises(ConfigError) as bad:
        BrokerClient(
            _cfg(broker_client_tls_enabled=True, broker_client_trust_certs_file_path=str(tmp_path / "missing.pem"))
        )
    assert bad.value.key == "brokerClientTrustCertsFilePath"


def _services(cfg: BrokerConfig) -> tuple[AuthenticationService, AuthorizationService]:
    return AuthenticationService(cfg), AuthorizationService(cfg, None)  # type: ignore[arg-type]


def test_own_role_must_be_accepted_and_a_super_user(tmp_path: Path) -> None:
    secured: dict[str, Any] = {
        "authentication_enabled": True,
        "authentication_providers": ("token",),
        "token_secret_key": SECRET_KEY,
        "authorization_enabled": True,
        "super_user_roles": ("admin", "broker"),
    }
    cfg = _cfg(**secured)
    assert "brokerClientAuthenticationPlugin is not set" in (own_role_problem(BrokerClient(cfg), *_services(cfg)) or "")

    def problem(token: str) -> str | None:
        c = _cfg(
            **secured,
            broker_client_authentication_plugin="token",
            broker_client_authentication_parameters=f"token:{token}",
        )
        return own_role_problem(BrokerClient(c), *_services(c))

    assert problem(_token("broker")) is None
    not_super = problem(_token("app"))
    assert not_super is not None and "'app' is not in superUserRoles" in not_super
    forged = problem(create_token(subject="broker", secret_key=b"another-secret-another-secret-xx"))
    assert forged is not None and "refused" in forged

    certs = make_certs(tmp_path, clients=("broker",))
    cert, key = certs.clients["broker"]
    params = {
        "broker_client_authentication_plugin": "tls",
        "broker_client_authentication_parameters": f"tlsCertFile:{cert},tlsKeyFile:{key}",
    }
    c = _cfg(**secured, **params)
    no_tls_provider = own_role_problem(BrokerClient(c), *_services(c))
    assert no_tls_provider is not None and "tls provider" in no_tls_provider
    c = _cfg(**{**secured, "authentication_providers": ("token", "tls")}, tls_trust_certs_file_path=certs.ca, **params)
    assert own_role_problem(BrokerClient(c), *_services(c)) is None  # CN=broker, a super user
    off = _cfg()
    assert own_role_problem(BrokerClient(off), *_services(off)) is None  # authentication off: nothing to present
