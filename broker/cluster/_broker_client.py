"""The broker's own client to the other brokers of a cluster (Pulsar's ``brokerClient*`` keys).

Every broker-to-broker HTTP call goes through `BrokerClient`: the admin REST's namespace-unload
fan-out to each bundle's owner and the load-manager leader's unload and split requests. With
authentication on, the other broker refuses a call without credentials (401), so the caller
presents its own: ``brokerClientAuthenticationPlugin`` and ``brokerClientAuthenticationParameters``.

Rules:

* Credentials: the ``token`` plugin sends ``Authorization: Bearer <jwt>`` (``token:<jwt>``, or
  ``file:///path`` read at each call so a rotated token is picked up); ``basic`` sends
  ``Authorization: Basic``; ``tls`` presents a client certificate (its ``tlsCertFile`` and
  ``tlsKeyFile``) on the https admin port. No plugin: no credentials (authentication off).
* The broker's role (the token's subject, the certificate's CN, the basic user) must be one of
  the other brokers' ``superUserRoles``, as in Pulsar: a broker unloads and splits bundles of every
  tenant. `own_role_problem` says at start when it is not.
* Transport: ``brokerClientTlsEnabled`` selects each broker's https admin URL (``httpUrlTls``) and
  checks its certificate against ``brokerClientTrustCertsFilePath`` (else
  ``tlsTrustCertsFilePath``, else the system CAs), with the host name too when
  ``tlsHostnameVerificationEnabled``; ``tlsAllowInsecureConnection`` skips the check. Off: the
  plain admin URL (``httpUrl``), falling back to the https one when a broker has only that.
* Calls go through `magnetar.common.admin_client`: a 307 answer (the bundle moved meanwhile) is
  followed with the same credentials, 5 hops at most, and an answer outside 2xx raises its
  `AdminError` with the other broker's reason.
* Bad keys raise `ConfigError` naming the key when the service is built, not at the first call.
"""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from magnetar.common.admin_client import AsyncAdminClient
from magnetar.common.config import ConfigError
from magnetar.common.tls import PULSAR_KEYS, TlsKeys, TlsSettings, client_context

from ..auth import AuthenticationError

if TYPE_CHECKING:
    from .._config import BrokerConfig
    from ..auth import AuthenticationService, AuthorizationService

__all__ = ["BrokerClient", "own_role_problem", "parse_plugin"]

_PLUGINS = {
    "token": "token",
    "authenticationtoken": "token",
    "tls": "tls",
    "authenticationtls": "tls",
    "basic": "basic",
    "authenticationbasic": "basic",
}

_KEYS = TlsKeys(
    cert_file="brokerClientCertificateFilePath",
    key_file="brokerClientKeyFilePath",
    trust_certs_file="brokerClientTrustCertsFilePath",
    require_client_cert=PULSAR_KEYS.require_client_cert,
    allow_insecure="tlsAllowInsecureConnection",
    protocols="brokerClient_tlsProtocols",
    ciphers="brokerClient_tlsCiphers",
)

_PLUGIN_KEY = "broker_client_authentication_plugin"
_PARAMS_KEY = "broker_client_authentication_parameters"


def parse_plugin(plugin: str) -> str:
    """``"token"``, ``"tls"``, ``"basic"`` or ``""`` for a plugin name (short or Pulsar's class)."""
    name = plugin.strip().rsplit(".", 1)[-1].lower()
    if not name:
        return ""
    if name not in _PLUGINS:
        raise ConfigError(
            _PLUGIN_KEY,
            f"unknown plugin {plugin!r}: use token, tls or basic "
            "(or org.apache.pulsar.client.impl.auth.AuthenticationToken / "
            "AuthenticationTls / AuthenticationBasic)",
        )
    return _PLUGINS[name]


