"""HTTP basic authentication (the ``basic`` provider, Pulsar's AuthenticationProviderBasic): htpasswd
users on the Pulsar protocol (the official client's AuthenticationBasic) and the admin REST
(``Authorization: Basic``)."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest

from broker.auth import AuthenticationError, AuthenticationService, BasicAuthenticationProvider, apr1_hash
from magnetar.common.config import ConfigError
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.broker_thread import BrokerThread
from tests.support.raw_pulsar import RawPeer

from .basic_auth import DOC_LINE, basic_auth_config, basic_client, htpasswd_file


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(basic_auth_config(htpasswd_file(tmp_path_factory.mktemp("basic"))), admin=True) as b:
        yield b


def test_apr1_matches_the_documented_hash_and_openssl() -> None:
    assert apr1_hash("admin", "GBIYZYFZ") == DOC_LINE.split(":", 1)[1]
    if shutil.which("openssl"):
        for password, salt in (("", "abc"), ("a" * 40, "saltsalt"), ("pässwörd", "Zz./09")):
            out = subprocess.run(
                ["openssl", "passwd", "-apr1", "-salt", salt, password], capture_output=True, text=True, check=True
            ).stdout.strip()
            assert apr1_hash(password, salt) == out


def test_provider_checks_passwords(tmp_path: Path) -> None:
    provider = BasicAuthenticationProvider(htpasswd_file(tmp_path).read_text())
    assert provider.authenticate(b"superuser:admin").role == "superuser"
    assert provider.authenticate(b"shauser:sha-secret").role == "shauser"
    assert provider.authenticate(b"app:app-secret").method == "basic"
    for bad in (b"superuser:wrong", b"ghost:admin", b"no-colon", b":admin"):
        with pytest.raises(AuthenticationError):
            provider.authenticate(bad)
    try:  # DES crypt (`htpasswd -d`) while Python has its crypt module
        crypt_provider = BasicAuthenticationProvider("des:abOV.DfJmdnYw\n")
    except ConfigError as exc:
        assert "crypt module" in str(exc)
    else:
        assert crypt_provider.authenticate(b"des:admin").role == "des"
        with pytest.raises(AuthenticationError):
            crypt_provider.authenticate(b"des:admim")
    with pytest.raises(ConfigError, match="bcrypt") as e:
        BasicAuthenticationProvider("u:$2y$05$abcdefghijklmnopqrstuu5s2v8.8wq0Z5lP1Zx3P8fT2rQGv5xGm")
    assert e.value.key == "basic_auth_conf"
    with pytest.raises(ConfigError) as e:
        AuthenticationService(basic_auth_config(tmp_path / "missing"))
    assert e.value.key == "basic_auth_conf"
    # basicAuthConf may also be the file's contents in base64, as in Pulsar
    b64 = base64.b64encode(f"{DOC_LINE}\n".encode()).decode()
    service = AuthenticationService(basic_auth_config(tmp_path, basic_auth_conf=b64))
    header = "Basic " + base64.b64encode(b"superuser:admin").decode()
    assert service.authenticate_http(header).role == "superuser"


def test_protocol_basic_auth_with_the_official_client(broker: BrokerThread) -> None:
    admin = httpx.Client(base_url=broker.http, auth=("superuser", "admin"), timeout=10)
    assert (
        admin.post("/admin/v2/namespaces/public/default/permissions/app", json=["produce", "consume"]).status_code
        == 204
    )
    topic = "persistent://public/default/basic-auth"
    c = basic_client(broker, "app", "app-secret")
    try:
        consumer = c.subscribe(topic, "s")
        c.create_producer(topic).send(b"basic")
        assert consumer.receive(10_000).data() == b"basic"
    finally:
        c.close()
    c = basic_client(broker, "shauser", "sha-secret")
    try:  # authenticated, no permission
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer(topic)
    finally:
        c.close()
    c = basic_client(broker, "app", "wrong", timeout_s=2)
    try:
        with pytest.raises(pulsar.PulsarException):
            c.create_producer(topic)
    finally:
        c.close()
    peer = RawPeer(broker.port)  # on the wire: ERROR AuthenticationError, then closed
    try:
        peer.send(
            "CONNECT", client_version="raw", protocol_version=20, auth_method_name="basic", auth_data=b"app:wrong"
        )
        answers = peer.recv_until_closed()
    finally:
        peer.close()
    assert [a.type for a in answers] == [pb.BaseCommand.ERROR]
    assert answers[0].error.error == pb.AuthenticationError


def test_admin_rest_basic_auth(broker: BrokerThread) -> None:
    with httpx.Client(base_url=broker.http, timeout=10) as http:
        assert http.get("/admin/v2/tenants", auth=("superuser", "admin")).status_code == 200
        assert http.get("/admin/v2/tenants", auth=("app", "app-secret")).status_code == 403
        r = http.get("/admin/v2/tenants", auth=("superuser", "wrong"))
        assert r.status_code == 401 and "reason" in r.json()
        assert http.get("/admin/v2/tenants").status_code == 401


def test_admin_cli_with_pulsar_admins_basic_plugin(broker: BrokerThread) -> None:
    from click.testing import CliRunner

    from magnetar.cli import main

    runner = CliRunner()
    base = [
        "admin",
        "--admin-url",
        broker.http,
        "--auth-plugin",
        "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
    ]
    r = runner.invoke(main, [*base, "--auth-params", '{"userId":"superuser","password":"admin"}', "tenants", "list"])
    assert r.exit_code == 0 and "public" in r.output, r.output
    r = runner.invoke(main, [*base, "--auth-params", '{"userId":"superuser","password":"nope"}', "tenants", "list"])
    assert r.exit_code == 1 and "401" in r.output
    r = runner.invoke(main, [*base, "--auth-params", "token:abc", "tenants", "list"])
    assert r.exit_code == 2 and "userId" in r.output
