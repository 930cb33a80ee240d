"""``magnetar admin``: a pulsar-admin style CLI over the broker's admin REST API.

Tables for humans, ``--json`` for scripts. A failed request prints the server's ``reason`` and
exits with status 1 (2 for usage errors, as click does).
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import ssl
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import click
import httpx

from magnetar.cli._human import duration, when
from protocols.pulsar import InvalidTopicNameError, TopicName

__all__ = ["command", "topic_path"]

_DEFAULT_URL = "http://localhost:8080"


# ------------------------------------------------------------------ plumbing


class _Api:
    def __init__(self, url: str, as_json: bool, verify: ssl.SSLContext | bool = True,
                 token: str | None = None, authorization: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.as_json = as_json
        self.verify = verify  # for https:// URLs: the context of the --tls-* options
        if authorization:  # a whole header value (--auth-plugin ...AuthenticationBasic)
            self.headers = {"Authorization": authorization}
        else:
            self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        r = self.request(method, path, body, params)
        if r.status_code == 204 or not r.content:
            return None
        try:
            return r.json()
        except ValueError:
            return r.text

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, Any] | None = None) -> httpx.Response:
        """The response of a successful request (a failure raises `click.ClickException` with the reason)."""
        try:
            # in a cluster, topic and bundle operations are answered 307 by the owner: followed here
            # (5 hops at most) with the credentials, which httpx's own redirects drop on another port
            with httpx.Client(base_url=self.url, timeout=30, verify=self.verify, headers=self.headers,
                              follow_redirects=False) as c:
                kwargs: dict[str, Any] = {"params": params}
                if body is not None:
                    kwargs["json"] = body
                r = c.request(method, path, **kwargs)
                for _hop in range(5):
                    if r.status_code not in (307, 308) or "location" not in r.headers:
                        break
                    r = c.request(method, r.url.join(r.headers["location"]),
                                  **({"json": body} if body is not None else {}))
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach the admin API at {self.url}: {exc}") from None
        if r.status_code >= 400:
            try:
                reason = r.json().get("reason") or r.text
            except ValueError:
                reason = r.text or r.reason_phrase
            raise click.ClickException(f"{reason} (HTTP {r.status_code})")
        return r

    def show(self, path: str, *, title: str | None = None, columns: list[str] | None = None) -> None:
        """GET ``path`` and print the answer (`_emit`)."""
        _emit(self, self.call("GET", path), title=title, columns=columns)

    def do(self, method: str, path: str, what: str, body: Any = None,
           params: dict[str, Any] | None = None) -> None:
        """Send a change and print ``what`` once it succeeded (`_done`)."""
        self.call(method, path, body, params)
        _done(self, what)


def _api(ctx: click.Context, as_json: bool) -> _Api:
    obj = ctx.find_object(dict) or {}
    return _Api(obj.get("url", _DEFAULT_URL), as_json or obj.get("json", False), obj.get("verify", True),
                obj.get("token"), obj.get("authorization"))


def _tls_context(trust_cert_path: str | None, allow_insecure: bool, hostname_verification: bool,
                 cert_file: str | None, key_file: str | None) -> ssl.SSLContext | bool:
    """The client TLS context of the --tls-* options (True: httpx's defaults)."""
    if not (trust_cert_path or allow_insecure or hostname_verification or cert_file or key_file):
        return True
    from magnetar.config import ConfigError
    from magnetar.tls import TlsKeys, TlsSettings, client_context

    keys = TlsKeys(cert_file="--tls-cert-file", key_file="--tls-key-file", trust_certs_file="--tls-trust-cert-path",
                   require_client_cert="", allow_insecure="--tls-allow-insecure", protocols="", ciphers="")
    try:
        return client_context(TlsSettings(cert_file=cert_file or "", key_file=key_file or "",
                                          trust_certs_file=trust_cert_path or "", allow_insecure=allow_insecure,
                                          keys=keys), verify_hostname=hostname_verification)
    except ConfigError as exc:
        raise click.UsageError(f"{exc.key}: {exc.reason}") from None


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x``, ``t/ns/x`` or ``x`` (public/default) -> ``t/ns/encoded-x``.
    Raises `click.BadParameter` for other forms."""
    try:
        name = TopicName.parse(topic)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc)) from None
    if not name.persistent:
        raise click.BadParameter(f"only persistent topics are supported, not {name.domain}://")
    return f"{name.tenant}/{name.namespace}/{name.encoded_local_name}"


def _ns(namespace: str) -> str:
    parts = namespace.split("/")
    if len(parts) != 2 or not all(parts):
        raise click.BadParameter(f"invalid namespace {namespace!r}: use tenant/namespace")
    return namespace


def _message_id(text: str) -> dict[str, int]:
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if text == "latest":
        return {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}
    try:
        ledger, entry = (int(x) for x in text.split(":")[:2])
    except ValueError:
        raise click.BadParameter(f"message id must be earliest, latest or ledgerId:entryId, not {text!r}") from None
    return {"ledgerId": ledger, "entryId": entry}


# ------------------------------------------------------------------ output


def _console():
    from rich.console import Console

    # piped output (scripts, tests) gets a wide table rather than 80 columns of wrapped cells
    return Console(width=None if sys.stdout.isatty() else 200)


def _emit(api: _Api, value: Any, *, title: str | None = None, columns: list[str] | None = None) -> None:
    """JSON when asked; else a list as a one-column table, a list of dicts / dict as a table."""
    if api.as_json:
        click.echo(json.dumps(value, indent=2, sort_keys=True))
        return
    from rich.table import Table

    if value is None:
        click.echo("(not set)")
        return
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        table = Table(title=title)
        table.add_column(columns[0] if columns else "name")
        for v in value:
            table.add_row(str(v))
    elif isinstance(value, list):
        cols = columns or sorted({k for row in value for k in row})
        table = Table(title=title)
        for col in cols:
            table.add_column(col)
        for row in value:
            table.add_row(*(_cell(row.get(c)) for c in cols))
    elif isinstance(value, dict):
        table = Table(title=title)
        table.add_column("key")
        table.add_column("value")
        for k, v in value.items():
            table.add_row(str(k), _cell(v))
    else:
        click.echo(value)
        return
    _console().print(table)


def _cell(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return "" if v is None else str(v)


def _done(api: _Api, what: str) -> None:
    if api.as_json:
        click.echo(json.dumps({"ok": True, "message": what}))
    else:
        click.echo(what)


_json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _cmd(group: click.Group, name: str, *params: Callable[[Any], Any]):
    """Register ``fn(api, **values)`` as ``group name``: ``params`` (click arguments and options, in
    the order given) then ``--json``; the docstring is the help. Every command has this shape, so
    the `_Api` built from the group options and ``--json`` is made here, once."""
    def deco(fn: Callable[..., None]) -> click.Command:
        @functools.wraps(fn)
        def command_body(ctx: click.Context, as_json: bool, **values: Any) -> None:
            fn(_api(ctx, as_json), **values)

        f: Any = _json_flag(click.pass_context(command_body))
        for param in reversed(params):
            f = param(f)
        return group.command(name)(f)
    return deco


def _flag(force: bool) -> dict[str, str]:
    return {"force": str(force).lower()}


# ------------------------------------------------------------------ the group


class _AdminGroup(click.Group):
    """The ``admin`` group: before listing or resolving a sub-command it imports `_admin_ops` and
    `_cluster_admin`, which register more commands on the sub-groups of this module (clusters and
    failure domains, dynamic config, broker-stats, limits and rates, namespace operations; brokers,
    bundles, split and unload). A function-level import, as the package's lazy loading of ``cmd_*``
    modules: no module-level import cycle."""

    @staticmethod
    def _more() -> None:
        from . import _admin_offload, _admin_ops, _cluster_admin  # noqa: F401

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._more()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._more()
        return super().get_command(ctx, cmd_name)


@click.group("admin", cls=_AdminGroup)
@click.option("--admin-url", envvar="MAGNETAR_ADMIN_URL", default=_DEFAULT_URL, show_default=True,
              help="Base URL of the broker's admin REST API (env MAGNETAR_ADMIN_URL).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--tls-trust-cert-path", default=None,
              help="PEM CA file the https admin URL's certificate must chain to.")
@click.option("--tls-allow-insecure", is_flag=True, help="Accept any server certificate (testing only).")
@click.option("--tls-enable-hostname-verification", is_flag=True, help="Check the server certificate's host name.")
@click.option("--tls-cert-file", default=None,
              help="PEM client certificate (for tlsRequireTrustedClientCertOnConnect).")
@click.option("--tls-key-file", default=None, help="PEM private key of --tls-cert-file.")
@click.option("--token", envvar="MAGNETAR_TOKEN", default=None,
              help="Authentication token sent as 'Authorization: Bearer' (env MAGNETAR_TOKEN).")
@click.option("--auth-plugin", default=None,
              help="As pulsar-admin: org.apache.pulsar.client.impl.auth.AuthenticationToken (or 'token'), "
                   "org.apache.pulsar.client.impl.auth.AuthenticationBasic (or 'basic').")
@click.option("--auth-params", default=None,
              help="As pulsar-admin: 'token:<jwt>', 'file:///path/to/token' or '{\"token\":\"<jwt>\"}'; "
                   "basic: '{\"userId\":\"<user>\",\"password\":\"<password>\"}'.")
@click.pass_context
def command(ctx: click.Context, admin_url: str, as_json: bool, tls_trust_cert_path: str | None,
            tls_allow_insecure: bool, tls_enable_hostname_verification: bool, tls_cert_file: str | None,
            tls_key_file: str | None, token: str | None, auth_plugin: str | None, auth_params: str | None) -> None:
    """Administer tenants, namespaces and topics (pulsar-admin style)."""
    verify = _tls_context(tls_trust_cert_path, tls_allow_insecure, tls_enable_hostname_verification,
                          tls_cert_file, tls_key_file)
    authorization = None
    if auth_plugin in _BASIC_PLUGINS:
        authorization = _basic_from_auth_params(auth_params)
    elif auth_plugin or auth_params:
        token = _token_from_auth_params(auth_plugin, auth_params)
    ctx.obj = {"url": admin_url, "json": as_json, "verify": verify, "token": token, "authorization": authorization}


_BASIC_PLUGINS = ("basic", "org.apache.pulsar.client.impl.auth.AuthenticationBasic")


def _basic_from_auth_params(params: str | None) -> str:
    """The ``Authorization: Basic`` value of pulsar-admin's basic --auth-params (userId, password)."""
    try:
        parsed = json.loads(params or "")
        user, password = str(parsed["userId"]), str(parsed["password"])
    except (ValueError, TypeError, KeyError):
        raise click.BadParameter('basic needs \'{"userId": "<user>", "password": "<password>"}\'',
                                 param_hint="--auth-params") from None
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


_TOKEN_PLUGINS = ("token", "org.apache.pulsar.client.impl.auth.AuthenticationToken")


def _token_from_auth_params(plugin: str | None, params: str | None) -> str:
    """The token pulsar-admin's --auth-plugin / --auth-params describe."""
    if plugin is not None and plugin not in _TOKEN_PLUGINS:
        raise click.BadParameter(f"unsupported plugin {plugin!r} (supported: "
                                 f"{', '.join(_TOKEN_PLUGINS + _BASIC_PLUGINS)})",
                                 param_hint="--auth-plugin")
    params = (params or "").strip()
    if params.startswith("{"):
        try:
            params = str(json.loads(params).get("token", ""))
        except (ValueError, AttributeError):
            raise click.BadParameter("not a JSON object", param_hint="--auth-params") from None
    if params.startswith("token:"):
        params = params[len("token:"):]
    elif params.startswith("file:"):
        path = params[len("file://"):] if params.startswith("file://") else params[len("file:"):]
        try:
            with open(path, encoding="utf-8") as f:
                params = f.read()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="--auth-params") from None
    if not params.strip():
        raise click.BadParameter("no token given", param_hint="--auth-params")
    return params.strip()


