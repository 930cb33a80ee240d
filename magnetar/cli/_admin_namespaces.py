"""``magnetar admin namespaces``: namespaces and their policies (retention, TTL, backlog quotas,
deduplication, auto topic creation, inactive topics, schemas, permissions, compaction, limits and
rates), bundles, split and unload, as pulsar-admin names them. The offload (tiered storage)
commands are `_admin_offload`'s."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from ._admin_api import (
    ACTIONS_OPT,
    INACTIVE_OPTS,
    NS_ARG,
    ROLE_OPT,
    AdminApi,
    actions_list,
    admin_command,
    emit,
    force_flag,
    inactive_body,
    ns_path,
    retention_mb,
    retention_minutes,
    seconds,
    size_bytes,
)
from ._admin_limits import limit_commands, rate_commands
from ._help import HelpGroup

namespaces = HelpGroup("namespaces", help="Namespaces and their policies.")

__all__ = ["namespaces"]


@admin_command(namespaces, "list", click.argument("tenant"))
def namespaces_list(api: AdminApi, tenant: str) -> None:
    """List the namespaces of a tenant."""
    api.show(f"/admin/v2/namespaces/{tenant}", columns=["namespace"])


@admin_command(namespaces, "create", NS_ARG)
def namespaces_create(api: AdminApi, namespace: str) -> None:
    """Create a namespace (tenant/namespace)."""
    api.do("PUT", ns_path(namespace), f"created namespace {namespace}")


@admin_command(namespaces, "delete", NS_ARG, click.option("--force", "-f", is_flag=True, help="Delete its topics too."))
def namespaces_delete(api: AdminApi, namespace: str, force: bool) -> None:
    """Delete a namespace (it must be empty unless --force)."""
    api.do("DELETE", ns_path(namespace), f"deleted namespace {namespace}", params=force_flag(force))


@admin_command(namespaces, "policies", NS_ARG)
def namespaces_policies(api: AdminApi, namespace: str) -> None:
    """Show every policy of a namespace."""
    api.show(ns_path(namespace), title=namespace)


@admin_command(
    namespaces,
    "set-retention",
    NS_ARG,
    click.option(
        "--time",
        "-t",
        "time_",
        required=True,
        help="Retention time: -1 (infinite), seconds, or 100m/3h/2d/5w (as pulsar-admin).",
    ),
    click.option(
        "--size",
        "-s",
        required=True,
        help="Retention size: -1 (infinite), bytes, or 512M/10G (as pulsar-admin; under 1 MB: none).",
    ),
)
def namespaces_set_retention(api: AdminApi, namespace: str, time_: str, size: str) -> None:
    """Set the retention of consumed messages."""
    body = {"retentionTimeInMinutes": retention_minutes(time_), "retentionSizeInMB": retention_mb(size)}
    api.do("POST", ns_path(namespace, "/retention"), f"set retention of {namespace}", body)


@admin_command(namespaces, "get-retention", NS_ARG)
def namespaces_get_retention(api: AdminApi, namespace: str) -> None:
    """Show the retention of a namespace."""
    api.show(ns_path(namespace, "/retention"), title="retention")


@admin_command(
    namespaces,
    "set-message-ttl",
    NS_ARG,
    click.option("--ttl", "-ttl", "ttl", required=True, help="Message TTL: seconds, or 100m/3h/2d/5w (0 = off)."),
)
def namespaces_set_ttl(api: AdminApi, namespace: str, ttl: str) -> None:
    """Set the message TTL."""
    value = seconds(ttl)
    api.do("POST", ns_path(namespace, "/messageTTL"), f"set message TTL of {namespace} to {value}s", value)


@admin_command(namespaces, "get-message-ttl", NS_ARG)
def namespaces_get_ttl(api: AdminApi, namespace: str) -> None:
    """Show the message TTL of a namespace."""
    api.show(ns_path(namespace, "/messageTTL"))


@admin_command(
    namespaces,
    "set-backlog-quota",
    NS_ARG,
    click.option(
        "--limit-size", "-l", "limit_size", default="-1", help="Backlog size limit: bytes, or 10M/16G (-1: none)."
    ),
    click.option(
        "--limit-time",
        "-lt",
        "limit_time",
        default="-1",
        help="Backlog age limit: seconds, or 100m/3h/2d/5w (-1: none).",
    ),
    click.option(
        "--policy",
        "-p",
        required=True,
        type=click.Choice(["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]),
    ),
    click.option(
        "--type",
        "-t",
        "quota_type",
        default="destination_storage",
        show_default=True,
        type=click.Choice(["destination_storage", "message_age"]),
    ),
)
def namespaces_set_quota(
    api: AdminApi, namespace: str, limit_size: str, limit_time: str, policy: str, quota_type: str
) -> None:
    """Set a backlog quota."""
    size = -1 if limit_size.strip() == "-1" else size_bytes(limit_size)
    age = -1 if limit_time.strip().startswith("-") else seconds(limit_time)
    body = {"limitSize": size, "limitTime": age, "policy": policy}
    api.do(
        "POST",
        ns_path(namespace, "/backlogQuota"),
        f"set {quota_type} backlog quota of {namespace}",
        body,
        params={"backlogQuotaType": quota_type},
    )


@admin_command(namespaces, "get-backlog-quotas", NS_ARG)
def namespaces_get_quotas(api: AdminApi, namespace: str) -> None:
    """Show the backlog quotas of a namespace."""
    quotas = api.call("GET", ns_path(namespace, "/backlogQuotaMap")) or {}
    emit(
        api,
        quotas if api.as_json else [{"type": k, **v} for k, v in quotas.items()],
        columns=["type", "limitSize", "limitTime", "policy"],
    )


@admin_command(
    namespaces,
    "set-deduplication",
    NS_ARG,
    click.option("--enable/--disable", "-e/-d", required=True, help="Turn message deduplication on or off."),
)
def namespaces_set_dedup(api: AdminApi, namespace: str, enable: bool) -> None:
    """Turn message deduplication on or off (applies to topics loaded afterwards)."""
    api.do(
        "POST",
        ns_path(namespace, "/deduplication"),
        f"{'enabled' if enable else 'disabled'} deduplication on {namespace}",
        enable,
    )


@admin_command(namespaces, "get-deduplication", NS_ARG)
def namespaces_get_dedup(api: AdminApi, namespace: str) -> None:
    """Show whether deduplication is set on a namespace."""
    api.show(ns_path(namespace, "/deduplication"))


@admin_command(
    namespaces,
    "set-auto-topic-creation",
    NS_ARG,
    click.option("--enable/--disable", "-e/-d", required=True, help="Allow or refuse creating missing topics."),
    click.option(
        "--type",
        "-t",
        "topic_type",
        default="non-partitioned",
        show_default=True,
        type=click.Choice(["non-partitioned", "partitioned"]),
        help="Type of the topics created.",
    ),
    click.option(
        "--num-partitions",
        "-n",
        type=int,
        default=None,
        help="Partitions of a created partitioned topic (required with --type partitioned).",
    ),
)
def namespaces_set_auto_creation(
    api: AdminApi, namespace: str, enable: bool, topic_type: str, num_partitions: int | None
) -> None:
    """Override the broker's auto topic creation settings for a namespace."""
    body: dict[str, Any] = {"allowAutoTopicCreation": enable, "topicType": topic_type}
    if num_partitions is not None:
        body["defaultNumPartitions"] = num_partitions
    api.do("POST", ns_path(namespace, "/autoTopicCreation"), f"set auto topic creation of {namespace}", body)


