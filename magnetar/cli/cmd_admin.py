"""``magnetar admin``: a pulsar-admin style CLI over the broker's admin REST API.

Tables for humans, ``--json`` for scripts. A failed request prints the server's ``reason`` and
exits with status 1 (2 for usage errors, as click does).
"""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import quote

import click
import httpx

__all__ = ["command", "topic_path"]

_DEFAULT_URL = "http://localhost:8080"


# ------------------------------------------------------------------ plumbing


class _Api:
    def __init__(self, url: str, as_json: bool) -> None:
        self.url = url.rstrip("/")
        self.as_json = as_json

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            with httpx.Client(base_url=self.url, timeout=30) as c:
                kwargs: dict[str, Any] = {"params": params}
                if body is not None:
                    kwargs["json"] = body
                r = c.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach the admin API at {self.url}: {exc}") from None
        if r.status_code >= 400:
            try:
                reason = r.json().get("reason") or r.text
            except ValueError:
                reason = r.text or r.reason_phrase
            raise click.ClickException(f"{reason} (HTTP {r.status_code})")
        if r.status_code == 204 or not r.content:
            return None
        try:
            return r.json()
        except ValueError:
            return r.text


def _api(ctx: click.Context, as_json: bool) -> _Api:
    obj = ctx.find_object(dict) or {}
    return _Api(obj.get("url", _DEFAULT_URL), as_json or obj.get("json", False))


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x``, ``t/ns/x`` or ``x`` (public/default) -> ``t/ns/encoded-x``.
    Raises `click.BadParameter` for other forms."""
    rest = topic
    if "://" in topic:
        domain, _, rest = topic.partition("://")
        if domain != "persistent":
            raise click.BadParameter(f"only persistent topics are supported, not {domain}://")
    elif "/" not in topic:
        rest = f"public/default/{topic}"
    parts = rest.split("/", 2)
    if len(parts) != 3 or not all(parts):
        raise click.BadParameter(f"invalid topic name {topic!r}: use persistent://tenant/namespace/topic")
    return f"{parts[0]}/{parts[1]}/{quote(parts[2], safe='')}"


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


def _console():  # noqa: ANN202
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


# ------------------------------------------------------------------ the group


@click.group("admin")
@click.option("--admin-url", envvar="MAGNETAR_ADMIN_URL", default=_DEFAULT_URL, show_default=True,
              help="Base URL of the broker's admin REST API (env MAGNETAR_ADMIN_URL).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def command(ctx: click.Context, admin_url: str, as_json: bool) -> None:
    """Administer tenants, namespaces and topics (pulsar-admin style)."""
    ctx.obj = {"url": admin_url, "json": as_json}


@command.group("clusters")
def clusters() -> None:
    """Clusters."""


@clusters.command("list")
@_json_flag
@click.pass_context
def clusters_list(ctx: click.Context, as_json: bool) -> None:
    """List clusters."""
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", "/admin/v2/clusters"), columns=["cluster"])


# ------------------------------------------------------------------ tenants


@command.group("tenants")
def tenants() -> None:
    """Tenants."""


@tenants.command("list")
@_json_flag
@click.pass_context
def tenants_list(ctx: click.Context, as_json: bool) -> None:
    """List tenants."""
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", "/admin/v2/tenants"), columns=["tenant"])


@tenants.command("get")
@click.argument("tenant")
@_json_flag
@click.pass_context
def tenants_get(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", f"/admin/v2/tenants/{tenant}"), title=tenant)


@tenants.command("create")
@click.argument("tenant")
@click.option("--admin-roles", "-r", default="", help="Comma-separated admin roles.")
@click.option("--allowed-clusters", "-c", default="", help="Comma-separated clusters (default: this one).")
@_json_flag
@click.pass_context
def tenants_create(ctx: click.Context, tenant: str, admin_roles: str, allowed_clusters: str, as_json: bool) -> None:
    """Create a tenant."""
    api = _api(ctx, as_json)
    body = {"adminRoles": [r for r in admin_roles.split(",") if r],
            "allowedClusters": [c for c in allowed_clusters.split(",") if c]}
    api.call("PUT", f"/admin/v2/tenants/{tenant}", body)
    _done(api, f"created tenant {tenant}")


@tenants.command("delete")
@click.argument("tenant")
@_json_flag
@click.pass_context
def tenants_delete(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """Delete a tenant (it must have no namespaces)."""
    api = _api(ctx, as_json)
    api.call("DELETE", f"/admin/v2/tenants/{tenant}")
    _done(api, f"deleted tenant {tenant}")



# ------------------------------------------------------------------ namespaces


@command.group("namespaces")
def namespaces() -> None:
    """Namespaces and their policies."""


def _ns_cmd(name: str, help_text: str):  # noqa: ANN202
    def deco(fn):  # noqa: ANN001, ANN202
        fn.__doc__ = help_text
        return namespaces.command(name)(click.argument("namespace")(_json_flag(click.pass_context(fn))))
    return deco


@namespaces.command("list")
@click.argument("tenant")
@_json_flag
@click.pass_context
def namespaces_list(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List the namespaces of a tenant."""
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", f"/admin/v2/namespaces/{tenant}"), columns=["namespace"])


