"""The broker's authentication service: the configured providers, asked by the protocol and REST.

Rules:

* Off (``authenticationEnabled = false``, the default): every client is accepted without a role.
* On: a CONNECT must name a configured auth method (``auth_method_name``) and carry credentials
  that method accepts (the ``tls`` method: the client certificate verified on the TLS port); a
  REST request must carry ``Authorization: Bearer <token>`` (answered by the ``token`` provider)
  or ``Authorization: Basic <base64 user:password>`` (the ``basic`` provider) or, with the
  ``tls`` provider on, come over https with a verified client certificate (used when no
  ``Authorization`` header is sent). Without credentials the ``anonymousUserRole`` is used when
  one is set, else the request is refused.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.common.config import ConfigError

from ._basic import BasicAuthenticationProvider
from ._provider import (
    AuthenticationError,
    AuthenticationProvider,
    Identity,
    PeerCert,
    TlsAuthenticationProvider,
    TokenAuthenticationProvider,
)

if TYPE_CHECKING:
    from .._config import BrokerConfig

__all__ = ["AuthenticationService", "PROVIDER_ALIASES", "provider_method"]

PROVIDER_ALIASES: dict[str, str] = {
    "token": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "tls": "tls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
    "basic": "basic",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
}
"""``authenticationProviders`` entries -> auth method name."""

_PROVIDERS: dict[str, Callable[[BrokerConfig], AuthenticationProvider]] = {
    "token": TokenAuthenticationProvider.from_config,
    "tls": TlsAuthenticationProvider.from_config,
    "basic": BasicAuthenticationProvider.from_config,
}


def provider_method(entry: str) -> str | None:
    """The auth method an ``authenticationProviders`` entry names, or None when unknown."""
    return PROVIDER_ALIASES.get(entry.strip())


class AuthenticationService:
    """The providers ``config`` enables (see the module rules). Raises `ConfigError` for bad keys."""

    def __init__(self, config: BrokerConfig, providers: list[AuthenticationProvider] | None = None) -> None:
        self.enabled = config.authentication_enabled
        self.anonymous_role = config.anonymous_user_role or None
        self.providers: dict[str, AuthenticationProvider] = {}
        if providers is not None:
            self.providers = {p.name: p for p in providers}
        elif self.enabled:
            for entry in config.authentication_providers:
                method = provider_method(entry)
                if method is None:
                    raise ConfigError("authentication_providers", f"unknown provider {entry!r}")
                self.providers[method] = _PROVIDERS[method](config)

    def authenticate(self, method: str, auth_data: bytes, *, peer_cert: PeerCert | None = None) -> Identity:
        """The identity of a client that sent ``auth_data`` for auth method ``method`` (over a TLS
        connection whose verified client certificate is ``peer_cert``, if any)."""
        if not method and not auth_data:
            if self.anonymous_role:
                return Identity(role=self.anonymous_role, method="anonymous")
            raise AuthenticationError("authentication is required and the client sent no credentials")
        provider = self.providers.get(method)
        if provider is None:
            raise AuthenticationError(
                f"authentication method {method!r} is not enabled on this broker "
                f"(enabled: {', '.join(sorted(self.providers)) or 'none'})"
            )
        return provider.authenticate(auth_data, peer_cert=peer_cert)

    def authenticate_http(self, authorization: str | None, *, peer_cert: PeerCert | None = None) -> Identity:
        """The identity of a REST request whose ``Authorization`` header is ``authorization`` (sent
        over https with the verified client certificate ``peer_cert``, if any)."""
        if not authorization:
            if peer_cert and "tls" in self.providers:
                return self.authenticate("tls", b"", peer_cert=peer_cert)
            return self.authenticate("", b"")
        scheme, _, credentials = authorization.strip().partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "basic" and credentials:
            try:
                decoded = base64.b64decode(credentials, validate=True)
            except ValueError:
                raise AuthenticationError("the Basic credentials are not base64") from None
            return self.authenticate("basic", decoded)
        if scheme.lower() != "bearer" or not credentials:
            raise AuthenticationError("the Authorization header must be 'Bearer <token>' or 'Basic <credentials>'")
        return self.authenticate("token", credentials.encode())
