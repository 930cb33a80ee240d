"""TLS and authentication options of the data source and sink, shared by the official client,
the admin REST calls and the bookie reads.

Option names follow the Pulsar Spark connector, which passes ``pulsar.client.*`` options to the
Pulsar client configuration (Pulsar's client key names):

* ``pulsar.client.authPluginClassName`` and ``pulsar.client.authParams``: Pulsar's plugin class
  (``org.apache.pulsar.client.impl.auth.AuthenticationToken`` / ``...AuthenticationTls`` /
  ``...AuthenticationBasic``, or the short ``token`` / ``tls`` / ``basic``) and its parameter
  string as Pulsar's clients take it: ``token:<jwt>`` or ``file:///path`` (the file is read each
  time a client is made, so a renewed token is picked up); ``tlsCertFile:/a.pem,tlsKeyFile:/b.pem``;
  ``{"userId": "u", "password": "p"}`` or ``u:p``.
* ``pulsar.client.tlsTrustCertsFilePath``, ``pulsar.client.tlsAllowInsecureConnection``,
  ``pulsar.client.tlsHostnameVerificationEnable``, and ``pulsar.client.tlsCertificateFilePath`` /
  ``pulsar.client.tlsKeyFilePath`` (a client certificate presented on every TLS connection).

The same settings secure the admin REST calls (https with the trusted CA and the client
certificate; ``Authorization: Bearer`` for a token, ``Basic`` for basic). Bookie reads
(``readMode=bookies``) take the BookKeeper client's keys as ``bookkeeper.<key>`` options (e.g.
``bookkeeper.tls_enabled``, ``bookkeeper.tlsTrustStore``, ``bookkeeper.tlsCertificatePath``,
``bookkeeper.tlsKeyStore``) and ZooKeeper's digest credential as ``metadata.zkDigestCredentials``.

Everything here is plain picklable values: executors rebuild the clients from it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ClientSecurity"]

_PLUGINS = {
    "token": "token",
    "org.apache.pulsar.client.impl.auth.authenticationtoken": "token",
    "tls": "tls",
    "org.apache.pulsar.client.impl.auth.authenticationtls": "tls",
    "basic": "basic",
    "org.apache.pulsar.client.impl.auth.authenticationbasic": "basic",
}
_PREFIX = "pulsar.client."


def _bool(key: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {key}: expected true or false, not {value!r}")


def _readable(key: str, path: str) -> str:
    if not Path(path).is_file():
        raise ValueError(f"option {key}: {path!r} is not a readable file")
    return path


def _params_map(key: str, params: str) -> dict[str, str]:
    """Pulsar's ``k1:v1,k2:v2`` parameter string (or its JSON form) as a dict."""
    text = params.strip()
    if text.startswith("{"):
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"option {key}: not valid JSON: {exc}") from None
        return {str(k): str(v) for k, v in body.items()}
    out = {}
    for part in text.split(","):
        k, sep, v = part.partition(":")
        if not sep:
            raise ValueError(f"option {key}: expected key:value pairs separated by commas, not {part!r}")
        out[k.strip()] = v.strip()
    return out


