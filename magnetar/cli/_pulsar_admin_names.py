"""pulsar-admin's spellings on ``magnetar admin``: every option name (long and short) pulsar-admin
4.0 documents for a command Magnetar implements is accepted, and so are its names of commands
Magnetar has under another name.

Magnetar's own options keep their names; this module adds, per ``(group, command)``:

* `ALIASES`: pulsar-admin's names of one of Magnetar's options (by its parameter name), added to
  that option, which then answers to both;
* `QUERY_FLAGS`: pulsar-admin flags that are query parameters of the command's REST request,
  added as flags that send that parameter (``-ap`` sends ``applied=true``);
* `IGNORED`: options whose effect Magnetar always has, or that change nothing here; accepted and
  said so in ``--help``;
* `UNSUPPORTED`: options for what Magnetar does not do; accepted as names (hidden from ``--help``)
  and refused when given, with exit status 2 and the reason, rather than "No such option".

`COMMAND_ALIASES` maps pulsar-admin's command names to Magnetar's (`HelpGroup` resolves them).
`apply` installs all of it on the ``admin`` group once its commands are registered; it is
idempotent. ``tests/test_cli_pulsar_admin_names.py`` checks the result against pulsar-admin's
option list (``tests/pulsar_admin_4_0_options.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from ._help import HelpGroup

__all__ = ["ALIASES", "COMMAND_ALIASES", "IGNORED", "QUERY_FLAGS", "QUERY_META", "UNSUPPORTED", "apply"]

QUERY_META = "magnetar.admin.query"
"""``click.Context.meta`` key of the query parameters `QUERY_FLAGS` set for the command's requests."""

Key = tuple[str, str]

ALIASES: Mapping[Key, Mapping[str, str]] = {
    ("namespaces", "clear-backlog"): {"-force": "force"},
    ("namespaces", "set-offload-policies"): {
        "--maxBlockSize": "max_block",
        "-mbs": "max_block",
        "--readBufferSize": "read_buffer",
        "-rbs": "read_buffer",
        "-oat": "threshold",
        "-oats": "threshold_s",
    },
    ("namespaces", "grant-subscription-permission"): {"-rs": "roles", "-s": "subscription"},
    ("namespaces", "revoke-subscription-permission"): {"-r": "role", "-s": "subscription"},
    ("namespaces", "set-backlog-quota"): {"--limit": "limit_size", "--limitTime": "limit_time"},
    ("namespaces", "set-max-unacked-messages-per-consumer"): {"--max-unacked-messages-per-topic": "value"},
    ("namespaces", "set-message-ttl"): {"--messageTTL": "ttl"},
    ("topics", "get-inactive-topic-policies"): {"-ap": "applied"},
    ("topics", "grant-permission"): {"-a": "actions", "-r": "role"},
    ("topics", "revoke-permission"): {"-r": "role"},
    ("topics", "set-max-unacked-messages-on-consumer"): {"--maxNum": "value"},
    ("topics", "set-max-unacked-messages-on-subscription"): {"--maxNum": "value"},
}

OptionSpec = tuple[tuple[str, ...], bool, str]  # names, takes a value, why

_APPLIED: dict[tuple[str, ...], str] = {("-ap", "--applied"): "applied"}
_STATS: dict[tuple[str, ...], str] = {
    ("-etb", "--get-earliest-time-in-backlog"): "getEarliestTimeInBacklog",
    ("-sbs", "--get-subscription-backlog-size"): "subscriptionBacklogSize",
}

QUERY_FLAGS: Mapping[Key, Mapping[tuple[str, ...], str]] = {
    **{
        ("topics", name): _APPLIED
        for name in (
            "get-dispatch-rate",
            "get-max-consumers",
            "get-max-producers",
            "get-max-unacked-messages-on-consumer",
            "get-max-unacked-messages-on-subscription",
            "get-subscribe-rate",
            "get-subscription-dispatch-rate",
        )
    },
    ("topics", "stats"): _STATS,
    ("topics", "partitioned-stats"): {**_STATS, ("-gpb", "--get-precise-backlog"): "getPreciseBacklog"},
}

_NO_SERVER_MARKERS = "Magnetar writes no server markers (no replicated-subscription snapshots, no transactions)"