@command.group("clusters")
def clusters() -> None:
    """Clusters."""


@_cmd(clusters, "list")
def clusters_list(api: _Api) -> None:
    """List clusters."""
    api.show("/admin/v2/clusters", columns=["cluster"])


# ------------------------------------------------------------------ brokers


@command.group("brokers")
def brokers() -> None:
    """Brokers."""


@_cmd(brokers, "healthcheck",
      click.option("--topic-version", "-tv", "topic_version", type=click.Choice(["V1", "V2"]), default="V2",
                   show_default=True, help="Heartbeat topic naming (V2: pulsar/{broker}/healthcheck)."))
def brokers_healthcheck(api: _Api, topic_version: str) -> None:
    """Write and read back a heartbeat message on this broker (exit status 1 when unhealthy)."""
    answer = api.call("GET", "/admin/v2/brokers/health", params={"topicVersion": topic_version})
    if api.as_json:
        click.echo(json.dumps({"ok": True, "message": answer}))
    else:
        click.echo(answer)


# ------------------------------------------------------------------ tenants


@command.group("tenants")
def tenants() -> None:
    """Tenants."""


_tenant_arg = click.argument("tenant")


@_cmd(tenants, "list")
def tenants_list(api: _Api) -> None:
    """List tenants."""
    api.show("/admin/v2/tenants", columns=["tenant"])


