"""``magnetar admin topics``: topics, partitions, stats, subscriptions, messages, policies,
permissions, compaction, limits and rates, as pulsar-admin names them."""

from __future__ import annotations

import base64
import datetime
import json
import time
from typing import Any
from urllib.parse import quote

import click
import httpx

from ._admin_api import (
    ACTIONS_OPT,
    FORCE_OPT,
    INACTIVE_OPTS,
    NS_ARG,
    PARTS_OPT,
    ROLE_OPT,
    SUB_OPT,
    TOPIC_ARG,
    AdminApi,
    actions_list,
    admin_command,
    emit,
    force_flag,
    inactive_body,
    message_id_json,
    ns,
    seconds,
    sub_path,
    topic_rest_path,
)
from ._admin_limits import limit_commands, rate_commands
from ._help import HelpGroup
from ._human import when

topics = HelpGroup("topics", help="Persistent topics and their subscriptions.")

__all__ = ["topics"]


@admin_command(topics, "list", NS_ARG)
def topics_list(api: AdminApi, namespace: str) -> None:
    """List the topics of a namespace (partitions by name)."""
    api.show(f"/admin/v2/persistent/{ns(namespace)}", columns=["topic"])


@admin_command(topics, "create", TOPIC_ARG)
def topics_create(api: AdminApi, topic: str) -> None:
    """Create a non-partitioned topic."""
    api.do("PUT", topic_rest_path(topic), f"created topic {topic}")


@admin_command(topics, "delete", TOPIC_ARG, FORCE_OPT)
def topics_delete(api: AdminApi, topic: str, force: bool) -> None:
    """Delete a topic and its data."""
    api.do("DELETE", topic_rest_path(topic), f"deleted topic {topic}", params=force_flag(force))


@admin_command(topics, "create-partitioned-topic", TOPIC_ARG, PARTS_OPT)
def topics_create_partitioned(api: AdminApi, topic: str, partitions: int) -> None:
    """Create a partitioned topic."""
    api.do(
        "PUT",
        topic_rest_path(topic) + "/partitions",
        f"created partitioned topic {topic} with {partitions} partitions",
        partitions,
    )


@admin_command(topics, "update-partitioned-topic", TOPIC_ARG, PARTS_OPT)
def topics_update_partitioned(api: AdminApi, topic: str, partitions: int) -> None:
    """Raise the number of partitions of a topic."""
    api.do("POST", topic_rest_path(topic) + "/partitions", f"updated {topic} to {partitions} partitions", partitions)


@admin_command(topics, "get-partitioned-topic-metadata", TOPIC_ARG)
def topics_get_partitioned(api: AdminApi, topic: str) -> None:
    """Show the number of partitions (0: not partitioned)."""
    api.show(topic_rest_path(topic) + "/partitions")


@admin_command(topics, "unload", TOPIC_ARG)
def topics_unload(api: AdminApi, topic: str) -> None:
    """Unload a topic (clients reconnect and load it again)."""
    api.do("PUT", topic_rest_path(topic) + "/unload", f"unloaded {topic}")


@admin_command(topics, "terminate", TOPIC_ARG)
def topics_terminate(api: AdminApi, topic: str) -> None:
    """Terminate a topic: no message can be published to it any more."""
    last = api.call("POST", topic_rest_path(topic) + "/terminate")
    if api.as_json:
        click.echo(json.dumps(last, sort_keys=True))
    else:
        click.echo(f"Topic {topic} successfully terminated at {last['ledgerId']}:{last['entryId']}")


@admin_command(topics, "truncate", TOPIC_ARG)
def topics_truncate(api: AdminApi, topic: str) -> None:
    """Move every subscription to the end and delete every closed ledger of the topic."""
    api.do("DELETE", topic_rest_path(topic) + "/truncate", f"truncated {topic}")


# ------------------------------------------------------------------ stats