@dataclass(frozen=True)
class ClientSecurity:
    """The TLS and authentication settings of one source or sink (see the module docstring)."""

    auth_method: str = ""  # "", "token", "tls", "basic"
    token: str = ""  # the token itself, or "file:///path" read at use time
    basic_user: str = ""
    basic_password: str = ""
    auth_cert_file: str = ""  # AuthenticationTls's certificate and key
    auth_key_file: str = ""
    trust_certs_file: str = ""
    allow_insecure: bool = False
    verify_hostname: bool = False
    cert_file: str = ""  # a client certificate on every TLS connection (no auth plugin needed)
    key_file: str = ""

    @classmethod
    def parse(cls, opts: Mapping[str, str], prefix: str = _PREFIX) -> ClientSecurity:
        """From lower-cased options under ``prefix`` (``pulsar.client.``, or ``pulsar.admin.`` for
        the admin REST); ValueError naming the offending option."""

        def get(name: str) -> str:
            return str(opts.get((prefix + name).lower(), "")).strip()

        plugin_key, params_key = prefix + "authPluginClassName", prefix + "authParams"
        plugin, params = get("authPluginClassName"), get("authParams")
        fields: dict[str, Any] = {}
        if plugin:
            method = _PLUGINS.get(plugin.lower())
            if method is None:
                raise ValueError(
                    f"option {plugin_key}: {plugin!r} is not supported (AuthenticationToken, "
                    f"AuthenticationTls or AuthenticationBasic)"
                )
            if not params:
                raise ValueError(f"option {params_key}: {plugin} needs its parameters")
            fields["auth_method"] = method
            if method == "token":
                token = params[len("token:") :] if params.startswith("token:") else params
                if token.startswith("file://"):
                    _readable(params_key, token[len("file://") :])
                fields["token"] = token
            elif method == "tls":
                m = _params_map(params_key, params)
                if "tlsCertFile" not in m or "tlsKeyFile" not in m:
                    raise ValueError(f"option {params_key}: AuthenticationTls needs tlsCertFile and tlsKeyFile")
                fields["auth_cert_file"] = _readable(params_key, m["tlsCertFile"])
                fields["auth_key_file"] = _readable(params_key, m["tlsKeyFile"])
            else:
                if params.strip().startswith("{"):
                    m = _params_map(params_key, params)
                    user, password = m.get("userId", ""), m.get("password", "")
                else:
                    user, _, password = params.partition(":")
                if not user or not password:
                    raise ValueError(f"option {params_key}: AuthenticationBasic needs userId and password")
                fields["basic_user"], fields["basic_password"] = user, password
        elif params:
            raise ValueError(f"option {params_key} is set without {plugin_key}")
        if trust := get("tlsTrustCertsFilePath"):
            fields["trust_certs_file"] = _readable(prefix + "tlsTrustCertsFilePath", trust)
        if insecure := get("tlsAllowInsecureConnection"):
            fields["allow_insecure"] = _bool(prefix + "tlsAllowInsecureConnection", insecure)
        if verify := get("tlsHostnameVerificationEnable"):
            fields["verify_hostname"] = _bool(prefix + "tlsHostnameVerificationEnable", verify)
        cert, key = get("tlsCertificateFilePath"), get("tlsKeyFilePath")
        if bool(cert) != bool(key):
            raise ValueError(f"options {prefix}tlsCertificateFilePath and {prefix}tlsKeyFilePath go together")
        if cert:
            fields["cert_file"] = _readable(prefix + "tlsCertificateFilePath", cert)
            fields["key_file"] = _readable(prefix + "tlsKeyFilePath", key)
        return cls(**fields)

    def _token(self) -> str:
        if self.token.startswith("file://"):
            return Path(self.token[len("file://") :]).read_text().strip()
        return self.token

    def _client_cert(self) -> tuple[str, str] | None:
        if self.cert_file:
            return self.cert_file, self.key_file
        if self.auth_method == "tls":
            return self.auth_cert_file, self.auth_key_file
        return None

    def pulsar_client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``pulsar.Client`` (imports pulsar; call where a client is made)."""
        import pulsar

        kwargs: dict[str, Any] = {}
        if self.auth_method == "token":
            kwargs["authentication"] = pulsar.AuthenticationToken(self._token())
        elif self.auth_method == "tls":
            kwargs["authentication"] = pulsar.AuthenticationTLS(self.auth_cert_file, self.auth_key_file)
        elif self.auth_method == "basic":
            kwargs["authentication"] = pulsar.AuthenticationBasic(self.basic_user, self.basic_password)
        if self.trust_certs_file:
            kwargs["tls_trust_certs_file_path"] = self.trust_certs_file
        if self.allow_insecure:
            kwargs["tls_allow_insecure_connection"] = True
        if self.verify_hostname:
            kwargs["tls_validate_hostname"] = True
        if self.cert_file:
            kwargs["tls_certificate_file_path"] = self.cert_file
            kwargs["tls_private_key_file_path"] = self.key_file
        return kwargs

    def http_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client`` for the admin REST: the TLS context (trusted CA,
        client certificate, host name check) and the Authorization header."""
        import ssl

        kwargs: dict[str, Any] = {}
        if self.allow_insecure:
            kwargs["verify"] = False
        elif self.trust_certs_file or self._client_cert():
            ctx = ssl.create_default_context(cafile=self.trust_certs_file or None)
            ctx.check_hostname = self.verify_hostname
            if cert := self._client_cert():
                ctx.load_cert_chain(*cert)
            kwargs["verify"] = ctx
        if self.auth_method == "token":
            kwargs["headers"] = {"Authorization": f"Bearer {self._token()}"}
        elif self.auth_method == "basic":
            raw = f"{self.basic_user}:{self.basic_password}".encode()
            kwargs["headers"] = {"Authorization": "Basic " + base64.b64encode(raw).decode()}
        return kwargs

    def __repr__(self) -> str:  # never print a secret
        return (
            f"ClientSecurity(auth_method={self.auth_method!r}, trust_certs_file={self.trust_certs_file!r}, "
            f"allow_insecure={self.allow_insecure}, cert_file={self.cert_file!r})"
        )
