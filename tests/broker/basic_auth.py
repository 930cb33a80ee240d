"""The basic-authentication set-up the broker's basic-auth tests share: an htpasswd file, a broker
config that uses it, and an official client that authenticates with it."""

from __future__ import annotations

import base64
import hashlib
import logging
from pathlib import Path

import pulsar

from broker import BrokerConfig
from broker.auth import apr1_hash
from tests.support.broker_thread import BrokerThread

__all__ = ["DOC_LINE", "SHA_LINE", "basic_auth_config", "basic_client", "htpasswd_file"]

# Pulsar's documentation example: `htpasswd -cmb .htpasswd superuser admin`
DOC_LINE = "superuser:$apr1$GBIYZYFZ$MzLcPrvoUky16mLcK6UtX/"
SHA_LINE = "shauser:{SHA}" + base64.b64encode(hashlib.sha1(b"sha-secret").digest()).decode()


def htpasswd_file(tmp: Path) -> Path:
    """An htpasswd file with users superuser (Pulsar's documented line), shauser ({SHA}) and app (apr1)."""
    path = tmp / ".htpasswd"
    path.write_text(f"# users\n{DOC_LINE}\n{SHA_LINE}\napp:{apr1_hash('app-secret', 'x1y2z3w4')}\n")
    return path


def basic_auth_config(htpasswd: Path, **extra: object) -> BrokerConfig:
    """A broker config with the basic provider on ``htpasswd``, authorization on, superuser a super user."""
    keys: dict[str, object] = dict(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        authentication_enabled=True,
        authentication_providers=("org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",),
        basic_auth_conf=f"file://{htpasswd}",
        authorization_enabled=True,
        super_user_roles=("superuser",),
    )
    keys.update(extra)
    return BrokerConfig(**keys)  # type: ignore[arg-type]


def basic_client(b: BrokerThread, user: str, password: str, timeout_s: int = 10) -> pulsar.Client:
    """An official client on ``b`` authenticated as ``user``."""
    return pulsar.Client(
        b.url,
        authentication=pulsar.AuthenticationBasic(user, password),
        operation_timeout_seconds=timeout_s,
        logger=logging.getLogger("pulsar-client"),
    )