IGNORED: Mapping[Key, list[OptionSpec]] = {
    ("broker-stats", "monitoring-metrics"): [(("-i", "--indent"), False, "--json output is always indented")],
    ("broker-stats", "topics"): [(("-i", "--indent"), False, "--json output is always indented")],
    ("topics", "peek-messages"): [
        (("-ssm", "--show-server-marker"), False, _NO_SERVER_MARKERS),
        (("-til", "--transaction-isolation-level"), True, "there are no transactions, so every level reads the same"),
    ],
    ("topics", "list"): [(("-ist", "--include-system-topic"), False, "Magnetar has no system topics")],
    ("namespaces", "create"): [(("-c", "--clusters"), True, "a namespace is served by the cluster it is created in")],
    ("topics", "update-partitioned-topic"): [
        (("-ulo", "--update-local-only"), False, "every update is local: update the partitions in each cluster")
    ],
}

_NO_S3_ROLE = "S3 credentials are an access key (--aws-id, --aws-secret); assumed roles are not supported"
_CLUSTER_URLS = "a cluster record holds its service and broker URLs only"
_CLUSTER_OPTIONS: list[OptionSpec] = [
    ((name,), value, _CLUSTER_URLS)
    for name, value in (
        ("--auth-parameters", True),
        ("--auth-plugin", True),
        ("--cluster-config-file", True),
        ("--listener-name", True),
        ("--proxy-protocol", True),
        ("--proxy-url", True),
        ("--tls-allow-insecure", False),
        ("--tls-certs-filepath", True),
        ("--tls-enable", False),
        ("--tls-enable-keystore", False),
        ("--tls-factory-plugin", True),
        ("--tls-factory-plugin-params", True),
        ("--tls-key-filepath", True),
        ("--tls-key-store", True),
        ("--tls-key-store-pwd", True),
        ("--tls-key-store-type", True),
        ("--tls-trust-certs-filepath", True),
        ("--tls-trust-store", True),
        ("--tls-trust-store-pwd", True),
        ("--tls-trust-store-type", True),
    )
]
_RELATIVE_RATE: list[OptionSpec] = [(("-rp", "--relative-to-publish-rate"), False, "dispatch rates are absolute")]

UNSUPPORTED: Mapping[Key, list[OptionSpec]] = {
    ("clusters", "create"): _CLUSTER_OPTIONS,
    ("clusters", "update"): _CLUSTER_OPTIONS,
    ("clusters", "delete"): [(("-a", "--all"), False, "delete the failure domains first")],
    ("clusters", "list"): [(("-c", "--current"), False, "list them all")],
    ("namespaces", "clear-backlog"): [(("-b", "--bundle"), True, "the backlog of a whole namespace only")],
    ("namespaces", "unsubscribe"): [(("-b", "--bundle"), True, "a whole namespace only")],
    ("namespaces", "create"): [
        (("-b", "--bundles"), True, "a namespace starts with defaultNumberOfNamespaceBundles bundles")
    ],
    ("namespaces", "set-dispatch-rate"): _RELATIVE_RATE,
    ("namespaces", "set-subscription-dispatch-rate"): _RELATIVE_RATE,
    ("topics", "set-dispatch-rate"): _RELATIVE_RATE,
    ("topics", "set-subscription-dispatch-rate"): _RELATIVE_RATE,
    ("namespaces", "set-offload-policies"): [
        (("--s3-role", "-ro"), True, _NO_S3_ROLE),
        (("--s3-role-session-name", "-rsn"), True, _NO_S3_ROLE),
    ],
    ("namespaces", "set-offload-threshold"): [
        (("-t", "--time"), True, "a time threshold is set with set-offload-threshold-in-seconds")
    ],
    ("namespaces", "split-bundle"): [
        (("-san", "--split-algorithm-name"), True, "a bundle is split at the middle of its range"),
        (("-sb", "--split-boundaries"), True, "a bundle is split at the middle of its range"),
        (("-bt", "--bundle-type"), True, "a bundle is split at the middle of its range"),
    ],
    ("namespaces", "unload"): [(("-d", "--destinationBroker"), True, "the load manager's leader places bundles")],
    ("tenants", "delete"): [(("-f", "--force"), False, "delete its namespaces first")],
    ("topics", "create"): [(("-m", "--metadata"), True, "topics carry no properties")],
    ("topics", "create-partitioned-topic"): [(("-m", "--metadata"), True, "topics carry no properties")],
    ("topics", "create-subscription"): [(("-r", "--replicated"), False, "replicated subscriptions are not supported")],
    # pulsar-admin's other name of -r is "regex", without dashes: not an option name on this command line
    ("topics", "delete"): [(("-r",), False, "name the topic"), (("--from-file",), False, "name the topic")],
    ("topics", "list"): [
        (("-b", "--bundle"), True, "the topics of a whole namespace only"),
        (
            ("-td", "--topic-domain"),
            True,
            "persistent topics only here; GET /admin/v2/non-persistent/{tenant}/{ns} lists the others",
        ),
    ],
    ("topics", "stats-internal"): [
        (("-m", "--metadata"), False, "each ledger's metadata is in magnetar bookie shell ledgermetadata")
    ],
    ("topics", "update-partitioned-topic"): [(("-f", "--force"), False, "partitions are only ever added")],
}