@_cmd(tenants, "get", _tenant_arg)
def tenants_get(api: _Api, tenant: str) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    api.show(f"/admin/v2/tenants/{tenant}", title=tenant)


@_cmd(tenants, "create", _tenant_arg,
      click.option("--admin-roles", "-r", default="", help="Comma-separated admin roles."),
      click.option("--allowed-clusters", "-c", default="",
                   help="Comma-separated clusters (default: this one)."))
def tenants_create(api: _Api, tenant: str, admin_roles: str, allowed_clusters: str) -> None:
    """Create a tenant."""
    body = {"adminRoles": [r for r in admin_roles.split(",") if r],
            "allowedClusters": [c for c in allowed_clusters.split(",") if c]}
    api.do("PUT", f"/admin/v2/tenants/{tenant}", f"created tenant {tenant}", body)


@_cmd(tenants, "delete", _tenant_arg)
def tenants_delete(api: _Api, tenant: str) -> None:
    """Delete a tenant (it must have no namespaces)."""
    api.do("DELETE", f"/admin/v2/tenants/{tenant}", f"deleted tenant {tenant}")


# ------------------------------------------------------------------ namespaces


@command.group("namespaces")
def namespaces() -> None:
    """Namespaces and their policies."""


_ns_arg = click.argument("namespace")


def _nsp(namespace: str, suffix: str = "") -> str:
    """The REST path of a namespace (validated) or of one of its policies."""
    return f"/admin/v2/namespaces/{_ns(namespace)}{suffix}"


@_cmd(namespaces, "list", _tenant_arg)
def namespaces_list(api: _Api, tenant: str) -> None:
    """List the namespaces of a tenant."""
    api.show(f"/admin/v2/namespaces/{tenant}", columns=["namespace"])


@_cmd(namespaces, "create", _ns_arg)
def namespaces_create(api: _Api, namespace: str) -> None:
    """Create a namespace (tenant/namespace)."""
    api.do("PUT", _nsp(namespace), f"created namespace {namespace}")


@_cmd(namespaces, "delete", _ns_arg,
      click.option("--force", "-f", is_flag=True, help="Delete its topics too."))
def namespaces_delete(api: _Api, namespace: str, force: bool) -> None:
    """Delete a namespace (it must be empty unless --force)."""
    api.do("DELETE", _nsp(namespace), f"deleted namespace {namespace}", params=_flag(force))


@_cmd(namespaces, "policies", _ns_arg)
def namespaces_policies(api: _Api, namespace: str) -> None:
    """Show every policy of a namespace."""
    api.show(_nsp(namespace), title=namespace)


def _with_units(text: str, units: dict[str, float], what: str, usage: str) -> int:
    """``-1`` and ``0`` as they are; a bare number in the base unit; a number with a unit suffix
    converted (at least 1 for a non-zero value). Raises `click.BadParameter`."""
    if text in ("-1", "0"):
        return int(text)
    try:
        if text[-1] in units:
            return max(1, int(float(text[:-1]) * units[text[-1]]))
        return int(text)
    except (ValueError, IndexError):
        raise click.BadParameter(f"invalid {what} {usage}") from None


def _size_mb(text: str) -> int:
    """``-1``, ``100`` (MB), ``100M``, ``2G``, ``512K`` -> MB (at least 1 for a non-zero size)."""
    return _with_units(text.strip().upper(), {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024},
                       "size", f"{text!r}: use -1, MB, or a number with K/M/G/T")


def _minutes(text: str) -> int:
    """``-1``, ``30`` (minutes), ``30m``, ``2h``, ``7d``, ``90s`` -> minutes."""
    return _with_units(text.strip().lower(), {"s": 1 / 60, "m": 1, "h": 60, "d": 1440, "w": 10080},
                       "time", f"{text!r}: use -1, minutes, or a number with s/m/h/d/w")


@_cmd(namespaces, "set-retention", _ns_arg,
      click.option("--time", "-t", "time_", required=True,
                   help="Retention time: -1 (infinite), minutes, or 30m/2h/7d."),
      click.option("--size", "-s", required=True, help="Retention size: -1 (infinite), MB, or 512M/10G."))
def namespaces_set_retention(api: _Api, namespace: str, time_: str, size: str) -> None:
    """Set the retention of consumed messages."""
    body = {"retentionTimeInMinutes": _minutes(time_), "retentionSizeInMB": _size_mb(size)}
    api.do("POST", _nsp(namespace, "/retention"), f"set retention of {namespace}", body)


@_cmd(namespaces, "get-retention", _ns_arg)
def namespaces_get_retention(api: _Api, namespace: str) -> None:
    """Show the retention of a namespace."""
    api.show(_nsp(namespace, "/retention"), title="retention")


@_cmd(namespaces, "set-message-ttl", _ns_arg,
      click.option("--ttl", "-ttl", "ttl", type=int, required=True, help="Message TTL in seconds (0 = off)."))
def namespaces_set_ttl(api: _Api, namespace: str, ttl: int) -> None:
    """Set the message TTL."""
    api.do("POST", _nsp(namespace, "/messageTTL"), f"set message TTL of {namespace} to {ttl}s", ttl)