@admin_command(
    topics,
    "stats",
    TOPIC_ARG,
    click.option(
        "--get-precise-backlog",
        "-gpb",
        "precise",
        is_flag=True,
        help="As pulsar-admin (Magnetar's backlog counts are always precise).",
    ),
)
def topics_stats(api: AdminApi, topic: str, precise: bool = False) -> None:
    """Show a topic's rates, counters, producers and subscriptions."""
    stats = api.call(
        "GET", topic_rest_path(topic) + "/stats", params={"getPreciseBacklog": "true"} if precise else None
    )
    if api.as_json:
        emit(api, stats)
        return
    emit(api, {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}, title=topic)
    emit(
        api,
        [
            {
                "name": n,
                **{
                    k: s.get(k)
                    for k in ("type", "msgBacklog", "backlogSize", "unackedMessages", "msgOutCounter", "msgRateOut")
                },
                "consumers": len(s.get("consumers", [])),
            }
            for n, s in stats.get("subscriptions", {}).items()
        ],
        title="subscriptions",
        columns=[
            "name",
            "type",
            "msgBacklog",
            "backlogSize",
            "unackedMessages",
            "msgOutCounter",
            "msgRateOut",
            "consumers",
        ],
    )
    if stats.get("publishers"):
        emit(
            api,
            stats["publishers"],
            title="producers",
            columns=["producerName", "accessMode", "msgRateIn", "msgThroughputIn", "address"],
        )


@admin_command(
    topics,
    "partitioned-stats",
    TOPIC_ARG,
    click.option("--per-partition", is_flag=True, help="Also the stats of each partition."),
)
def topics_partitioned_stats(api: AdminApi, topic: str, per_partition: bool) -> None:
    """Stats of a partitioned topic, summed over its partitions."""
    stats = api.call(
        "GET", topic_rest_path(topic) + "/partitioned-stats", params={"perPartition": str(per_partition).lower()}
    )
    if api.as_json:
        emit(api, stats)
        return
    emit(api, {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}, title=topic)
    for name, part in (stats.get("partitions") or {}).items():
        emit(api, {k: v for k, v in part.items() if not isinstance(v, (dict, list))}, title=name)


def _readable_time(value: object) -> object:
    """A time of Pulsar's stats (epoch ms, or Pulsar's ISO date text) as `when` writes it."""
    if isinstance(value, str):
        try:
            value = int(datetime.datetime.fromisoformat(value).timestamp() * 1000)
        except ValueError:
            return value
    return when(value) if isinstance(value, int) else value


@admin_command(topics, "stats-internal", TOPIC_ARG)
def topics_stats_internal(api: AdminApi, topic: str) -> None:
    """Show a topic's managed ledger: ledgers and cursors."""
    stats = api.call("GET", topic_rest_path(topic) + "/internalStats")
    if api.as_json:
        emit(api, stats)
        return
    emit(
        api,
        {
            k: (_readable_time(v) if k.endswith("Timestamp") else v)
            for k, v in stats.items()
            if not isinstance(v, (dict, list))
        },
        title=topic,
    )
    emit(api, stats.get("ledgers", []), title="ledgers", columns=["ledgerId", "entries", "size"])
    emit(
        api,
        [{"name": n, **c} for n, c in stats.get("cursors", {}).items()],
        title="cursors",
        columns=["name", "markDeletePosition", "readPosition", "individuallyDeletedMessages", "state"],
    )


@admin_command(topics, "explain-storage", TOPIC_ARG)
def topics_explain_storage(api: AdminApi, topic: str) -> None:
    """Explain each ledger of a topic: size, age, why kept or deleted."""
    ex = api.call("GET", topic_rest_path(topic) + "/explain-storage")
    if api.as_json:
        emit(api, ex)
        return
    from ._explain_view import print_explain

    print_explain(ex)


# ------------------------------------------------------------------ subscriptions


