"""The admin REST API with authentication (and authorization) on: bearer tokens, 401 and 403."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner

from broker import BrokerConfig
from broker.auth import create_token, new_secret_key
from magnetar.cli import main
from tests.broker_admin.admin_harness import AdminBroker

SECRET = new_secret_key()


def _token(role: str, **kw: object) -> str:
    return create_token(role, secret_key=SECRET, **kw)  # type: ignore[arg-type]


def _config(**extra: object) -> BrokerConfig:
    keys: dict[str, object] = dict(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        authentication_enabled=True,
        authentication_providers=("token",),
        token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
    )
    keys.update(extra)
    return BrokerConfig(**keys)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def authn() -> Iterator[AdminBroker]:
    with AdminBroker(_config()) as b:
        yield b


def _get(b: AdminBroker, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(b.http + path, headers=headers, timeout=10)


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(None, id="missing"),
        pytest.param(_token("alice", expires_in_s=-5), id="expired"),
        pytest.param(create_token("alice", secret_key=new_secret_key()), id="forged"),
    ],
)
def test_requests_without_a_valid_token_get_401(authn: AdminBroker, token: str | None) -> None:
    r = _get(authn, "/admin/v2/tenants", token)
    assert r.status_code == 401
    assert r.json()["reason"]


def test_basic_auth_header_is_refused(authn: AdminBroker) -> None:
    # only the token provider is on: a Basic header names a method this broker does not offer
    r = httpx.get(authn.http + "/admin/v2/tenants", auth=("alice", "secret"), timeout=10)
    assert r.status_code == 401 and "'basic' is not enabled" in r.json()["reason"]


def test_a_valid_token_is_served_and_metrics_stay_open(authn: AdminBroker) -> None:
    r = _get(authn, "/admin/v2/tenants", _token("alice", expires_in_s=60))
    assert r.status_code == 200 and "public" in r.json()
    assert _get(authn, "/metrics").status_code == 200


def test_post_without_token_is_refused_before_the_body(authn: AdminBroker) -> None:
    r = httpx.put(authn.http + "/admin/v2/tenants/nobody", json={"adminRoles": []}, timeout=10)
    assert r.status_code == 401
    assert _get(authn, "/admin/v2/tenants/nobody", _token("alice")).status_code == 404


def test_admin_cli_sends_the_token(authn: AdminBroker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    base = ["admin", "--admin-url", authn.http]
    r = runner.invoke(main, [*base, "tenants", "list"])
    assert r.exit_code == 1 and "401" in r.output
    r = runner.invoke(main, [*base, "--token", _token("alice"), "tenants", "list"])
    assert r.exit_code == 0 and "public" in r.output
    r = runner.invoke(main, [*base, "tenants", "list"], env={"MAGNETAR_TOKEN": _token("alice")})
    assert r.exit_code == 0 and "public" in r.output
    token_file = tmp_path / "token"
    token_file.write_text(_token("alice") + "\n")
    r = runner.invoke(
        main,
        [
            *base,
            "--auth-plugin",
            "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "--auth-params",
            f"file://{token_file}",
            "tenants",
            "list",
        ],
    )
    assert r.exit_code == 0 and "public" in r.output
    r = runner.invoke(main, [*base, "--auth-params", "token:" + _token("alice"), "tenants", "list"])
    assert r.exit_code == 0