@_cmd(namespaces, "get-message-ttl", _ns_arg)
def namespaces_get_ttl(api: _Api, namespace: str) -> None:
    """Show the message TTL of a namespace."""
    api.show(_nsp(namespace, "/messageTTL"))


@_cmd(namespaces, "set-backlog-quota", _ns_arg,
      click.option("--limit-size", "-l", "limit_size", type=int, default=-1,
                   help="Backlog size limit in bytes."),
      click.option("--limit-time", "-lt", "limit_time", type=int, default=-1,
                   help="Backlog age limit in seconds."),
      click.option("--policy", "-p", required=True,
                   type=click.Choice(["producer_request_hold", "producer_exception",
                                      "consumer_backlog_eviction"])),
      click.option("--type", "-t", "quota_type", default="destination_storage", show_default=True,
                   type=click.Choice(["destination_storage", "message_age"])))
def namespaces_set_quota(api: _Api, namespace: str, limit_size: int, limit_time: int, policy: str,
                         quota_type: str) -> None:
    """Set a backlog quota."""
    body = {"limitSize": limit_size, "limitTime": limit_time, "policy": policy}
    api.do("POST", _nsp(namespace, "/backlogQuota"), f"set {quota_type} backlog quota of {namespace}", body,
           params={"backlogQuotaType": quota_type})


@_cmd(namespaces, "get-backlog-quotas", _ns_arg)
def namespaces_get_quotas(api: _Api, namespace: str) -> None:
    """Show the backlog quotas of a namespace."""
    quotas = api.call("GET", _nsp(namespace, "/backlogQuotaMap")) or {}
    _emit(api, quotas if api.as_json else [{"type": k, **v} for k, v in quotas.items()],
          columns=["type", "limitSize", "limitTime", "policy"])


@_cmd(namespaces, "set-deduplication", _ns_arg,
      click.option("--enable/--disable", "-e/-d", required=True,
                   help="Turn message deduplication on or off."))
def namespaces_set_dedup(api: _Api, namespace: str, enable: bool) -> None:
    """Turn message deduplication on or off (applies to topics loaded afterwards)."""
    api.do("POST", _nsp(namespace, "/deduplication"),
           f"{'enabled' if enable else 'disabled'} deduplication on {namespace}", enable)


@_cmd(namespaces, "set-auto-topic-creation", _ns_arg,
      click.option("--enable/--disable", "-e/-d", required=True, help="Allow or refuse creating missing topics."),
      click.option("--type", "-t", "topic_type", default="non-partitioned", show_default=True,
                   type=click.Choice(["non-partitioned", "partitioned"]), help="Type of the topics created."),
      click.option("--num-partitions", "-n", type=int, default=None,
                   help="Partitions of a created partitioned topic (required with --type partitioned)."))
def namespaces_set_auto_creation(api: _Api, namespace: str, enable: bool, topic_type: str,
                                 num_partitions: int | None) -> None:
    """Override the broker's auto topic creation settings for a namespace."""
    body: dict[str, Any] = {"allowAutoTopicCreation": enable, "topicType": topic_type}
    if num_partitions is not None:
        body["defaultNumPartitions"] = num_partitions
    api.do("POST", _nsp(namespace, "/autoTopicCreation"), f"set auto topic creation of {namespace}", body)


@_cmd(namespaces, "get-auto-topic-creation", _ns_arg)
def namespaces_get_auto_creation(api: _Api, namespace: str) -> None:
    """Show a namespace's auto topic creation override (nothing: the broker's settings apply)."""
    api.show(_nsp(namespace, "/autoTopicCreation"))


@_cmd(namespaces, "remove-auto-topic-creation", _ns_arg)
def namespaces_remove_auto_creation(api: _Api, namespace: str) -> None:
    """Remove a namespace's auto topic creation override: the broker's settings apply again."""
    api.do("DELETE", _nsp(namespace, "/autoTopicCreation"), f"removed auto topic creation override of {namespace}")


def _seconds(text: str) -> int:
    """``600`` (seconds), ``90s``, ``10m``, ``2h``, ``1d``, ``1w`` -> seconds (pulsar-admin's durations)."""
    return _with_units(text.strip().lower(), {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800},
                       "duration", f"{text!r}: use seconds, or a number with s/m/h/d/w")