@admin_command(topics, "subscriptions", TOPIC_ARG)
def topics_subscriptions(api: AdminApi, topic: str) -> None:
    """List a topic's subscriptions."""
    api.show(topic_rest_path(topic) + "/subscriptions", columns=["subscription"])


@admin_command(
    topics,
    "create-subscription",
    TOPIC_ARG,
    SUB_OPT,
    click.option(
        "--messageId",
        "-m",
        "message_id",
        default="latest",
        show_default=True,
        help="Start: earliest, latest or ledgerId:entryId.",
    ),
    click.option(
        "--property", "-p", "properties", multiple=True, help="A subscription property key=value (repeat for more)."
    ),
)
def topics_create_subscription(
    api: AdminApi, topic: str, subscription: str, message_id: str, properties: tuple[str, ...]
) -> None:
    """Create a durable subscription."""
    body: dict[str, Any] = dict(message_id_json(message_id))
    if properties:
        pairs = [p.split("=", 1) for p in properties]
        if any(len(kv) != 2 or not kv[0] for kv in pairs):
            raise click.BadParameter("use key=value", param_hint="--property")
        body["properties"] = dict(pairs)
    api.do("PUT", sub_path(topic, subscription), f"created subscription {subscription} on {topic}", body)


@admin_command(topics, "unsubscribe", TOPIC_ARG, SUB_OPT, FORCE_OPT)
def topics_unsubscribe(api: AdminApi, topic: str, subscription: str, force: bool) -> None:
    """Delete a subscription."""
    api.do(
        "DELETE",
        sub_path(topic, subscription),
        f"deleted subscription {subscription} of {topic}",
        params=force_flag(force),
    )


@admin_command(
    topics, "skip", TOPIC_ARG, SUB_OPT, click.option("--count", "-n", type=int, required=True, help="Messages to skip.")
)
def topics_skip(api: AdminApi, topic: str, subscription: str, count: int) -> None:
    """Skip messages of a subscription's backlog."""
    api.do("POST", f"{sub_path(topic, subscription)}/skip/{count}", f"skipped {count} messages of {subscription}")


@admin_command(topics, "clear-backlog", TOPIC_ARG, SUB_OPT)
def topics_clear_backlog(api: AdminApi, topic: str, subscription: str) -> None:
    """Acknowledge a subscription's whole backlog."""
    api.do("POST", f"{sub_path(topic, subscription)}/skip_all", f"cleared the backlog of {subscription}")


@admin_command(
    topics,
    "reset-cursor",
    TOPIC_ARG,
    SUB_OPT,
    click.option(
        "--time",
        "-t",
        "ago",
        help="To the messages published this long ago: seconds, or 100m/3h/2d/5w (as pulsar-admin).",
    ),
    click.option("--publish-time-ms", "time_ms", type=int, help="To a publish time, in ms since the epoch."),
    click.option("--messageId", "-m", "message_id", help="To a message: earliest, latest or ledgerId:entryId."),
    click.option(
        "--exclude-reset-position", "-e", "exclude", is_flag=True, help="With --messageId: from the message after it."
    ),
)
def topics_reset_cursor(
    api: AdminApi,
    topic: str,
    subscription: str,
    ago: str | None,
    time_ms: int | None,
    message_id: str | None,
    exclude: bool,
) -> None:
    """Move a subscription back or forth to a publish time or a message id."""
    if sum(x is not None for x in (ago, time_ms, message_id)) != 1:
        raise click.UsageError("give exactly one of --time, --publish-time-ms and --messageId")
    base = f"{sub_path(topic, subscription)}/resetcursor"
    what = f"reset {subscription} of {topic}"
    if ago is not None:
        time_ms = int(time.time() * 1000) - seconds(ago) * 1000
    if time_ms is not None:
        api.do("POST", f"{base}/{time_ms}", what)
    else:
        api.do("POST", base, what, {**message_id_json(message_id or ""), **({"isExcluded": True} if exclude else {})})


