"""Standalone with token authentication and authorization, set up as the README shows: keys and
tokens from ``magnetar tokens``, the broker keys on the command line, the official client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pulsar
import pytest

from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow


def _magnetar(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_standalone_with_tokens(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    _magnetar("tokens", "create-secret-key", "--output", str(key))
    admin_token = _magnetar("tokens", "create", "--secret-key", f"file://{key}", "--subject", "admin")
    app_token = _magnetar(
        "tokens", "create", "--secret-key", f"file://{key}", "--subject", "app", "--expiry-time", "1h"
    )
    s = start_standalone(
        tmp_path / "data",
        "--set",
        "broker.authenticationEnabled=true",
        "--set",
        "broker.authenticationProviders=token",
        "--set",
        f"broker.tokenSecretKey=file://{key}",
        "--set",
        "broker.authorizationEnabled=true",
        "--set",
        "broker.superUserRoles=admin",
    )
    try:
        assert httpx.get(f"{s.admin_url}/admin/v2/tenants", timeout=10).status_code == 401
        admin = httpx.Client(base_url=s.admin_url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=10)
        assert admin.get("/admin/v2/tenants").json() == ["public"]
        r = admin.post("/admin/v2/namespaces/public/default/permissions/app", json=["produce", "consume"])
        assert r.status_code == 204, r.text

        client = pulsar.Client(
            s.service_url, authentication=pulsar.AuthenticationToken(app_token), operation_timeout_seconds=10
        )
        try:
            consumer = client.subscribe("secured", "sub")
            client.create_producer("secured").send(b"hello")
            assert consumer.receive(10000).data() == b"hello"
        finally:
            client.close()

        anonymous = pulsar.Client(s.service_url, operation_timeout_seconds=3)
        try:
            with pytest.raises(pulsar.PulsarException):
                anonymous.create_producer("secured")
        finally:
            anonymous.close()
    finally:
        assert s.stop() == 0, s.log()