@admin_command(namespaces, "get-auto-topic-creation", NS_ARG)
def namespaces_get_auto_creation(api: AdminApi, namespace: str) -> None:
    """Show a namespace's auto topic creation override (nothing: the broker's settings apply)."""
    api.show(ns_path(namespace, "/autoTopicCreation"))


@admin_command(namespaces, "remove-auto-topic-creation", NS_ARG)
def namespaces_remove_auto_creation(api: AdminApi, namespace: str) -> None:
    """Remove a namespace's auto topic creation override: the broker's settings apply again."""
    api.do("DELETE", ns_path(namespace, "/autoTopicCreation"), f"removed auto topic creation override of {namespace}")


@admin_command(namespaces, "set-inactive-topic-policies", NS_ARG, *INACTIVE_OPTS)
def namespaces_set_inactive(api: AdminApi, namespace: str, enable: bool, duration: str, mode: str) -> None:
    """Set when the namespace's inactive topics are deleted (over the broker's settings)."""
    api.do(
        "POST",
        ns_path(namespace, "/inactiveTopicPolicies"),
        f"set inactive topic policies of {namespace}",
        inactive_body(enable, duration, mode),
    )


@admin_command(namespaces, "get-inactive-topic-policies", NS_ARG)
def namespaces_get_inactive(api: AdminApi, namespace: str) -> None:
    """Show the namespace's inactive topic policies (nothing: the broker's settings apply)."""
    api.show(ns_path(namespace, "/inactiveTopicPolicies"))