@admin_command(topics, "skip-all", TOPIC_ARG, SUB_OPT)
def topics_skip_all(api: AdminApi, topic: str, subscription: str) -> None:
    """Skip all messages of a subscription's backlog (as clear-backlog)."""
    api.do("POST", f"{sub_path(topic, subscription)}/skip_all", f"skipped all messages of {subscription}")


@admin_command(
    topics,
    "expire-messages",
    TOPIC_ARG,
    SUB_OPT,
    click.option(
        "--expireTime",
        "-t",
        "expire_time",
        default=None,
        help="Acknowledge the messages published longer ago than this: seconds, or 100m/3h/2d/5w.",
    ),
    click.option("--position", "-p", default=None, help="Or: acknowledge up to this message (ledgerId:entryId)."),
    click.option(
        "--exclude-reset-position", "-e", "exclude", is_flag=True, help="With --position: not the message itself."
    ),
)
def topics_expire_messages(
    api: AdminApi, topic: str, subscription: str, expire_time: str | None, position: str | None, exclude: bool
) -> None:
    """Expire (acknowledge) a subscription's messages older than --expireTime, or up to --position."""
    if (expire_time is None) == (position is None):
        raise click.UsageError("give exactly one of --expireTime and --position")
    if position is not None:
        api.do(
            "POST",
            f"{sub_path(topic, subscription)}/expireMessages",
            f"expired {subscription} up to {position}",
            {**message_id_json(position), "isExcluded": exclude},
        )
        return
    value = seconds(expire_time or "")
    api.do(
        "POST",
        f"{sub_path(topic, subscription)}/expireMessages/{value}",
        f"expired the messages of {subscription} older than {value} s",
    )


@admin_command(
    topics,
    "expire-messages-all-subscriptions",
    TOPIC_ARG,
    click.option(
        "--expireTime",
        "-t",
        "expire_time",
        required=True,
        help="Acknowledge the messages published longer ago than this: seconds, or 100m/3h/2d/5w.",
    ),
)
def topics_expire_all(api: AdminApi, topic: str, expire_time: str) -> None:
    """Expire (acknowledge) the old messages of every subscription of a topic."""
    value = seconds(expire_time)
    api.do(
        "POST",
        f"{topic_rest_path(topic)}/all_subscription/expireMessages/{value}",
        f"expired the messages of every subscription of {topic} older than {value} s",
    )


@admin_command(
    topics,
    "expire-messages-to-position",
    TOPIC_ARG,
    SUB_OPT,
    click.option("--position", "-p", required=True, help="ledgerId:entryId: expire up to this message."),
    click.option("--exclude-reset-position", "-e", "exclude", is_flag=True, help="Keep the message itself."),
)
def topics_expire_to_position(api: AdminApi, topic: str, subscription: str, position: str, exclude: bool) -> None:
    """Expire (acknowledge) a subscription's messages up to a message id (pulsar-admin's -p)."""
    api.do(
        "POST",
        f"{sub_path(topic, subscription)}/expireMessages",
        f"expired {subscription} up to {position}",
        {**message_id_json(position), "isExcluded": exclude},
    )


# ------------------------------------------------------------------ messages


@admin_command(topics, "last-message-id", TOPIC_ARG)
def topics_last_message_id(api: AdminApi, topic: str) -> None:
    """The id of the topic's last stored message."""
    emit(api, api.call("GET", topic_rest_path(topic) + "/lastMessageId"))