_INACTIVE_OPTS = (
    click.option("--enable-delete-while-inactive/--disable-delete-while-inactive", "-e/-d", "enable",
                 required=True, help="Delete topics once inactive, or never."),
    click.option("--max-inactive-duration", "-t", "duration", required=True,
                 help="How long a topic must stay inactive: seconds, or 10m/2h/1d."),
    click.option("--delete-mode", "-m", "mode", required=True,
                 type=click.Choice(["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]),
                 help="Inactive means no subscriptions, or only caught-up ones (and no producers or consumers)."),
)


def _inactive_body(enable: bool, duration: str, mode: str) -> dict[str, Any]:
    return {"inactiveTopicDeleteMode": mode, "maxInactiveDurationSeconds": _seconds(duration),
            "deleteWhileInactive": enable}


@_cmd(namespaces, "set-inactive-topic-policies", _ns_arg, *_INACTIVE_OPTS)
def namespaces_set_inactive(api: _Api, namespace: str, enable: bool, duration: str, mode: str) -> None:
    """Set when the namespace's inactive topics are deleted (over the broker's settings)."""
    api.do("POST", _nsp(namespace, "/inactiveTopicPolicies"), f"set inactive topic policies of {namespace}",
           _inactive_body(enable, duration, mode))


@_cmd(namespaces, "get-inactive-topic-policies", _ns_arg)
def namespaces_get_inactive(api: _Api, namespace: str) -> None:
    """Show the namespace's inactive topic policies (nothing: the broker's settings apply)."""
    api.show(_nsp(namespace, "/inactiveTopicPolicies"))


@_cmd(namespaces, "remove-inactive-topic-policies", _ns_arg)
def namespaces_remove_inactive(api: _Api, namespace: str) -> None:
    """Remove the namespace's inactive topic policies: the broker's settings apply again."""
    api.do("DELETE", _nsp(namespace, "/inactiveTopicPolicies"), f"removed inactive topic policies of {namespace}")


# ------------------------------------------------------------------ topics


@command.group("topics")
def topics() -> None:
    """Persistent topics and their subscriptions."""


_topic_arg = click.argument("topic")
_sub_opt = click.option("--subscription", "-s", required=True, help="Subscription name.")
_force_opt = click.option("--force", "-f", is_flag=True, help="Also when producers or consumers are connected.")
_parts_opt = click.option("--partitions", "-p", type=int, required=True, help="Number of partitions.")


def _tp(topic: str) -> str:
    try:
        name = TopicName.parse(topic)
    except InvalidTopicNameError:
        name = None  # topic_path reports it
    if name is not None and not name.persistent:
        # non-persistent topics have their own REST root (stats, partitioned-stats, partitions)
        return f"/admin/v2/non-persistent/{name.tenant}/{name.namespace}/{name.encoded_local_name}"
    return f"/admin/v2/persistent/{topic_path(topic)}"


def _sp(topic: str, subscription: str) -> str:
    """The REST path of a subscription of a topic."""
    return f"{_tp(topic)}/subscription/{quote(subscription, safe='')}"


@_cmd(topics, "list", _ns_arg)
def topics_list(api: _Api, namespace: str) -> None:
    """List the topics of a namespace (partitions by name)."""
    api.show(f"/admin/v2/persistent/{_ns(namespace)}", columns=["topic"])


@_cmd(topics, "set-inactive-topic-policies", _topic_arg, *_INACTIVE_OPTS)
def topics_set_inactive(api: _Api, topic: str, enable: bool, duration: str, mode: str) -> None:
    """Set when this topic is deleted once inactive (over its namespace's and the broker's settings)."""
    api.do("POST", f"{_tp(topic)}/inactiveTopicPolicies", f"set inactive topic policies of {topic}",
           _inactive_body(enable, duration, mode))


@_cmd(topics, "get-inactive-topic-policies", _topic_arg,
      click.option("--applied", "-a", is_flag=True, help="The policies in force (topic, namespace or broker)."))
def topics_get_inactive(api: _Api, topic: str, applied: bool) -> None:
    """Show the topic's inactive topic policies."""
    _emit(api, api.call("GET", f"{_tp(topic)}/inactiveTopicPolicies", params={"applied": "true"} if applied else None))


@_cmd(topics, "remove-inactive-topic-policies", _topic_arg)
def topics_remove_inactive(api: _Api, topic: str) -> None:
    """Remove the topic's inactive topic policies."""
    api.do("DELETE", f"{_tp(topic)}/inactiveTopicPolicies", f"removed inactive topic policies of {topic}")


@_cmd(topics, "create", _topic_arg)
def topics_create(api: _Api, topic: str) -> None:
    """Create a non-partitioned topic."""
    api.do("PUT", _tp(topic), f"created topic {topic}")


@_cmd(topics, "delete", _topic_arg, _force_opt)
def topics_delete(api: _Api, topic: str, force: bool) -> None:
    """Delete a topic and its data."""
    api.do("DELETE", _tp(topic), f"deleted topic {topic}", params=_flag(force))


@_cmd(topics, "create-partitioned-topic", _topic_arg, _parts_opt)
def topics_create_partitioned(api: _Api, topic: str, partitions: int) -> None:
    """Create a partitioned topic."""
    api.do("PUT", _tp(topic) + "/partitions",
           f"created partitioned topic {topic} with {partitions} partitions", partitions)


@_cmd(topics, "update-partitioned-topic", _topic_arg, _parts_opt)
def topics_update_partitioned(api: _Api, topic: str, partitions: int) -> None:
    """Raise the number of partitions of a topic."""
    api.do("POST", _tp(topic) + "/partitions", f"updated {topic} to {partitions} partitions", partitions)


@_cmd(topics, "get-partitioned-topic-metadata", _topic_arg)
def topics_get_partitioned(api: _Api, topic: str) -> None:
    """Show the number of partitions (0: not partitioned)."""
    api.show(_tp(topic) + "/partitions")


@_cmd(topics, "stats", _topic_arg,
      click.option("--get-precise-backlog", "-gpb", "precise", is_flag=True,
                   help="As pulsar-admin (Magnetar's backlog counts are always precise)."))
def topics_stats(api: _Api, topic: str, precise: bool = False) -> None:
    """Show a topic's rates, counters, producers and subscriptions."""
    stats = api.call("GET", _tp(topic) + "/stats", params={"getPreciseBacklog": "true"} if precise else None)
    if api.as_json:
        _emit(api, stats)
        return
    _emit(api, {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}, title=topic)
    _emit(api, [{"name": n, **{k: s.get(k) for k in ("type", "msgBacklog", "backlogSize", "unackedMessages",
                                                        "msgOutCounter", "msgRateOut")},
                 "consumers": len(s.get("consumers", []))} for n, s in stats.get("subscriptions", {}).items()],
          title="subscriptions", columns=["name", "type", "msgBacklog", "backlogSize", "unackedMessages",
                                          "msgOutCounter", "msgRateOut", "consumers"])
    if stats.get("publishers"):
        _emit(api, stats["publishers"], title="producers",
              columns=["producerName", "accessMode", "msgRateIn", "msgThroughputIn", "address"])


def _readable_time(value: object) -> object:
    """A time of Pulsar's stats (epoch ms, or Pulsar's ISO date text) as `when` writes it."""
    if isinstance(value, str):
        try:
            value = int(datetime.datetime.fromisoformat(value).timestamp() * 1000)
        except ValueError:
            return value
    return when(value) if isinstance(value, int) else value


@_cmd(topics, "stats-internal", _topic_arg)
def topics_stats_internal(api: _Api, topic: str) -> None:
    """Show a topic's managed ledger: ledgers and cursors."""
    stats = api.call("GET", _tp(topic) + "/internalStats")
    if api.as_json:
        _emit(api, stats)
        return
    _emit(api, {k: (_readable_time(v) if k.endswith("Timestamp") else v)
                for k, v in stats.items() if not isinstance(v, (dict, list))}, title=topic)
    _emit(api, stats.get("ledgers", []), title="ledgers", columns=["ledgerId", "entries", "size"])
    _emit(api, [{"name": n, **c} for n, c in stats.get("cursors", {}).items()], title="cursors",
          columns=["name", "markDeletePosition", "readPosition", "individuallyDeletedMessages", "state"])


@_cmd(topics, "subscriptions", _topic_arg)
def topics_subscriptions(api: _Api, topic: str) -> None:
    """List a topic's subscriptions."""
    api.show(_tp(topic) + "/subscriptions", columns=["subscription"])


@_cmd(topics, "create-subscription", _topic_arg, _sub_opt,
      click.option("--messageId", "-m", "message_id", default="latest", show_default=True,
                   help="Start: earliest, latest or ledgerId:entryId."))
def topics_create_subscription(api: _Api, topic: str, subscription: str, message_id: str) -> None:
    """Create a durable subscription."""
    api.do("PUT", _sp(topic, subscription), f"created subscription {subscription} on {topic}",
           _message_id(message_id))


@_cmd(topics, "unsubscribe", _topic_arg, _sub_opt, _force_opt)
def topics_unsubscribe(api: _Api, topic: str, subscription: str, force: bool) -> None:
    """Delete a subscription."""
    api.do("DELETE", _sp(topic, subscription), f"deleted subscription {subscription} of {topic}",
           params=_flag(force))


@_cmd(topics, "skip", _topic_arg, _sub_opt,
      click.option("--count", "-n", type=int, required=True, help="Messages to skip."))
def topics_skip(api: _Api, topic: str, subscription: str, count: int) -> None:
    """Skip messages of a subscription's backlog."""
    api.do("POST", f"{_sp(topic, subscription)}/skip/{count}", f"skipped {count} messages of {subscription}")


@_cmd(topics, "clear-backlog", _topic_arg, _sub_opt)
def topics_clear_backlog(api: _Api, topic: str, subscription: str) -> None:
    """Acknowledge a subscription's whole backlog."""
    api.do("POST", f"{_sp(topic, subscription)}/skip_all", f"cleared the backlog of {subscription}")


@_cmd(topics, "reset-cursor", _topic_arg, _sub_opt,
      click.option("--time", "-t", "time_ms", type=int, help="Publish time in ms since the epoch."),
      click.option("--messageId", "-m", "message_id", help="earliest, latest or ledgerId:entryId."))
def topics_reset_cursor(api: _Api, topic: str, subscription: str, time_ms: int | None,
                        message_id: str | None) -> None:
    """Move a subscription to a publish time or a message id."""
    if (time_ms is None) == (message_id is None):
        raise click.UsageError("give exactly one of --time and --messageId")
    base = f"{_sp(topic, subscription)}/resetcursor"
    what = f"reset {subscription} of {topic}"
    if time_ms is not None:
        api.do("POST", f"{base}/{time_ms}", what)
    else:
        api.do("POST", base, what, _message_id(message_id or ""))


@_cmd(topics, "skip-all", _topic_arg, _sub_opt)
def topics_skip_all(api: _Api, topic: str, subscription: str) -> None:
    """Skip all messages of a subscription's backlog (as clear-backlog)."""
    api.do("POST", f"{_sp(topic, subscription)}/skip_all", f"skipped all messages of {subscription}")


@_cmd(topics, "expire-messages", _topic_arg, _sub_opt,
      click.option("--expireTime", "-t", "expire_time", type=int, required=True,
                   help="Acknowledge the messages published more than this many seconds ago."))
def topics_expire_messages(api: _Api, topic: str, subscription: str, expire_time: int) -> None:
    """Expire (acknowledge) a subscription's messages older than --expireTime seconds."""
    api.do("POST", f"{_sp(topic, subscription)}/expireMessages/{expire_time}",
           f"expired the messages of {subscription} older than {expire_time} s")


@_cmd(topics, "last-message-id", _topic_arg)
def topics_last_message_id(api: _Api, topic: str) -> None:
    """The id of the topic's last stored message."""
    _emit(api, api.call("GET", _tp(topic) + "/lastMessageId"))


def _print_message(api: _Api, r: httpx.Response) -> dict[str, Any]:
    """One message answer (payload body, X-Pulsar-* headers) as pulsar-admin prints it, or its JSON."""
    raw = ((k.decode("latin-1"), v.decode("utf-8", errors="replace")) for k, v in r.headers.raw)  # names as sent
    headers = {k: v for k, v in raw if k.lower().startswith("x-pulsar-")}
    message_id = r.headers.get("x-pulsar-message-id", "")
    properties = {k[len("x-pulsar-property-"):]: v for k, v in headers.items()
                  if k.lower().startswith("x-pulsar-property-")}
    doc = {"messageId": message_id, "properties": properties,
           "headers": {k: v for k, v in headers.items() if not k.lower().startswith("x-pulsar-property-")},
           "payload": base64.b64encode(r.content).decode()}
    if not api.as_json:
        click.echo(f"Message ID: {message_id}")
        for key, value in sorted(doc["headers"].items()):
            if key.lower() != "x-pulsar-message-id":
                click.echo(f"{key}: {value}")
        if properties:
            click.echo(f"Properties: {json.dumps(properties, sort_keys=True)}")
        click.echo(r.content.decode("utf-8", errors="replace"))
    return doc


@_cmd(topics, "peek-messages", _topic_arg, _sub_opt,
      click.option("--count", "-n", type=int, default=1, show_default=True, help="Messages to peek."))
def topics_peek_messages(api: _Api, topic: str, subscription: str, count: int) -> None:
    """Show the first --count unacknowledged messages of a subscription (without acknowledging them)."""
    if count < 1:
        raise click.BadParameter("must be 1 or more", param_hint="--count")
    docs = []
    for i in range(1, count + 1):
        try:
            r = api.request("GET", f"{_sp(topic, subscription)}/position/{i}")
        except click.ClickException:
            if i == 1:
                raise
            break  # fewer messages than asked for
        if not api.as_json and i > 1:
            click.echo("")
        docs.append(_print_message(api, r))
    if api.as_json:
        click.echo(json.dumps(docs, indent=2, sort_keys=True))


@_cmd(topics, "examine-message", _topic_arg,
      click.option("--initialPosition", "-i", "initial_position", type=click.Choice(["latest", "earliest"]),
                   default="latest", show_default=True, help="Count from the newest or the oldest message."),
      click.option("--messagePosition", "-m", "message_position", type=int, default=1, show_default=True,
                   help="Which message (1-based) from --initialPosition."))
def topics_examine_message(api: _Api, topic: str, initial_position: str, message_position: int) -> None:
    """Show the n-th message from the newest or the oldest stored one."""
    r = api.request("GET", _tp(topic) + "/examinemessage",
                    params={"initialPosition": initial_position, "messagePosition": message_position})
    doc = _print_message(api, r)
    if api.as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))