@admin_command(namespaces, "remove-inactive-topic-policies", NS_ARG)
def namespaces_remove_inactive(api: AdminApi, namespace: str) -> None:
    """Remove the namespace's inactive topic policies: the broker's settings apply again."""
    api.do("DELETE", ns_path(namespace, "/inactiveTopicPolicies"), f"removed inactive topic policies of {namespace}")


# ------------------------------------------------------------------ backlog and subscriptions


@admin_command(
    namespaces,
    "clear-backlog",
    NS_ARG,
    click.option("--sub", "-s", "subscription", default=None, help="Only this subscription."),
    click.option("--force", "-f", is_flag=True, help="Do not ask (always on: this CLI never asks)."),
)
def namespaces_clear_backlog(api: AdminApi, namespace: str, subscription: str | None, force: bool) -> None:
    """Skip the whole backlog of every subscription (or of --sub) on every topic of a namespace."""
    suffix = "/clearBacklog" + (f"/{quote(subscription, safe='')}" if subscription else "")
    api.do(
        "POST",
        ns_path(namespace, suffix),
        f"cleared the backlog of {subscription or 'every subscription'} in {namespace}",
    )


@admin_command(
    namespaces,
    "unsubscribe",
    NS_ARG,
    click.option("--sub", "-s", "subscription", required=True, help="Subscription to delete."),
)
def namespaces_unsubscribe(api: AdminApi, namespace: str, subscription: str) -> None:
    """Delete a subscription from every topic of a namespace."""
    api.do(
        "POST",
        ns_path(namespace, f"/unsubscribe/{quote(subscription, safe='')}"),
        f"deleted subscription {subscription} in {namespace}",
    )


# ------------------------------------------------------------------ schemas


@admin_command(
    namespaces,
    "set-schema-compatibility-strategy",
    NS_ARG,
    click.option("--compatibility", "-c", required=True, help="FULL, BACKWARD, FORWARD, ALWAYS_COMPATIBLE, ..."),
)
def namespaces_set_strategy(api: AdminApi, namespace: str, compatibility: str) -> None:
    """Set the schema compatibility strategy."""
    api.do(
        "PUT",
        ns_path(namespace, "/schemaCompatibilityStrategy"),
        f"set schema compatibility strategy of {namespace} to {compatibility}",
        compatibility,
    )


@admin_command(namespaces, "get-schema-compatibility-strategy", NS_ARG)
def namespaces_get_strategy(api: AdminApi, namespace: str) -> None:
    """Show the schema compatibility strategy."""
    api.show(ns_path(namespace, "/schemaCompatibilityStrategy"))


@admin_command(
    namespaces,
    "set-is-allow-auto-update-schema",
    NS_ARG,
    click.option("--enable/--disable", "-e/-d", required=True, help="Let producers add schema versions."),
)
def namespaces_set_auto_update(api: AdminApi, namespace: str, enable: bool) -> None:
    """Allow or refuse new schema versions from producers."""
    api.do(
        "POST",
        ns_path(namespace, "/isAllowAutoUpdateSchema"),
        f"{'enabled' if enable else 'disabled'} schema auto update on {namespace}",
        enable,
    )


@admin_command(namespaces, "get-is-allow-auto-update-schema", NS_ARG)
def namespaces_get_auto_update(api: AdminApi, namespace: str) -> None:
    """Show whether producers may add schema versions."""
    api.show(ns_path(namespace, "/isAllowAutoUpdateSchema"))


# ------------------------------------------------------------------ permissions