def _print_message(api: AdminApi, r: httpx.Response) -> dict[str, Any]:
    """One message answer (payload body, X-Pulsar-* headers) as pulsar-admin prints it, or its JSON."""
    raw = ((k.decode("latin-1"), v.decode("utf-8", errors="replace")) for k, v in r.headers.raw)  # names as sent
    headers = {k: v for k, v in raw if k.lower().startswith("x-pulsar-")}
    message_id = r.headers.get("x-pulsar-message-id", "")
    properties = {
        k[len("x-pulsar-property-") :]: v for k, v in headers.items() if k.lower().startswith("x-pulsar-property-")
    }
    doc = {
        "messageId": message_id,
        "properties": properties,
        "headers": {k: v for k, v in headers.items() if not k.lower().startswith("x-pulsar-property-")},
        "payload": base64.b64encode(r.content).decode(),
    }
    if not api.as_json:
        click.echo(f"Message ID: {message_id}")
        for key, value in sorted(doc["headers"].items()):
            if key.lower() != "x-pulsar-message-id":
                click.echo(f"{key}: {value}")
        if properties:
            click.echo(f"Properties: {json.dumps(properties, sort_keys=True)}")
        click.echo(r.content.decode("utf-8", errors="replace"))
    return doc


@admin_command(
    topics,
    "peek-messages",
    TOPIC_ARG,
    SUB_OPT,
    click.option("--count", "-n", type=int, default=1, show_default=True, help="Messages to peek."),
)
def topics_peek_messages(api: AdminApi, topic: str, subscription: str, count: int) -> None:
    """Show the first --count unacknowledged messages of a subscription (without acknowledging them)."""
    if count < 1:
        raise click.BadParameter("must be 1 or more", param_hint="--count")
    docs = []
    for i in range(1, count + 1):
        try:
            r = api.request("GET", f"{sub_path(topic, subscription)}/position/{i}")
        except click.ClickException:
            if i == 1:
                raise
            break  # fewer messages than asked for
        if not api.as_json and i > 1:
            click.echo("")
        docs.append(_print_message(api, r))
    if api.as_json:
        click.echo(json.dumps(docs, indent=2, sort_keys=True))


@admin_command(
    topics,
    "examine-message",
    TOPIC_ARG,
    click.option(
        "--initialPosition",
        "-i",
        "initial_position",
        type=click.Choice(["latest", "earliest"]),
        default="latest",
        show_default=True,
        help="Count from the newest or the oldest message.",
    ),
    click.option(
        "--messagePosition",
        "-m",
        "message_position",
        type=int,
        default=1,
        show_default=True,
        help="Which message (1-based) from --initialPosition.",
    ),
)
def topics_examine_message(api: AdminApi, topic: str, initial_position: str, message_position: int) -> None:
    """Show the n-th message from the newest or the oldest stored one."""
    r = api.request(
        "GET",
        topic_rest_path(topic) + "/examinemessage",
        params={"initialPosition": initial_position, "messagePosition": message_position},
    )
    doc = _print_message(api, r)
    if api.as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))


@admin_command(
    topics,
    "get-message-by-id",
    TOPIC_ARG,
    click.option("--ledgerId", "-l", "ledger_id", type=int, required=True, help="Ledger id of the message."),
    click.option("--entryId", "-e", "entry_id", type=int, required=True, help="Entry id of the message."),
)
def topics_get_message_by_id(api: AdminApi, topic: str, ledger_id: int, entry_id: int) -> None:
    """Show the message stored at ledgerId:entryId."""
    doc = _print_message(api, api.request("GET", f"{topic_rest_path(topic)}/ledger/{ledger_id}/entry/{entry_id}"))
    if api.as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))


# ------------------------------------------------------------------ policies


@admin_command(topics, "set-inactive-topic-policies", TOPIC_ARG, *INACTIVE_OPTS)
def topics_set_inactive(api: AdminApi, topic: str, enable: bool, duration: str, mode: str) -> None:
    """Set when this topic is deleted once inactive (over its namespace's and the broker's settings)."""
    api.do(
        "POST",
        f"{topic_rest_path(topic)}/inactiveTopicPolicies",
        f"set inactive topic policies of {topic}",
        inactive_body(enable, duration, mode),
    )