COMMAND_ALIASES: Mapping[str, Mapping[str, str]] = {
    "broker-stats": {"destinations": "topics"},
    "brokers": {"namespaces": "owned-namespaces"},
    "topics": {
        "examine-messages": "examine-message",
        **{
            f"{verb}-max-unacked-messages-per-{what}": f"{verb}-max-unacked-messages-on-{what}"
            for verb in ("get", "set", "remove")
            for what in ("consumer", "subscription")
        },
        **{f"{verb}-maxProducers": f"{verb}-max-producers" for verb in ("get", "set", "remove")},
    },
}


def _command(admin: click.Group, key: Key) -> click.Command:
    group = admin.commands[key[0]]
    assert isinstance(group, click.Group)
    return group.commands[key[1]]


def _names_in_use(cmd: click.Command) -> set[str]:
    return {n for p in cmd.params for n in (*p.opts, *p.secondary_opts)}


def _add_names(cmd: click.Command, param: str, names: list[str]) -> None:
    option = next(p for p in cmd.params if isinstance(p, click.Option) and p.name == param)
    clash = set(names) & _names_in_use(cmd)
    assert not clash, f"{cmd.name}: {clash} already in use"
    option.opts.extend(names)


def _query_flag(names: tuple[str, ...], query: str) -> click.Option:
    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.meta.setdefault(QUERY_META, {})[query] = "true"

    return click.Option(
        list(names), is_flag=True, expose_value=False, callback=remember, help=f"As pulsar-admin: sends {query}=true."
    )


def _ignored(names: tuple[str, ...], takes_value: bool, why: str) -> click.Option:
    return click.Option(
        list(names), is_flag=not takes_value, expose_value=False, help=f"As pulsar-admin; changes nothing here: {why}."
    )


def _unsupported(names: tuple[str, ...], takes_value: bool, why: str) -> click.Option:
    def refuse(_ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value not in (None, False):
            raise click.UsageError(f"pulsar-admin's {max(names, key=len)} is not supported by Magnetar: {why}")

    return click.Option(list(names), is_flag=not takes_value, expose_value=False, hidden=True, callback=refuse)


def apply(admin: click.Group) -> None:
    """Install the tables of this module on the ``admin`` group (every command registered)."""
    if getattr(admin, "_pulsar_admin_names", False):
        return
    admin._pulsar_admin_names = True  # type: ignore[attr-defined]
    for key, aliases in ALIASES.items():
        cmd = _command(admin, key)
        for name, param in aliases.items():
            _add_names(cmd, param, [name])
    for key, flags in QUERY_FLAGS.items():
        cmd = _command(admin, key)
        for names, query in flags.items():
            assert not set(names) & _names_in_use(cmd), (key, names)
            cmd.params.append(_query_flag(names, query))
    for table, make in ((IGNORED, _ignored), (UNSUPPORTED, _unsupported)):
        for key, options in table.items():
            cmd = _command(admin, key)
            for names, takes_value, why in options:
                assert not set(names) & _names_in_use(cmd), (key, names)
                cmd.params.append(make(names, takes_value, why))
    for group_name, aliases in COMMAND_ALIASES.items():
        group = admin.commands[group_name]
        assert isinstance(group, HelpGroup)
        for alias, target in aliases.items():
            assert target in group.commands and alias not in group.commands, (group_name, alias)
            group.aliases[alias] = target