@_ns_cmd("create", "Create a namespace (tenant/namespace).")
def namespaces_create(ctx: click.Context, namespace: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("PUT", f"/admin/v2/namespaces/{_ns(namespace)}")
    _done(api, f"created namespace {namespace}")


@namespaces.command("delete")
@click.argument("namespace")
@click.option("--force", "-f", is_flag=True, help="Delete its topics too.")
@_json_flag
@click.pass_context
def namespaces_delete(ctx: click.Context, namespace: str, force: bool, as_json: bool) -> None:
    """Delete a namespace (it must be empty unless --force)."""
    api = _api(ctx, as_json)
    api.call("DELETE", f"/admin/v2/namespaces/{_ns(namespace)}", params={"force": str(force).lower()})
    _done(api, f"deleted namespace {namespace}")


@_ns_cmd("policies", "Show every policy of a namespace.")
def namespaces_policies(ctx: click.Context, namespace: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", f"/admin/v2/namespaces/{_ns(namespace)}"), title=namespace)


def _size_mb(text: str) -> int:
    """``-1``, ``100`` (MB), ``100M``, ``2G``, ``512K`` -> MB (at least 1 for a non-zero size)."""
    t = text.strip().upper()
    if t in ("-1", "0"):
        return int(t)
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    try:
        if t[-1] in units:
            return max(1, int(float(t[:-1]) * units[t[-1]]))
        return int(t)
    except (ValueError, IndexError):
        raise click.BadParameter(f"invalid size {text!r}: use -1, MB, or a number with K/M/G/T") from None


def _minutes(text: str) -> int:
    """``-1``, ``30`` (minutes), ``30m``, ``2h``, ``7d``, ``90s`` -> minutes."""
    t = text.strip().lower()
    if t in ("-1", "0"):
        return int(t)
    units = {"s": 1 / 60, "m": 1, "h": 60, "d": 1440, "w": 10080}
    try:
        if t[-1] in units:
            return max(1, int(float(t[:-1]) * units[t[-1]]))
        return int(t)
    except (ValueError, IndexError):
        raise click.BadParameter(f"invalid time {text!r}: use -1, minutes, or a number with s/m/h/d/w") from None


@namespaces.command("set-retention")
@click.argument("namespace")
@click.option("--time", "-t", "time_", required=True, help="Retention time: -1 (infinite), minutes, or 30m/2h/7d.")
@click.option("--size", "-s", required=True, help="Retention size: -1 (infinite), MB, or 512M/10G.")
@_json_flag
@click.pass_context
def namespaces_set_retention(ctx: click.Context, namespace: str, time_: str, size: str, as_json: bool) -> None:
    """Set the retention of consumed messages."""
    api = _api(ctx, as_json)
    body = {"retentionTimeInMinutes": _minutes(time_), "retentionSizeInMB": _size_mb(size)}
    api.call("POST", f"/admin/v2/namespaces/{_ns(namespace)}/retention", body)
    _done(api, f"set retention of {namespace}")


@_ns_cmd("get-retention", "Show the retention of a namespace.")
def namespaces_get_retention(ctx: click.Context, namespace: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", f"/admin/v2/namespaces/{_ns(namespace)}/retention"), title="retention")


@namespaces.command("set-message-ttl")
@click.argument("namespace")
@click.option("--ttl", "-ttl", "ttl", type=int, required=True, help="Message TTL in seconds (0 = off).")
@_json_flag
@click.pass_context
def namespaces_set_ttl(ctx: click.Context, namespace: str, ttl: int, as_json: bool) -> None:
    """Set the message TTL."""
    api = _api(ctx, as_json)
    api.call("POST", f"/admin/v2/namespaces/{_ns(namespace)}/messageTTL", ttl)
    _done(api, f"set message TTL of {namespace} to {ttl}s")


@_ns_cmd("get-message-ttl", "Show the message TTL of a namespace.")
def namespaces_get_ttl(ctx: click.Context, namespace: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", f"/admin/v2/namespaces/{_ns(namespace)}/messageTTL"))


@namespaces.command("set-backlog-quota")
@click.argument("namespace")
@click.option("--limit-size", "-l", "limit_size", type=int, default=-1, help="Backlog size limit in bytes.")
@click.option("--limit-time", "-lt", "limit_time", type=int, default=-1, help="Backlog age limit in seconds.")
@click.option("--policy", "-p", required=True,
              type=click.Choice(["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]))
@click.option("--type", "-t", "quota_type", default="destination_storage", show_default=True,
              type=click.Choice(["destination_storage", "message_age"]))
@_json_flag
@click.pass_context
def namespaces_set_quota(ctx: click.Context, namespace: str, limit_size: int, limit_time: int, policy: str,
                         quota_type: str, as_json: bool) -> None:
    """Set a backlog quota."""
    api = _api(ctx, as_json)
    body = {"limitSize": limit_size, "limitTime": limit_time, "policy": policy}
    api.call("POST", f"/admin/v2/namespaces/{_ns(namespace)}/backlogQuota", body,
             params={"backlogQuotaType": quota_type})
    _done(api, f"set {quota_type} backlog quota of {namespace}")


@_ns_cmd("get-backlog-quotas", "Show the backlog quotas of a namespace.")
def namespaces_get_quotas(ctx: click.Context, namespace: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    quotas = api.call("GET", f"/admin/v2/namespaces/{_ns(namespace)}/backlogQuotaMap") or {}
    _emit(api, quotas if api.as_json else [{"type": k, **v} for k, v in quotas.items()],
          columns=["type", "limitSize", "limitTime", "policy"])


@namespaces.command("set-deduplication")
@click.argument("namespace")
@click.option("--enable/--disable", "-e/-d", required=True, help="Turn message deduplication on or off.")
@_json_flag
@click.pass_context
def namespaces_set_dedup(ctx: click.Context, namespace: str, enable: bool, as_json: bool) -> None:
    """Turn message deduplication on or off (applies to topics loaded afterwards)."""
    api = _api(ctx, as_json)
    api.call("POST", f"/admin/v2/namespaces/{_ns(namespace)}/deduplication", enable)
    _done(api, f"{'enabled' if enable else 'disabled'} deduplication on {namespace}")


# ------------------------------------------------------------------ topics


@command.group("topics")
def topics() -> None:
    """Persistent topics and their subscriptions."""


def _topic_cmd(name: str, help_text: str, *options: Any):  # noqa: ANN202
    def deco(fn):  # noqa: ANN001, ANN202
        fn.__doc__ = help_text
        f = click.pass_context(fn)
        f = _json_flag(f)
        for opt in reversed(options):
            f = opt(f)
        return topics.command(name)(click.argument("topic")(f))
    return deco


_sub_opt = click.option("--subscription", "-s", required=True, help="Subscription name.")
_force_opt = click.option("--force", "-f", is_flag=True, help="Also when producers or consumers are connected.")
_parts_opt = click.option("--partitions", "-p", type=int, required=True, help="Number of partitions.")


def _tp(topic: str) -> str:
    return f"/admin/v2/persistent/{topic_path(topic)}"


@topics.command("list")
@click.argument("namespace")
@_json_flag
@click.pass_context
def topics_list(ctx: click.Context, namespace: str, as_json: bool) -> None:
    """List the topics of a namespace (partitions by name)."""
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", f"/admin/v2/persistent/{_ns(namespace)}"), columns=["topic"])


@_topic_cmd("create", "Create a non-partitioned topic.")
def topics_create(ctx: click.Context, topic: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("PUT", _tp(topic))
    _done(api, f"created topic {topic}")


@_topic_cmd("delete", "Delete a topic and its data.", _force_opt)
def topics_delete(ctx: click.Context, topic: str, force: bool, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("DELETE", _tp(topic), params={"force": str(force).lower()})
    _done(api, f"deleted topic {topic}")


@_topic_cmd("create-partitioned-topic", "Create a partitioned topic.", _parts_opt)
def topics_create_partitioned(ctx: click.Context, topic: str, partitions: int, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("PUT", _tp(topic) + "/partitions", partitions)
    _done(api, f"created partitioned topic {topic} with {partitions} partitions")


@_topic_cmd("update-partitioned-topic", "Raise the number of partitions of a topic.", _parts_opt)
def topics_update_partitioned(ctx: click.Context, topic: str, partitions: int, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("POST", _tp(topic) + "/partitions", partitions)
    _done(api, f"updated {topic} to {partitions} partitions")


@_topic_cmd("get-partitioned-topic-metadata", "Show the number of partitions (0: not partitioned).")
def topics_get_partitioned(ctx: click.Context, topic: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", _tp(topic) + "/partitions"))


@_topic_cmd("stats", "Show a topic's rates, counters, producers and subscriptions.")
def topics_stats(ctx: click.Context, topic: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    stats = api.call("GET", _tp(topic) + "/stats")
    if api.as_json:
        _emit(api, stats)
        return
    _emit(api, {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}, title=topic)
    _emit(api, [{"name": n, **{k: s.get(k) for k in ("type", "msgBacklog", "backlogSize", "unackedMessages",
                                                        "msgOutCounter", "markDeletePosition")},
                 "consumers": len(s.get("consumers", []))} for n, s in stats.get("subscriptions", {}).items()],
          title="subscriptions", columns=["name", "type", "msgBacklog", "backlogSize", "unackedMessages",
                                          "msgOutCounter", "markDeletePosition", "consumers"])
    if stats.get("publishers"):
        _emit(api, stats["publishers"], title="producers",
              columns=["producerName", "accessMode", "msgInCounter", "bytesInCounter", "address"])


@_topic_cmd("stats-internal", "Show a topic's managed ledger: ledgers and cursors.")
def topics_stats_internal(ctx: click.Context, topic: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    stats = api.call("GET", _tp(topic) + "/internalStats")
    if api.as_json:
        _emit(api, stats)
        return
    _emit(api, {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}, title=topic)
    _emit(api, stats.get("ledgers", []), title="ledgers", columns=["ledgerId", "entries", "size", "timestamp"])
    _emit(api, [{"name": n, **c} for n, c in stats.get("cursors", {}).items()], title="cursors",
          columns=["name", "markDeletePosition", "readPosition", "individuallyDeletedMessages", "state"])


@_topic_cmd("subscriptions", "List a topic's subscriptions.")
def topics_subscriptions(ctx: click.Context, topic: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    _emit(api, api.call("GET", _tp(topic) + "/subscriptions"), columns=["subscription"])


@_topic_cmd("create-subscription", "Create a durable subscription.", _sub_opt,
            click.option("--messageId", "-m", "message_id", default="latest", show_default=True,
                         help="Start: earliest, latest or ledgerId:entryId."))
def topics_create_subscription(ctx: click.Context, topic: str, subscription: str, message_id: str,
                               as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("PUT", f"{_tp(topic)}/subscription/{quote(subscription, safe='')}", _message_id(message_id))
    _done(api, f"created subscription {subscription} on {topic}")


@_topic_cmd("unsubscribe", "Delete a subscription.", _sub_opt, _force_opt)
def topics_unsubscribe(ctx: click.Context, topic: str, subscription: str, force: bool, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("DELETE", f"{_tp(topic)}/subscription/{quote(subscription, safe='')}",
             params={"force": str(force).lower()})
    _done(api, f"deleted subscription {subscription} of {topic}")


@_topic_cmd("skip", "Skip messages of a subscription's backlog.", _sub_opt,
            click.option("--count", "-n", type=int, required=True, help="Messages to skip."))
def topics_skip(ctx: click.Context, topic: str, subscription: str, count: int, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("POST", f"{_tp(topic)}/subscription/{quote(subscription, safe='')}/skip/{count}")
    _done(api, f"skipped {count} messages of {subscription}")


@_topic_cmd("clear-backlog", "Acknowledge a subscription's whole backlog.", _sub_opt)
def topics_clear_backlog(ctx: click.Context, topic: str, subscription: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("POST", f"{_tp(topic)}/subscription/{quote(subscription, safe='')}/skip_all")
    _done(api, f"cleared the backlog of {subscription}")


@_topic_cmd("reset-cursor", "Move a subscription to a publish time or a message id.", _sub_opt,
            click.option("--time", "-t", "time_ms", type=int, help="Publish time in ms since the epoch."),
            click.option("--messageId", "-m", "message_id", help="earliest, latest or ledgerId:entryId."))
def topics_reset_cursor(ctx: click.Context, topic: str, subscription: str, time_ms: int | None,
                        message_id: str | None, as_json: bool) -> None:
    if (time_ms is None) == (message_id is None):
        raise click.UsageError("give exactly one of --time and --messageId")
    api = _api(ctx, as_json)
    base = f"{_tp(topic)}/subscription/{quote(subscription, safe='')}/resetcursor"
    if time_ms is not None:
        api.call("POST", f"{base}/{time_ms}")
    else:
        api.call("POST", base, _message_id(message_id or ""))
    _done(api, f"reset {subscription} of {topic}")


@_topic_cmd("unload", "Unload a topic (clients reconnect and load it again).")
def topics_unload(ctx: click.Context, topic: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    api.call("PUT", _tp(topic) + "/unload")
    _done(api, f"unloaded {topic}")


@_topic_cmd("explain-storage", "Explain each ledger of a topic: size, age, why kept or deleted.")
def topics_explain_storage(ctx: click.Context, topic: str, as_json: bool) -> None:
    api = _api(ctx, as_json)
    ex = api.call("GET", _tp(topic) + "/explain-storage")
    if api.as_json:
        _emit(api, ex)
        return
    pol = ex.get("policies") or {}
    click.echo(f"{ex['topic']}: {ex['totalSize']} bytes; retention {pol.get('retention')}, "
               f"TTL {pol.get('messageTTLInSeconds')}s; deletable now: {ex.get('deletableNow')}")
    _emit(api, ex.get("ledgers", []), title="ledgers",
          columns=["ledgerId", "entries", "size", "ageSeconds", "decision", "reason", "pinnedBy", "explanation"])
    _emit(api, [{"cursor": n, **c} for n, c in (ex.get("cursors") or {}).items()], title="cursors",
          columns=["cursor", "markDeletePosition", "backlog", "backlogSize", "pinsLedgers"])
    last = ex.get("lastRetentionCheck")
    if last:
        click.echo(f"last retention check at {last.get('checkedAtMs')} ms: trimmed {last.get('trimmed')} "
                   f"({last.get('trimmedBytes')} bytes); errors: {last.get('errors') or 'none'}")
    if ex.get("bookieGc") is not None:
        _emit_bookie_gc(api, ex["bookieGc"])


def _emit_bookie_gc(api: _Api, gc: dict[str, Any]) -> None:
    """The ``bookieGc`` part of explain-storage as tables: one row per ledger, one per bookie."""
    click.echo(f"bookie GC: {gc.get('topicBytesAwaitingGc', 0)} bytes of this topic await GC"
               + (f"; unreachable bookies: {', '.join(gc['unreachableBookies'])}"
                  if gc.get("unreachableBookies") else ""))
    _emit(api, gc.get("ledgers") or [], title="ledgers on the bookies",
          columns=["ledgerId", "state", "bytesOnDisk", "summary"])
    bookies = [{"bookie": b, **info} for b, info in sorted((gc.get("bookies") or {}).items())]
    if bookies:
        _emit(api, bookies, title="bookies",
              columns=["bookie", "reachable", "readOnly", "entryLogs", "bytesAwaitingGc", "lastGcRunMs", "error"])