@_cmd(topics, "get-message-by-id", _topic_arg,
      click.option("--ledgerId", "-l", "ledger_id", type=int, required=True, help="Ledger id of the message."),
      click.option("--entryId", "-e", "entry_id", type=int, required=True, help="Entry id of the message."))
def topics_get_message_by_id(api: _Api, topic: str, ledger_id: int, entry_id: int) -> None:
    """Show the message stored at ledgerId:entryId."""
    doc = _print_message(api, api.request("GET", f"{_tp(topic)}/ledger/{ledger_id}/entry/{entry_id}"))
    if api.as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))


@_cmd(topics, "terminate", _topic_arg)
def topics_terminate(api: _Api, topic: str) -> None:
    """Terminate a topic: no message can be published to it any more."""
    last = api.call("POST", _tp(topic) + "/terminate")
    if api.as_json:
        click.echo(json.dumps(last, sort_keys=True))
    else:
        click.echo(f"Topic {topic} successfully terminated at {last['ledgerId']}:{last['entryId']}")


@_cmd(topics, "truncate", _topic_arg)
def topics_truncate(api: _Api, topic: str) -> None:
    """Move every subscription to the end and delete every closed ledger of the topic."""
    api.do("DELETE", _tp(topic) + "/truncate", f"truncated {topic}")