@admin_command(namespaces, "permissions", NS_ARG)
def namespaces_permissions(api: AdminApi, namespace: str) -> None:
    """Show the roles granted actions on a namespace."""
    api.show(ns_path(namespace, "/permissions"), title=f"permissions of {namespace}")


@admin_command(namespaces, "grant-permission", NS_ARG, ROLE_OPT, ACTIONS_OPT)
def namespaces_grant_permission(api: AdminApi, namespace: str, role: str, actions: str) -> None:
    """Grant a role actions (produce, consume) on every topic of a namespace."""
    api.do(
        "POST",
        ns_path(namespace, f"/permissions/{quote(role, safe='')}"),
        f"granted {actions} on {namespace} to {role}",
        body=actions_list(actions),
    )


@admin_command(namespaces, "revoke-permission", NS_ARG, ROLE_OPT)
def namespaces_revoke_permission(api: AdminApi, namespace: str, role: str) -> None:
    """Revoke a role's actions on a namespace."""
    api.do(
        "DELETE",
        ns_path(namespace, f"/permissions/{quote(role, safe='')}"),
        f"revoked the permissions of {role} on {namespace}",
    )


_subscription_opt = click.option("--subscription", required=True, help="Subscription name.")


@admin_command(namespaces, "subscription-permission", NS_ARG)
def namespaces_subscription_permission(api: AdminApi, namespace: str) -> None:
    """Show the roles allowed to use each subscription of a namespace."""
    api.show(ns_path(namespace, "/permissions/subscription"), title=f"subscription permissions of {namespace}")


@admin_command(
    namespaces,
    "grant-subscription-permission",
    NS_ARG,
    _subscription_opt,
    click.option("--roles", required=True, help="Comma-separated roles allowed to use the subscription."),
)
def namespaces_grant_subscription_permission(api: AdminApi, namespace: str, subscription: str, roles: str) -> None:
    """Allow roles to use a subscription on every topic of a namespace (then only they, super users
    and the tenant's admins may)."""
    names = [r.strip() for r in roles.split(",") if r.strip()]
    if not names:
        raise click.BadParameter("give at least one role", param_hint="--roles")
    api.do(
        "POST",
        ns_path(namespace, f"/permissions/subscription/{quote(subscription, safe='')}"),
        f"allowed {', '.join(names)} to use subscription {subscription} on {namespace}",
        body=names,
    )


@admin_command(namespaces, "revoke-subscription-permission", NS_ARG, _subscription_opt, ROLE_OPT)
def namespaces_revoke_subscription_permission(api: AdminApi, namespace: str, subscription: str, role: str) -> None:
    """Remove a role from those allowed to use a subscription."""
    api.do(
        "DELETE",
        ns_path(namespace, f"/permissions/{quote(subscription, safe='')}/{quote(role, safe='')}"),
        f"revoked {role}'s use of subscription {subscription} on {namespace}",
    )


# ------------------------------------------------------------------ compaction


@admin_command(
    namespaces,
    "set-compaction-threshold",
    NS_ARG,
    click.option(
        "--threshold",
        "-t",
        required=True,
        help="Compact a topic once its uncompacted backlog exceeds this size (bytes, or with K/M/G/T; 0 = off).",
    ),
)
def namespaces_set_compaction_threshold(api: AdminApi, namespace: str, threshold: str) -> None:
    """Set the namespace's automatic compaction threshold."""
    size = size_bytes(threshold)
    api.do(
        "POST",
        ns_path(namespace, "/compactionThreshold"),
        f"set compaction threshold of {namespace} to {size} bytes",
        size,
    )


@admin_command(namespaces, "get-compaction-threshold", NS_ARG)
def namespaces_get_compaction_threshold(api: AdminApi, namespace: str) -> None:
    """Show the namespace's automatic compaction threshold in bytes (nothing when unset)."""
    emit(api, api.call("GET", ns_path(namespace, "/compactionThreshold")))


@admin_command(namespaces, "remove-compaction-threshold", NS_ARG)
def namespaces_remove_compaction_threshold(api: AdminApi, namespace: str) -> None:
    """Remove the namespace's compaction threshold (the broker default applies)."""
    api.do("DELETE", ns_path(namespace, "/compactionThreshold"), f"removed the compaction threshold of {namespace}")


# ------------------------------------------------------------------ bundles