def _param_map(params: str) -> dict[str, str]:
    """Pulsar's two spellings of plugin parameters: a JSON object or ``key:value,key:value``."""
    text = params.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(_PARAMS_KEY, f"not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ConfigError(_PARAMS_KEY, "the JSON must be an object")
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition(":")
        if not sep:
            raise ConfigError(_PARAMS_KEY, f"{item!r} is not key:value")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class _Credentials:
    method: str  # "", "token", "tls", "basic"
    token: str = ""  # token:<jwt> value, or "" when read from token_file
    token_file: str = ""
    basic: str = ""  # user:password
    cert_file: str = ""
    key_file: str = ""


def _credentials(config: BrokerConfig) -> _Credentials:
    method = parse_plugin(config.broker_client_authentication_plugin)
    params = config.broker_client_authentication_parameters.strip()
    if method == "token":
        if params.startswith("token:"):
            token = params[len("token:") :].strip()
            if not token:
                raise ConfigError(_PARAMS_KEY, "token: is empty")
            return _Credentials(method, token=token)
        if params.startswith("file:"):
            path = params[len("file://") :] if params.startswith("file://") else params[len("file:") :]
            if not Path(path).is_file():
                raise ConfigError(_PARAMS_KEY, f"token file {path} does not exist")
            return _Credentials(method, token_file=path)
        if params.startswith("{"):
            token = _param_map(params).get("token", "")
            if token:
                return _Credentials(method, token=token)
        raise ConfigError(_PARAMS_KEY, "the token plugin needs token:<jwt> or file:///path/to/token")
    if method == "basic":
        if params.startswith("{"):
            m = _param_map(params)
            user, password = m.get("userId", ""), m.get("password", "")
        else:
            user, _, password = params.partition(":")
        if not user or not password:
            raise ConfigError(_PARAMS_KEY, 'the basic plugin needs {"userId": ..., "password": ...}')
        return _Credentials(method, basic=f"{user}:{password}")
    if method == "tls":
        m = _param_map(params)
        cert = m.get("tlsCertFile", "") or config.broker_client_certificate_file_path
        key = m.get("tlsKeyFile", "") or config.broker_client_key_file_path
        if not cert or not key:
            raise ConfigError(
                _PARAMS_KEY,
                "the tls plugin needs tlsCertFile:/path,tlsKeyFile:/path "
                "(or brokerClientCertificateFilePath and brokerClientKeyFilePath)",
            )
        return _Credentials(method, cert_file=cert, key_file=key)
    if params:
        raise ConfigError(_PLUGIN_KEY, "brokerClientAuthenticationParameters is set but no plugin is")
    return _Credentials("")


class BrokerClient:
    """HTTP calls from this broker to the other brokers of its cluster (see the module rules).

    Built from the broker config (`ConfigError` for bad ``brokerClient*`` keys); `request` sends
    one call with this broker's credentials over the transport the config chooses.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.credentials = _credentials(config)
        self.tls_enabled = config.broker_client_tls_enabled
        cert = config.broker_client_certificate_file_path or self.credentials.cert_file
        key = config.broker_client_key_file_path or self.credentials.key_file
        self._settings = TlsSettings(
            cert_file=cert,
            key_file=key,
            trust_certs_file=config.broker_client_trust_certs_file_path or config.tls_trust_certs_file_path,
            allow_insecure=config.tls_allow_insecure_connection,
            protocols=config.broker_client_tls_protocols,
            ciphers=config.broker_client_tls_ciphers,
            keys=_KEYS,
        )
        # built now: a missing or broken file is refused at start, naming its key
        self._ssl: ssl.SSLContext = client_context(
            self._settings, verify_hostname=config.tls_hostname_verification_enabled
        )
        self._admin = AsyncAdminClient(verify=self._ssl)

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of this broker's calls (its ``brokerClient*`` TLS settings), also used
        by geo-replication's connections to remote brokers."""
        return self._ssl

    @property
    def method(self) -> str:
        """The authentication plugin in use: "token", "tls", "basic" or "" (none)."""
        return self.credentials.method

    def authorization(self) -> str | None:
        """The ``Authorization`` header value this broker sends (None: none, or tls)."""
        c = self.credentials
        if c.method == "token":
            token = c.token
            if c.token_file:
                try:
                    token = Path(c.token_file).read_text().strip()
                except OSError as exc:  # rotated away: the call goes without and is refused clearly
                    raise AuthenticationError(f"cannot read the broker client token {c.token_file}: {exc}") from None
            return f"Bearer {token}"
        if c.method == "basic":
            return "Basic " + base64.b64encode(c.basic.encode()).decode()
        return None

    def admin_url(self, info: dict[str, Any]) -> str:
        """The admin URL to call a broker on, from its owner node or load report ('' if none)."""
        plain = str(info.get("httpUrl") or info.get("webServiceUrl") or "")
        tls = str(info.get("httpUrlTls") or info.get("webServiceUrlTls") or "")
        return (tls or plain) if self.tls_enabled else (plain or tls)

    def headers(self) -> dict[str, str]:
        """The headers of every call (the credentials)."""
        value = self.authorization()
        return {"Authorization": value} if value else {}

    async def request(self, method: str, url: str, body: Any = None, *, timeout_s: float = 60.0) -> httpx.Response:
        """Send ``method url`` (``body`` as JSON) with this broker's credentials and return the 2xx
        answer, redirects followed (module rules). Raises `AdminError` (status 0: unreachable) and
        `AuthenticationError` when the token file cannot be read."""
        return await self._admin.request(method, url, body, headers=self.headers(), timeout_s=timeout_s)


def own_role_problem(client: BrokerClient, auth: AuthenticationService, authz: AuthorizationService) -> str | None:
    """Why this broker's calls to the other brokers would be refused (None: they are accepted).

    Checked against this broker's own authentication and authorization settings, which a cluster's
    brokers share: with authentication on, the broker client needs credentials this broker accepts;
    with authorization on, their role must be a super user (Pulsar's rule)."""
    if not auth.enabled:
        return None
    cfg = client.config
    if not client.method:
        return (
            "authentication is on but brokerClientAuthenticationPlugin is not set: the other brokers refuse "
            "this broker's namespace-unload fan-out and the leader's unloads and splits (401)"
        )
    try:
        if client.method == "tls":
            if "tls" not in auth.providers:
                raise AuthenticationError("the tls provider is not in authenticationProviders")
            role = _cert_role(client.credentials.cert_file or cfg.broker_client_certificate_file_path)
        else:
            role = auth.authenticate_http(client.authorization()).role
    except (AuthenticationError, OSError, ValueError) as exc:
        return f"the broker client's credentials (brokerClientAuthenticationParameters) are refused: {exc}"
    if authz.enabled and not authz.is_super_user(role):
        return (
            f"the broker client's role {role!r} is not in superUserRoles: the other brokers refuse "
            "its unloads and splits (403); add it to superUserRoles"
        )
    return None


def _cert_role(path: str) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        raise ValueError(f"{path} has no common name")
    return str(names[0].value)