@_cmd(topics, "unload", _topic_arg)
def topics_unload(api: _Api, topic: str) -> None:
    """Unload a topic (clients reconnect and load it again)."""
    api.do("PUT", _tp(topic) + "/unload", f"unloaded {topic}")


@_cmd(topics, "explain-storage", _topic_arg)
def topics_explain_storage(api: _Api, topic: str) -> None:
    """Explain each ledger of a topic: size, age, why kept or deleted."""
    ex = api.call("GET", _tp(topic) + "/explain-storage")
    if api.as_json:
        _emit(api, ex)
        return
    pol = ex.get("policies") or {}
    click.echo(f"{ex['topic']}: {ex['totalSize']} bytes; retention {pol.get('retention')}, "
               f"TTL {pol.get('messageTTLInSeconds')}s; deletable now: {ex.get('deletableNow')}")
    ledgers = [{**row, "age": duration(row.get("ageSeconds"))} for row in ex.get("ledgers", [])]
    _emit(api, ledgers, title="ledgers",
          columns=["ledgerId", "entries", "size", "age", "decision", "reason", "pinnedBy", "explanation"])
    _emit(api, [{"cursor": n, **c} for n, c in (ex.get("cursors") or {}).items()], title="cursors",
          columns=["cursor", "pipeline", "markDeletePosition", "backlog", "backlogSize", "pinsLedgers"])
    last = ex.get("lastRetentionCheck")
    if last:
        click.echo(f"last retention check {when(last.get('checkedAtMs'))}: trimmed {last.get('trimmed')} "
                   f"({last.get('trimmedBytes')} bytes); errors: {last.get('errors') or 'none'}")
    tiered = [{"ledgerId": row.get("ledgerId"), **(row.get("tieredStorage") or {})} for row in ex.get("ledgers", [])]
    if any(t.get("state") not in (None, "NONE") for t in tiered) or (ex.get("offload") or {}).get("status") not in (
            None, "NOT_RUN"):
        off = ex.get("offload") or {}
        click.echo(f"offload: {off.get('status')} {off.get('lastError') or ''}; offloaded {ex.get('offloadedSize')} "
                   "bytes")
        _emit(api, tiered, title="tiered storage", columns=["ledgerId", "location", "state", "bookieCopy"])
    if ex.get("bookieGc") is not None:
        _emit_bookie_gc(api, ex["bookieGc"])


def _emit_bookie_gc(api: _Api, gc: dict[str, Any]) -> None:
    """The ``bookieGc`` part of explain-storage as tables: one row per ledger, one per bookie."""
    click.echo(f"bookie GC: {gc.get('topicBytesAwaitingGc', 0)} bytes of this topic await GC"
               + (f"; unreachable bookies: {', '.join(gc['unreachableBookies'])}"
                  if gc.get("unreachableBookies") else ""))
    _emit(api, gc.get("ledgers") or [], title="ledgers on the bookies",
          columns=["ledgerId", "state", "bytesOnDisk", "summary"])
    bookies = [{"bookie": b, **info, "lastGcRun": when(info.get("lastGcRunMs"))}
               for b, info in sorted((gc.get("bookies") or {}).items())]
    if bookies:
        _emit(api, bookies, title="bookies",
              columns=["bookie", "reachable", "readOnly", "entryLogs", "bytesAwaitingGc", "lastGcRun", "error"])



# ------------------------------------------------------------------ permissions (pulsar-admin style)

_role_opt = click.option("--role", required=True, help="Role to grant to or revoke from.")
_actions_opt = click.option("--actions", required=True,
                            help="Comma-separated actions, e.g. produce,consume.")


def _actions(text: str) -> list[str]:
    actions = [a.strip() for a in text.split(",") if a.strip()]
    if not actions:
        raise click.BadParameter("give at least one action", param_hint="--actions")
    return actions


@_cmd(namespaces, "permissions", _ns_arg)
def namespaces_permissions(api: _Api, namespace: str) -> None:
    """Show the roles granted actions on a namespace."""
    api.show(_nsp(namespace, "/permissions"), title=f"permissions of {namespace}")


@_cmd(namespaces, "grant-permission", _ns_arg, _role_opt, _actions_opt)
def namespaces_grant_permission(api: _Api, namespace: str, role: str, actions: str) -> None:
    """Grant a role actions (produce, consume) on every topic of a namespace."""
    api.do("POST", _nsp(namespace, f"/permissions/{quote(role, safe='')}"),
           f"granted {actions} on {namespace} to {role}", body=_actions(actions))


