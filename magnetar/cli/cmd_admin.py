"""``magnetar admin``: a pulsar-admin style CLI over the broker's admin REST API.

Tables for humans, ``--json`` for scripts. A failed request prints the server's ``reason`` and
exits with status 1 (2 for usage errors, as click does). This module holds the ``admin`` group:
its options (URL, TLS, credentials) and its sub-groups, each defined with its commands in its own
module (`_admin_clusters`, `_admin_brokers`, `_admin_tenants`, `_admin_namespaces`,
`_admin_topics`, `_admin_transactions`; `_admin_offload` adds the offload commands to the last two) over what they
share (`_admin_api`); `_pulsar_admin_names` then adds pulsar-admin's spellings of options and
commands.
"""

from __future__ import annotations

import base64
import json
import ssl

import click

from . import _admin_offload  # noqa: F401  (registers the offload commands on namespaces and topics)
from ._admin_api import DEFAULT_URL, topic_path
from ._admin_brokers import broker_stats, brokers
from ._admin_clusters import clusters
from ._admin_namespaces import namespaces
from ._admin_tenants import tenants
from ._admin_topics import topics
from ._admin_transactions import transactions
from ._help import HelpGroup
from ._pulsar_admin_names import apply as add_pulsar_admin_names

__all__ = ["command", "topic_path"]


def _tls_context(
    trust_cert_path: str | None,
    allow_insecure: bool,
    hostname_verification: bool,
    cert_file: str | None,
    key_file: str | None,
) -> ssl.SSLContext | bool:
    """The client TLS context of the --tls-* options (True: httpx's defaults)."""
    if not (trust_cert_path or allow_insecure or hostname_verification or cert_file or key_file):
        return True
    from magnetar.common.config import ConfigError
    from magnetar.common.tls import TlsKeys, TlsSettings, client_context

    keys = TlsKeys(
        cert_file="--tls-cert-file",
        key_file="--tls-key-file",
        trust_certs_file="--tls-trust-cert-path",
        require_client_cert="",
        allow_insecure="--tls-allow-insecure",
        protocols="",
        ciphers="",
    )
    try:
        return client_context(
            TlsSettings(
                cert_file=cert_file or "",
                key_file=key_file or "",
                trust_certs_file=trust_cert_path or "",
                allow_insecure=allow_insecure,
                keys=keys,
            ),
            verify_hostname=hostname_verification,
        )
    except ConfigError as exc:
        raise click.UsageError(f"{exc.key}: {exc.reason}") from None


@click.group("admin", cls=HelpGroup)
@click.option(
    "--admin-url",
    envvar="MAGNETAR_ADMIN_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="Base URL of the broker's admin REST API (env MAGNETAR_ADMIN_URL).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option(
    "--tls-trust-cert-path", default=None, help="PEM CA file the https admin URL's certificate must chain to."
)
@click.option("--tls-allow-insecure", is_flag=True, help="Accept any server certificate (testing only).")
@click.option("--tls-enable-hostname-verification", is_flag=True, help="Check the server certificate's host name.")
@click.option(
    "--tls-cert-file", default=None, help="PEM client certificate (for tlsRequireTrustedClientCertOnConnect)."
)
@click.option("--tls-key-file", default=None, help="PEM private key of --tls-cert-file.")
@click.option(
    "--token",
    envvar="MAGNETAR_TOKEN",
    default=None,
    help="Authentication token sent as 'Authorization: Bearer' (env MAGNETAR_TOKEN).",
)
@click.option(
    "--auth-plugin",
    default=None,
    help="As pulsar-admin: org.apache.pulsar.client.impl.auth.AuthenticationToken (or 'token'), "
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic (or 'basic').",
)
@click.option(
    "--auth-params",
    default=None,
    help="As pulsar-admin: 'token:<jwt>', 'file:///path/to/token' or '{\"token\":\"<jwt>\"}'; "
    'basic: \'{"userId":"<user>","password":"<password>"}\'.',
)
@click.pass_context
def command(
    ctx: click.Context,
    admin_url: str,
    as_json: bool,
    tls_trust_cert_path: str | None,
    tls_allow_insecure: bool,
    tls_enable_hostname_verification: bool,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    token: str | None,
    auth_plugin: str | None,
    auth_params: str | None,
) -> None:
    """Administer tenants, namespaces and topics (pulsar-admin style)."""
    verify = _tls_context(
        tls_trust_cert_path, tls_allow_insecure, tls_enable_hostname_verification, tls_cert_file, tls_key_file
    )
    authorization = None
    if auth_plugin in _BASIC_PLUGINS:
        authorization = _basic_from_auth_params(auth_params)
    elif auth_plugin or auth_params:
        token = _token_from_auth_params(auth_plugin, auth_params)
    ctx.obj = {"url": admin_url, "json": as_json, "verify": verify, "token": token, "authorization": authorization}


for _group in (clusters, brokers, broker_stats, tenants, namespaces, topics, transactions):
    command.add_command(_group)
add_pulsar_admin_names(command)


_BASIC_PLUGINS = ("basic", "org.apache.pulsar.client.impl.auth.AuthenticationBasic")


def _basic_from_auth_params(params: str | None) -> str:
    """The ``Authorization: Basic`` value of pulsar-admin's basic --auth-params (userId, password)."""
    try:
        parsed = json.loads(params or "")
        user, password = str(parsed["userId"]), str(parsed["password"])
    except (ValueError, TypeError, KeyError):
        raise click.BadParameter(
            'basic needs \'{"userId": "<user>", "password": "<password>"}\'', param_hint="--auth-params"
        ) from None
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


_TOKEN_PLUGINS = ("token", "org.apache.pulsar.client.impl.auth.AuthenticationToken")


def _token_from_auth_params(plugin: str | None, params: str | None) -> str:
    """The token pulsar-admin's --auth-plugin / --auth-params describe."""
    if plugin is not None and plugin not in _TOKEN_PLUGINS:
        raise click.BadParameter(
            f"unsupported plugin {plugin!r} (supported: {', '.join(_TOKEN_PLUGINS + _BASIC_PLUGINS)})",
            param_hint="--auth-plugin",
        )
    params = (params or "").strip()
    if params.startswith("{"):
        try:
            params = str(json.loads(params).get("token", ""))
        except (ValueError, AttributeError):
            raise click.BadParameter("not a JSON object", param_hint="--auth-params") from None
    if params.startswith("token:"):
        params = params[len("token:") :]
    elif params.startswith("file:"):
        path = params[len("file://") :] if params.startswith("file://") else params[len("file:") :]
        try:
            with open(path, encoding="utf-8") as f:
                params = f.read()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="--auth-params") from None
    if not params.strip():
        raise click.BadParameter("no token given", param_hint="--auth-params")
    return params.strip()