@admin_command(namespaces, "bundles", NS_ARG)
def namespaces_bundles(api: AdminApi, namespace: str) -> None:
    """Show a namespace's bundle boundaries."""
    api.show(ns_path(namespace, "/bundles"), title=f"bundles of {namespace}")


_bundle_opt = click.option("--bundle", "-b", default=None, help="The bundle, e.g. 0x00000000_0x40000000.")


@admin_command(
    namespaces,
    "split-bundle",
    NS_ARG,
    click.option("--bundle", "-b", required=True, help="The bundle, e.g. 0x00000000_0x40000000."),
    click.option("--unload", "-u", is_flag=True, help="Unload the new bundles after the split."),
)
def namespaces_split(api: AdminApi, namespace: str, bundle: str, unload: bool) -> None:
    """Split a bundle of a namespace in two halves (on its owner)."""
    api.do(
        "PUT",
        ns_path(namespace, f"/{bundle}/split"),
        f"split {namespace}/{bundle}",
        params={"unload": str(unload).lower()},
    )


@admin_command(namespaces, "unload", NS_ARG, _bundle_opt)
def namespaces_unload(api: AdminApi, namespace: str, bundle: str | None) -> None:
    """Unload a namespace (every bundle) or one bundle: topics close, clients move by themselves."""
    suffix = f"/{bundle}/unload" if bundle else "/unload"
    api.do("PUT", ns_path(namespace, suffix), f"unloaded {namespace}{'/' + bundle if bundle else ''}")


# ------------------------------------------------------------------ limits and rates
def _policy_path(suffix: str) -> Any:
    return lambda namespace: ns_path(namespace, suffix)


for _name, _suffix, _flags, _what in (
    (
        "max-producers-per-topic",
        "/maxProducersPerTopic",
        ("--max-producers-per-topic", "-p"),
        "Max producers per topic",
    ),
    (
        "max-consumers-per-topic",
        "/maxConsumersPerTopic",
        ("--max-consumers-per-topic", "-c"),
        "Max consumers per topic",
    ),
    (
        "max-consumers-per-subscription",
        "/maxConsumersPerSubscription",
        ("--max-consumers-per-subscription", "-c"),
        "Max consumers per subscription",
    ),
    (
        "max-unacked-messages-per-consumer",
        "/maxUnackedMessagesPerConsumer",
        ("--max-unacked-messages-per-consumer", "-c"),
        "Max unacked messages per consumer",
    ),
    (
        "max-unacked-messages-per-subscription",
        "/maxUnackedMessagesPerSubscription",
        ("--max-unacked-messages-per-subscription", "-c"),
        "Max unacked messages per subscription",
    ),
):
    limit_commands(namespaces, _name, _policy_path(_suffix), NS_ARG, _flags, _what)

for _name, _suffix, _kind in (
    ("publish-rate", "/publishRate", "publish"),
    ("dispatch-rate", "/dispatchRate", "dispatch"),
    ("subscription-dispatch-rate", "/subscriptionDispatchRate", "dispatch"),
    ("subscribe-rate", "/subscribeRate", "subscribe"),
):
    rate_commands(namespaces, _name, _policy_path(_suffix), NS_ARG, _kind)


# ------------------------------------------------------------------ geo-replication

_CLUSTERS_OPT = click.option(
    "--clusters", "-c", required=True, help="Replication cluster names, comma-separated (as pulsar-admin)."
)


def _cluster_list(clusters: str) -> list[str]:
    return [c.strip() for c in clusters.split(",") if c.strip()]


@admin_command(namespaces, "set-clusters", NS_ARG, _CLUSTERS_OPT)
def namespaces_set_clusters(api: AdminApi, namespace: str, clusters: str) -> None:
    """Set the clusters a namespace is replicated to (each must exist and be allowed for the tenant)."""
    names = _cluster_list(clusters)
    api.do(
        "POST", ns_path(namespace, "/replication"), f"replication clusters of {namespace}: {', '.join(names)}", names
    )


@admin_command(namespaces, "get-clusters", NS_ARG)
def namespaces_get_clusters(api: AdminApi, namespace: str) -> None:
    """Show the clusters a namespace is replicated to."""
    api.show(ns_path(namespace, "/replication"), columns=["cluster"])