@admin_command(
    topics,
    "get-inactive-topic-policies",
    TOPIC_ARG,
    click.option("--applied", "-a", is_flag=True, help="The policies in force (topic, namespace or broker)."),
)
def topics_get_inactive(api: AdminApi, topic: str, applied: bool) -> None:
    """Show the topic's inactive topic policies."""
    emit(
        api,
        api.call(
            "GET", f"{topic_rest_path(topic)}/inactiveTopicPolicies", params={"applied": "true"} if applied else None
        ),
    )


@admin_command(topics, "remove-inactive-topic-policies", TOPIC_ARG)
def topics_remove_inactive(api: AdminApi, topic: str) -> None:
    """Remove the topic's inactive topic policies."""
    api.do("DELETE", f"{topic_rest_path(topic)}/inactiveTopicPolicies", f"removed inactive topic policies of {topic}")


@admin_command(
    topics,
    "set-deduplication",
    TOPIC_ARG,
    click.option("--enable/--disable", "-e/-d", required=True, help="Turn deduplication on or off."),
)
def topics_set_dedup(api: AdminApi, topic: str, enable: bool) -> None:
    """Turn deduplication on or off for one topic (over its namespace's policy)."""
    api.do(
        "POST",
        topic_rest_path(topic) + "/deduplicationEnabled",
        f"{'enabled' if enable else 'disabled'} deduplication on {topic}",
        enable,
    )


@admin_command(topics, "get-deduplication", TOPIC_ARG)
def topics_get_dedup(api: AdminApi, topic: str) -> None:
    """Show the topic's own deduplication setting."""
    api.show(topic_rest_path(topic) + "/deduplicationEnabled")


@admin_command(topics, "remove-deduplication", TOPIC_ARG)
def topics_remove_dedup(api: AdminApi, topic: str) -> None:
    """Remove the topic's deduplication setting (its namespace's applies)."""
    api.do("DELETE", topic_rest_path(topic) + "/deduplicationEnabled", f"removed the deduplication setting of {topic}")


# ------------------------------------------------------------------ permissions


@admin_command(topics, "permissions", TOPIC_ARG)
def topics_permissions(api: AdminApi, topic: str) -> None:
    """Show the roles granted actions on a topic (its namespace's grants included)."""
    api.show(f"{topic_rest_path(topic)}/permissions", title=f"permissions of {topic}")


@admin_command(topics, "grant-permission", TOPIC_ARG, ROLE_OPT, ACTIONS_OPT)
def topics_grant_permission(api: AdminApi, topic: str, role: str, actions: str) -> None:
    """Grant a role actions (produce, consume) on a topic."""
    api.do(
        "POST",
        f"{topic_rest_path(topic)}/permissions/{quote(role, safe='')}",
        f"granted {actions} on {topic} to {role}",
        body=actions_list(actions),
    )


@admin_command(topics, "revoke-permission", TOPIC_ARG, ROLE_OPT)
def topics_revoke_permission(api: AdminApi, topic: str, role: str) -> None:
    """Revoke a role's actions on a topic."""
    api.do(
        "DELETE",
        f"{topic_rest_path(topic)}/permissions/{quote(role, safe='')}",
        f"revoked the permissions of {role} on {topic}",
    )


# ------------------------------------------------------------------ compaction

_COMPACTION_TEXT = {
    "NOT_RUN": "Compaction has not been run",
    "RUNNING": "Compaction is running",
    "SUCCESS": "Compaction was a success",
    "ERROR": "Error in compaction",
}


@admin_command(topics, "compact", TOPIC_ARG)
def topics_compact(api: AdminApi, topic: str) -> None:
    """Start compacting a topic (the latest message per key, for read-compacted readers)."""
    api.do("PUT", f"{topic_rest_path(topic)}/compaction", f"compaction triggered for {topic}")