@_cmd(namespaces, "revoke-permission", _ns_arg, _role_opt)
def namespaces_revoke_permission(api: _Api, namespace: str, role: str) -> None:
    """Revoke a role's actions on a namespace."""
    api.do("DELETE", _nsp(namespace, f"/permissions/{quote(role, safe='')}"),
           f"revoked the permissions of {role} on {namespace}")


_subscription_opt = click.option("--subscription", required=True, help="Subscription name.")


@_cmd(namespaces, "subscription-permission", _ns_arg)
def namespaces_subscription_permission(api: _Api, namespace: str) -> None:
    """Show the roles allowed to use each subscription of a namespace."""
    api.show(_nsp(namespace, "/permissions/subscription"), title=f"subscription permissions of {namespace}")


@_cmd(namespaces, "grant-subscription-permission", _ns_arg, _subscription_opt,
      click.option("--roles", required=True, help="Comma-separated roles allowed to use the subscription."))
def namespaces_grant_subscription_permission(api: _Api, namespace: str, subscription: str, roles: str) -> None:
    """Allow roles to use a subscription on every topic of a namespace (then only they, super users
    and the tenant's admins may)."""
    names = [r.strip() for r in roles.split(",") if r.strip()]
    if not names:
        raise click.BadParameter("give at least one role", param_hint="--roles")
    api.do("POST", _nsp(namespace, f"/permissions/subscription/{quote(subscription, safe='')}"),
           f"allowed {', '.join(names)} to use subscription {subscription} on {namespace}", body=names)


@_cmd(namespaces, "revoke-subscription-permission", _ns_arg, _subscription_opt, _role_opt)
def namespaces_revoke_subscription_permission(api: _Api, namespace: str, subscription: str, role: str) -> None:
    """Remove a role from those allowed to use a subscription."""
    api.do("DELETE", _nsp(namespace, f"/permissions/{quote(subscription, safe='')}/{quote(role, safe='')}"),
           f"revoked {role}'s use of subscription {subscription} on {namespace}")


@_cmd(topics, "permissions", _topic_arg)
def topics_permissions(api: _Api, topic: str) -> None:
    """Show the roles granted actions on a topic (its namespace's grants included)."""
    api.show(f"{_tp(topic)}/permissions", title=f"permissions of {topic}")


@_cmd(topics, "grant-permission", _topic_arg, _role_opt, _actions_opt)
def topics_grant_permission(api: _Api, topic: str, role: str, actions: str) -> None:
    """Grant a role actions (produce, consume) on a topic."""
    api.do("POST", f"{_tp(topic)}/permissions/{quote(role, safe='')}", f"granted {actions} on {topic} to {role}",
           body=_actions(actions))


@_cmd(topics, "revoke-permission", _topic_arg, _role_opt)
def topics_revoke_permission(api: _Api, topic: str, role: str) -> None:
    """Revoke a role's actions on a topic."""
    api.do("DELETE", f"{_tp(topic)}/permissions/{quote(role, safe='')}",
           f"revoked the permissions of {role} on {topic}")


# ------------------------------------------------------------------ compaction

_COMPACTION_TEXT = {"NOT_RUN": "Compaction has not been run", "RUNNING": "Compaction is running",
                    "SUCCESS": "Compaction was a success", "ERROR": "Error in compaction"}


@_cmd(topics, "compact", _topic_arg)
def topics_compact(api: _Api, topic: str) -> None:
    """Start compacting a topic (the latest message per key, for read-compacted readers)."""
    api.do("PUT", f"{_tp(topic)}/compaction", f"compaction triggered for {topic}")


@_cmd(topics, "compaction-status", _topic_arg,
      click.option("--wait-complete", "-w", "wait", is_flag=True, help="Wait while compaction is running."))
def topics_compaction_status(api: _Api, topic: str, wait: bool) -> None:
    """Show a topic's compaction status (NOT_RUN, RUNNING, SUCCESS, ERROR and its reason).
    Exits with an error when the last compaction failed."""
    import time

    status = api.call("GET", f"{_tp(topic)}/compaction") or {}
    while wait and status.get("status") == "RUNNING":
        time.sleep(1)
        status = api.call("GET", f"{_tp(topic)}/compaction") or {}
    if api.as_json:
        click.echo(json.dumps(status, sort_keys=True))
    state = status.get("status", "")
    if state == "ERROR":
        raise click.ClickException(f"{_COMPACTION_TEXT['ERROR']}: {status.get('lastError') or 'unknown reason'}")
    if not api.as_json:
        click.echo(_COMPACTION_TEXT.get(state, state))


def _size_bytes(text: str) -> int:
    """``0``, ``1048576`` (bytes), ``100K``, ``10M``, ``2G``, ``1T`` -> bytes."""
    value = _with_units(text.strip().upper(), {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4},
                        "size", f"{text!r}: use bytes or a number with K/M/G/T")
    if value < 0:
        raise click.BadParameter(f"invalid size {text!r}: must not be negative")
    return value


@_cmd(namespaces, "set-compaction-threshold", _ns_arg,
      click.option("--threshold", "-t", required=True,
                   help="Compact a topic once its uncompacted backlog exceeds this size (bytes, or with "
                        "K/M/G/T; 0 = off)."))
def namespaces_set_compaction_threshold(api: _Api, namespace: str, threshold: str) -> None:
    """Set the namespace's automatic compaction threshold."""
    size = _size_bytes(threshold)
    api.do("POST", _nsp(namespace, "/compactionThreshold"), f"set compaction threshold of {namespace} to {size} bytes",
           size)


@_cmd(namespaces, "get-compaction-threshold", _ns_arg)
def namespaces_get_compaction_threshold(api: _Api, namespace: str) -> None:
    """Show the namespace's automatic compaction threshold in bytes (nothing when unset)."""
    _emit(api, api.call("GET", _nsp(namespace, "/compactionThreshold")))


@_cmd(namespaces, "remove-compaction-threshold", _ns_arg)
def namespaces_remove_compaction_threshold(api: _Api, namespace: str) -> None:
    """Remove the namespace's compaction threshold (the broker default applies)."""
    api.do("DELETE", _nsp(namespace, "/compactionThreshold"), f"removed the compaction threshold of {namespace}")
