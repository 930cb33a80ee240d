"""What every ``magnetar admin`` command shares: the call to the admin REST API, the output (tables
for humans, ``--json`` for scripts), the command shape, REST paths and argument parsers.

A command is ``fn(api, **values)`` made into a click command by `admin_command`, which adds
``--json`` and builds the `AdminApi` from the ``admin`` group's options. Each sub-group module
(`_admin_clusters`, `_admin_brokers`, `_admin_tenants`, `_admin_namespaces`, `_admin_topics`)
owns its click group and registers its own commands on it; `cmd_admin` adds the groups to the
``admin`` group. Imports go one way: `cmd_admin` -> the group modules -> this module.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import click
import httpx

from magnetar.common.admin_client import AdminClient, AdminError, json_body
from magnetar.common.durations import parse_duration
from protocols.pulsar import InvalidTopicNameError, TopicName

from . import _human as human

__all__ = [
    "DEFAULT_URL",
    "AdminApi",
    "admin_command",
    "emit",
    "done",
    "topic_path",
    "ns",
    "ns_path",
    "topic_rest_path",
    "sub_path",
    "message_id_json",
    "force_flag",
    "retention_mb",
    "size_bytes",
    "retention_minutes",
    "seconds",
    "NS_ARG",
    "TOPIC_ARG",
    "SUB_OPT",
    "FORCE_OPT",
    "PARTS_OPT",
    "ROLE_OPT",
    "ACTIONS_OPT",
    "actions_list",
    "INACTIVE_OPTS",
    "inactive_body",
]

DEFAULT_URL = "http://localhost:8080"


# ------------------------------------------------------------------ the call


class AdminApi:
    """One command's view of the admin REST API: where it is, with which credentials and TLS
    context, and whether to print JSON. A failed request raises `click.ClickException` with the
    server's reason (exit status 1)."""

    def __init__(
        self,
        url: str,
        as_json: bool,
        verify: ssl.SSLContext | bool = True,
        token: str | None = None,
        authorization: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.as_json = as_json
        self.verify = verify  # for https:// URLs: the context of the --tls-* options
        if authorization:  # a whole header value (--auth-plugin ...AuthenticationBasic)
            self.headers = {"Authorization": authorization}
        else:
            self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.query: dict[str, str] = {}  # sent with every request (pulsar-admin flags such as -ap)

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """The decoded answer (JSON, text, or None when empty)."""
        return json_body(self.request(method, path, body, params))

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> httpx.Response:
        """The response of a successful request, 307s to the owning broker followed with the
        credentials (a failure raises `click.ClickException` with the reason)."""
        try:
            with AdminClient(self.url, headers=self.headers, verify=self.verify) as client:
                return client.request(method, path, body, params={**self.query, **(params or {})} or None)
        except AdminError as exc:
            if not exc.status:
                raise click.ClickException(f"cannot reach the admin API at {self.url}: {exc.reason}") from None
            raise click.ClickException(f"{exc.reason} (HTTP {exc.status})") from None

    def show(self, path: str, *, title: str | None = None, columns: list[str] | None = None) -> None:
        """GET ``path`` and print the answer (`emit`)."""
        emit(self, self.call("GET", path), title=title, columns=columns)

    def do(self, method: str, path: str, what: str, body: Any = None, params: dict[str, Any] | None = None) -> None:
        """Send a change and print ``what`` once it succeeded (`done`)."""
        self.call(method, path, body, params)
        done(self, what)


def _api(ctx: click.Context, as_json: bool) -> AdminApi:
    from ._pulsar_admin_names import QUERY_META

    obj = ctx.find_object(dict) or {}
    api = AdminApi(
        obj.get("url", DEFAULT_URL),
        as_json or obj.get("json", False),
        obj.get("verify", True),
        obj.get("token"),
        obj.get("authorization"),
    )
    api.query = dict(ctx.meta.get(QUERY_META) or {})
    return api


# ------------------------------------------------------------------ output


def emit(api: AdminApi, value: Any, *, title: str | None = None, columns: list[str] | None = None) -> None:
    """JSON when asked; else text a person reads (`_human.show`): a list as a one-column table, a
    list of dicts / dict as a table, sizes, durations and times in units."""
    if api.as_json:
        click.echo(json.dumps(value, indent=2, sort_keys=True))
        return
    human.show(value, title=title, columns=columns)


def done(api: AdminApi, what: str) -> None:
    """Report a change that succeeded (``{"ok": true, "message": ...}`` with ``--json``)."""
    if api.as_json:
        click.echo(json.dumps({"ok": True, "message": what}))
    else:
        click.echo(what)


# ------------------------------------------------------------------ the command shape

_json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def admin_command(
    group: click.Group, name: str, *params: Callable[[Any], Any]
) -> Callable[[Callable[..., None]], click.Command]:
    """Register ``fn(api, **values)`` as ``group name``: ``params`` (click arguments and options, in
    the order given) then ``--json``; the docstring is the help. Every command has this shape, so
    the `AdminApi` built from the group options and ``--json`` is made here, once. Call it only in
    the module that owns ``group``, so that importing a module never adds commands elsewhere."""

    def deco(fn: Callable[..., None]) -> click.Command:
        @functools.wraps(fn)
        def command_body(ctx: click.Context, as_json: bool, **values: Any) -> None:
            fn(_api(ctx, as_json), **values)

        f: Any = _json_flag(click.pass_context(command_body))
        for param in reversed(params):
            f = param(f)
        return group.command(name)(f)

    return deco


# ------------------------------------------------------------------ REST paths and arguments

NS_ARG = click.argument("namespace")
TOPIC_ARG = click.argument("topic")
SUB_OPT = click.option("--subscription", "-s", required=True, help="Subscription name.")
FORCE_OPT = click.option("--force", "-f", is_flag=True, help="Also when producers or consumers are connected.")
PARTS_OPT = click.option("--partitions", "-p", type=int, required=True, help="Number of partitions.")

ROLE_OPT = click.option("--role", required=True, help="Role to grant to or revoke from.")
ACTIONS_OPT = click.option("--actions", required=True, help="Comma-separated actions, e.g. produce,consume.")


def actions_list(text: str) -> list[str]:
    """The actions of ``--actions`` (at least one)."""
    actions = [a.strip() for a in text.split(",") if a.strip()]
    if not actions:
        raise click.BadParameter("give at least one action", param_hint="--actions")
    return actions


INACTIVE_OPTS = (
    click.option(
        "--enable-delete-while-inactive/--disable-delete-while-inactive",
        "-e/-d",
        "enable",
        required=True,
        help="Delete topics once inactive, or never.",
    ),
    click.option(
        "--max-inactive-duration",
        "-t",
        "duration",
        required=True,
        help="How long a topic must stay inactive: seconds, or 10m/2h/1d.",
    ),
    click.option(
        "--delete-mode",
        "-m",
        "mode",
        required=True,
        type=click.Choice(["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]),
        help="Inactive means no subscriptions, or only caught-up ones (and no producers or consumers).",
    ),
)


def inactive_body(enable: bool, duration: str, mode: str) -> dict[str, Any]:
    """Pulsar's InactiveTopicPolicies JSON of the `INACTIVE_OPTS` values."""
    return {
        "inactiveTopicDeleteMode": mode,
        "maxInactiveDurationSeconds": seconds(duration),
        "deleteWhileInactive": enable,
    }


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


def ns(namespace: str) -> str:
    """``tenant/namespace``, checked; `click.BadParameter` otherwise."""
    parts = namespace.split("/")
    if len(parts) != 2 or not all(parts):
        raise click.BadParameter(f"invalid namespace {namespace!r}: use tenant/namespace")
    return namespace


def ns_path(namespace: str, suffix: str = "") -> str:
    """The REST path of a namespace (validated) or of one of its policies."""
    return f"/admin/v2/namespaces/{ns(namespace)}{suffix}"


def topic_rest_path(topic: str) -> str:
    """The REST path of a topic: ``/admin/v2/persistent/...``, or the non-persistent root."""
    try:
        name = TopicName.parse(topic)
    except InvalidTopicNameError:
        name = None  # topic_path reports it
    if name is not None and not name.persistent:
        # non-persistent topics have their own REST root (stats, partitioned-stats, partitions)
        return f"/admin/v2/non-persistent/{name.tenant}/{name.namespace}/{name.encoded_local_name}"
    return f"/admin/v2/persistent/{topic_path(topic)}"


def sub_path(topic: str, subscription: str) -> str:
    """The REST path of a subscription of a topic."""
    return f"{topic_rest_path(topic)}/subscription/{quote(subscription, safe='')}"


def message_id_json(text: str) -> dict[str, int]:
    """``earliest``, ``latest`` or ``ledgerId:entryId`` as Pulsar's MessageIdImpl JSON."""
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if text == "latest":
        return {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}
    try:
        ledger, entry = (int(x) for x in text.split(":")[:2])
    except ValueError:
        raise click.BadParameter(f"message id must be earliest, latest or ledgerId:entryId, not {text!r}") from None
    return {"ledgerId": ledger, "entryId": entry}


def force_flag(force: bool) -> dict[str, str]:
    """The ``force`` query parameter."""
    return {"force": str(force).lower()}


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


def retention_mb(text: str) -> int:
    """pulsar-admin's retention size: ``-1`` (infinite), bytes, or a number with K/M/G/T -> whole MB
    (as Pulsar: under 1 MB is 0, no retention)."""
    size = _with_units(
        text.strip().upper(),
        {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4},
        "size",
        f"{text!r}: use -1, bytes, or a number with K/M/G/T",
    )
    return size if size < 0 else size // (1024 * 1024)


def size_bytes(text: str) -> int:
    """``0``, ``1048576`` (bytes), ``100K``, ``10M``, ``2G``, ``1T`` -> bytes."""
    value = _with_units(
        text.strip().upper(),
        {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4},
        "size",
        f"{text!r}: use bytes or a number with K/M/G/T",
    )
    if value < 0:
        raise click.BadParameter(f"invalid size {text!r}: must not be negative")
    return value


def _whole(value: float) -> int:
    """A non-zero time rounds down to whole units but never to 0 (0 means "none"); a negative
    one (-1: infinite) stays as written, for the broker to judge."""
    if value < 0:
        return int(value)
    return 0 if value == 0 else max(1, int(value))


def retention_minutes(text: str) -> int:
    """pulsar-admin's retention time: ``-1`` (infinite), seconds, or a number with s/m/h/d/w -> whole
    minutes (as Pulsar: under a minute is 0, no retention)."""
    value = seconds(text)
    return value if value < 0 else value // 60


def seconds(text: str) -> int:
    """``600`` (seconds), ``90s``, ``10m``, ``2h``, ``1d``, ``1w`` -> seconds (pulsar-admin's durations)."""
    try:
        return _whole(parse_duration(text))
    except ValueError:
        raise click.BadParameter(f"invalid duration {text!r}: use seconds, or a number with s/m/h/d/w") from None