@admin_command(
    topics,
    "compaction-status",
    TOPIC_ARG,
    click.option("--wait-complete", "-w", "wait", is_flag=True, help="Wait while compaction is running."),
)
def topics_compaction_status(api: AdminApi, topic: str, wait: bool) -> None:
    """Show a topic's compaction status (NOT_RUN, RUNNING, SUCCESS, ERROR and its reason).
    Exits with an error when the last compaction failed."""
    import time

    status = api.call("GET", f"{topic_rest_path(topic)}/compaction") or {}
    while wait and status.get("status") == "RUNNING":
        time.sleep(1)
        status = api.call("GET", f"{topic_rest_path(topic)}/compaction") or {}
    if api.as_json:
        click.echo(json.dumps(status, sort_keys=True))
    state = status.get("status", "")
    if state == "ERROR":
        raise click.ClickException(f"{_COMPACTION_TEXT['ERROR']}: {status.get('lastError') or 'unknown reason'}")
    if not api.as_json:
        click.echo(_COMPACTION_TEXT.get(state, state))


# ------------------------------------------------------------------ limits and rates
def _policy_path(suffix: str) -> Any:
    return lambda topic: topic_rest_path(topic) + suffix


for _name, _suffix, _flags, _what in (
    ("max-producers", "/maxProducers", ("--max-producers", "-p"), "Max producers of the topic"),
    ("max-consumers", "/maxConsumers", ("--max-consumers", "-c"), "Max consumers of the topic"),
    (
        "max-consumers-per-subscription",
        "/maxConsumersPerSubscription",
        ("--max-consumers-per-subscription", "-c"),
        "Max consumers per subscription",
    ),
    (
        "max-unacked-messages-on-consumer",
        "/maxUnackedMessagesOnConsumer",
        ("--max-unacked-messages", "-m"),
        "Max unacked messages per consumer",
    ),
    (
        "max-unacked-messages-on-subscription",
        "/maxUnackedMessagesOnSubscription",
        ("--max-unacked-messages", "-m"),
        "Max unacked messages per subscription",
    ),
):
    limit_commands(topics, _name, _policy_path(_suffix), TOPIC_ARG, _flags, _what)

for _name, _suffix, _kind in (
    ("publish-rate", "/publishRate", "publish"),
    ("dispatch-rate", "/dispatchRate", "dispatch"),
    ("subscription-dispatch-rate", "/subscriptionDispatchRate", "dispatch"),
    ("subscribe-rate", "/subscribeRate", "subscribe"),
):
    rate_commands(topics, _name, _policy_path(_suffix), TOPIC_ARG, _kind)


# ------------------------------------------------------------------ geo-replication


@admin_command(
    topics,
    "set-replication-clusters",
    TOPIC_ARG,
    click.option("--clusters", "-c", required=True, help="Replication cluster names, comma-separated."),
)
def topics_set_replication_clusters(api: AdminApi, topic: str, clusters: str) -> None:
    """Set the clusters the topic is replicated to (overrides its namespace's)."""
    names = [c.strip() for c in clusters.split(",") if c.strip()]
    api.do(
        "POST", topic_rest_path(topic) + "/replication", f"replication clusters of {topic}: {', '.join(names)}", names
    )


@admin_command(
    topics,
    "get-replication-clusters",
    TOPIC_ARG,
    click.option("--applied", "-a", is_flag=True, help="The clusters in force (the namespace's when unset)."),
)
def topics_get_replication_clusters(api: AdminApi, topic: str, applied: bool) -> None:
    """Show the topic's own replication clusters (or, with --applied, those in force)."""
    emit(api, api.call("GET", topic_rest_path(topic) + "/replication", params={"applied": str(applied).lower()}))


@admin_command(topics, "remove-replication-clusters", TOPIC_ARG)
def topics_remove_replication_clusters(api: AdminApi, topic: str) -> None:
    """Remove the topic's own replication clusters (its namespace's apply again)."""
    api.do("DELETE", topic_rest_path(topic) + "/replication", f"removed the replication clusters of {topic}")
