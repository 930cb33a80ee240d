"""More ``magnetar admin`` commands, named and flagged as ``pulsar-admin``'s: clusters and failure
domains, dynamic broker configuration, broker-stats, namespace and topic limits and rates,
namespace clear-backlog / unsubscribe, expiry on all subscriptions and partitioned stats (the
offload commands are `_admin_offload`'s).

Imported by `cmd_admin`'s ``admin`` group (function level, before it lists or resolves a
sub-command); every command is registered on that module's groups with `cmd_admin._cmd`, so
they share its options, output (tables or ``--json``) and errors.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from .cmd_admin import (
    _Api,
    _cmd,
    _emit,
    _message_id,
    _ns_arg,
    _nsp,
    _sp,
    _sub_opt,
    _topic_arg,
    _tp,
    brokers,
    clusters,
    command,
    namespaces,
    topics,
)

__all__: list[str] = []

# ------------------------------------------------------------------ clusters

_cluster_arg = click.argument("cluster")
_url_opts = (
    click.option("--url", default=None, help="Web service URL (http://host:8080)."),
    click.option("--url-secure", default=None, help="Web service TLS URL (https://host:8443)."),
    click.option("--broker-url", default=None, help="Broker service URL (pulsar://host:6650)."),
    click.option("--broker-url-secure", default=None, help="Broker service TLS URL (pulsar+ssl://host:6651)."),
)
_domain_opt = click.option("--domain-name", "-d", "domain", required=True, help="Failure domain name.")
_brokers_opt = click.option("--broker-list", "-b", "broker_list", required=True,
                            help="Comma-separated brokers (host:port).")


def _cluster_body(url: str | None, url_secure: str | None, broker_url: str | None,
                  broker_url_secure: str | None) -> dict[str, str]:
    pairs = (("serviceUrl", url), ("serviceUrlTls", url_secure), ("brokerServiceUrl", broker_url),
             ("brokerServiceUrlTls", broker_url_secure))
    return {k: v for k, v in pairs if v}


def _cp(cluster: str, suffix: str = "") -> str:
    return f"/admin/v2/clusters/{quote(cluster, safe='')}{suffix}"


@_cmd(clusters, "get", _cluster_arg)
def clusters_get(api: _Api, cluster: str) -> None:
    """Show a cluster's URLs."""
    api.show(_cp(cluster), title=cluster)


@_cmd(clusters, "create", _cluster_arg, *_url_opts)
def clusters_create(api: _Api, cluster: str, url: str | None, url_secure: str | None, broker_url: str | None,
                    broker_url_secure: str | None) -> None:
    """Create a cluster."""
    api.do("PUT", _cp(cluster), f"created cluster {cluster}", _cluster_body(url, url_secure, broker_url,
                                                                             broker_url_secure))


@_cmd(clusters, "update", _cluster_arg, *_url_opts)
def clusters_update(api: _Api, cluster: str, url: str | None, url_secure: str | None, broker_url: str | None,
                    broker_url_secure: str | None) -> None:
    """Update a cluster's URLs."""
    api.do("POST", _cp(cluster), f"updated cluster {cluster}", _cluster_body(url, url_secure, broker_url,
                                                                              broker_url_secure))


@_cmd(clusters, "delete", _cluster_arg)
def clusters_delete(api: _Api, cluster: str) -> None:
    """Delete a cluster (no tenant may still allow it)."""
    api.do("DELETE", _cp(cluster), f"deleted cluster {cluster}")


@_cmd(clusters, "list-failure-domains", _cluster_arg)
def clusters_list_domains(api: _Api, cluster: str) -> None:
    """List a cluster's failure domains and their brokers."""
    api.show(_cp(cluster, "/failureDomains"), title="failure domains")


@_cmd(clusters, "get-failure-domain", _cluster_arg, _domain_opt)
def clusters_get_domain(api: _Api, cluster: str, domain: str) -> None:
    """Show one failure domain."""
    api.show(_cp(cluster, f"/failureDomains/{quote(domain, safe='')}"), title=domain)


def _set_domain(api: _Api, cluster: str, domain: str, broker_list: str, verb: str) -> None:
    body = {"brokers": [b.strip() for b in broker_list.split(",") if b.strip()]}
    api.do("POST", _cp(cluster, f"/failureDomains/{quote(domain, safe='')}"),
           f"{verb} failure domain {domain} of {cluster}", body)


@_cmd(clusters, "create-failure-domain", _cluster_arg, _domain_opt, _brokers_opt)
def clusters_create_domain(api: _Api, cluster: str, domain: str, broker_list: str) -> None:
    """Create a failure domain (a broker belongs to one domain at most)."""
    _set_domain(api, cluster, domain, broker_list, "created")


@_cmd(clusters, "update-failure-domain", _cluster_arg, _domain_opt, _brokers_opt)
def clusters_update_domain(api: _Api, cluster: str, domain: str, broker_list: str) -> None:
    """Replace the brokers of a failure domain."""
    _set_domain(api, cluster, domain, broker_list, "updated")


@_cmd(clusters, "delete-failure-domain", _cluster_arg, _domain_opt)
def clusters_delete_domain(api: _Api, cluster: str, domain: str) -> None:
    """Delete a failure domain."""
    api.do("DELETE", _cp(cluster, f"/failureDomains/{quote(domain, safe='')}"), f"deleted failure domain {domain}")


# ------------------------------------------------------------------ brokers: dynamic configuration

_CONFIG = "/admin/v2/brokers/configuration"
_config_opt = click.option("--config", "-c", "name", required=True, help="Configuration key (Pulsar's name).")


@_cmd(brokers, "list-dynamic-config")
def brokers_list_dynamic(api: _Api) -> None:
    """List the keys that can be changed on running brokers."""
    api.show(_CONFIG, columns=["key"])


@_cmd(brokers, "get-all-dynamic-config")
def brokers_get_dynamic(api: _Api) -> None:
    """Show the stored dynamic overrides."""
    api.show(f"{_CONFIG}/values", title="dynamic configuration")


@_cmd(brokers, "get-runtime-config")
def brokers_get_runtime(api: _Api) -> None:
    """Show this broker's running configuration."""
    api.show(f"{_CONFIG}/runtime", title="runtime configuration")


@_cmd(brokers, "update-dynamic-config", _config_opt,
      click.option("--value", "-v", required=True, help="New value."))
def brokers_update_dynamic(api: _Api, name: str, value: str) -> None:
    """Change a dynamic key on every broker of the cluster."""
    api.do("POST", f"{_CONFIG}/{quote(name, safe='')}/{quote(value, safe='')}", f"set {name} to {value}")


@_cmd(brokers, "delete-dynamic-config", _config_opt)
def brokers_delete_dynamic(api: _Api, name: str) -> None:
    """Remove a dynamic override (the config file's value applies again)."""
    api.do("DELETE", f"{_CONFIG}/{quote(name, safe='')}", f"removed the override of {name}")


# ------------------------------------------------------------------ broker-stats


@command.group("broker-stats")
def broker_stats() -> None:
    """Statistics of the broker."""


@_cmd(broker_stats, "topics")
def broker_stats_topics(api: _Api) -> None:
    """Stats of every topic loaded on the broker (JSON)."""
    _emit(api, api.call("GET", "/admin/v2/broker-stats/topics"))


@_cmd(broker_stats, "monitoring-metrics")
def broker_stats_metrics(api: _Api) -> None:
    """Per-namespace broker metrics."""
    rows = api.call("GET", "/admin/v2/broker-stats/metrics") or []
    if api.as_json:
        _emit(api, rows)
        return
    _emit(api, [{**r["dimensions"], **r["metrics"]} for r in rows])


@_cmd(broker_stats, "load-report")
def broker_stats_load_report(api: _Api) -> None:
    """The broker's load report (cpu, memory, bandwidth, rates)."""
    api.show("/admin/v2/broker-stats/load-report", title="load report")


# ------------------------------------------------------------------ limits (namespace and topic)


def _limit_commands(group: click.Group, name: str, path: Any, arg: Any, flag: tuple[str, ...], what: str) -> None:
    """``set-X`` (an integer flag), ``get-X`` and ``remove-X`` of one count limit."""
    @_cmd(group, f"set-{name}", arg, click.option(*flag, "value", type=int, required=True, help=f"{what} (0: none)."))
    def set_(api: _Api, value: int, **target: str) -> None:
        (key,) = target.values()
        api.do("POST", path(key), f"set {name} of {key} to {value}", value)

    set_.help = f"Set the {what.lower()}."

    @_cmd(group, f"get-{name}", arg)
    def get(api: _Api, **target: str) -> None:
        (key,) = target.values()
        api.show(path(key))

    get.help = f"Show the {what.lower()}."

    @_cmd(group, f"remove-{name}", arg)
    def remove(api: _Api, **target: str) -> None:
        (key,) = target.values()
        api.do("DELETE", path(key), f"removed {name} of {key}")

    remove.help = f"Remove the {what.lower()} (the next level's applies)."


def _rate_commands(group: click.Group, name: str, path: Any, arg: Any, kind: str) -> None:
    """``set-X``, ``get-X`` and ``remove-X`` of one rate (publish, dispatch or subscribe)."""
    opts: tuple[Any, ...]
    if kind == "publish":
        opts = (click.option("--msg-publish-rate", "-m", "msgs", type=int, default=-1, help="Messages per second."),
                click.option("--byte-publish-rate", "-b", "nbytes", type=int, default=-1, help="Bytes per second."))
    elif kind == "subscribe":
        opts = (click.option("--subscribe-rate", "-sr", "msgs", type=int, default=-1,
                             help="Subscribes per consumer per period."),
                click.option("--subscribe-rate-period", "-st", "period", type=int, default=30,
                             help="Period in seconds."))
    else:
        opts = (click.option("--msg-dispatch-rate", "-md", "msgs", type=int, default=-1, help="Messages per period."),
                click.option("--byte-dispatch-rate", "-bd", "nbytes", type=int, default=-1, help="Bytes per period."),
                click.option("--dispatch-rate-period", "-dt", "period", type=int, default=1,
                             help="Period in seconds."))

    @_cmd(group, f"set-{name}", arg, *opts)
    def set_(api: _Api, msgs: int, nbytes: int = -1, period: int = 1, **target: str) -> None:
        (key,) = target.values()
        if kind == "publish":
            body: dict[str, Any] = {"publishThrottlingRateInMsg": msgs, "publishThrottlingRateInByte": nbytes}
        elif kind == "subscribe":
            body = {"subscribeThrottlingRatePerConsumer": msgs, "ratePeriodInSecond": period}
        else:
            body = {"dispatchThrottlingRateInMsg": msgs, "dispatchThrottlingRateInByte": nbytes,
                    "relativeToPublishRate": False, "ratePeriodInSecond": period}
        api.do("POST", path(key), f"set {name} of {key}", body)

    set_.help = f"Set the {name.replace('-', ' ')}."

    @_cmd(group, f"get-{name}", arg)
    def get(api: _Api, **target: str) -> None:
        (key,) = target.values()
        api.show(path(key), title=name)

    get.help = f"Show the {name.replace('-', ' ')}."

    @_cmd(group, f"remove-{name}", arg)
    def remove(api: _Api, **target: str) -> None:
        (key,) = target.values()
        api.do("DELETE", path(key), f"removed {name} of {key}")

    remove.help = f"Remove the {name.replace('-', ' ')}."


def _nsf(suffix: str) -> Any:
    return lambda namespace: _nsp(namespace, suffix)


def _tpf(suffix: str) -> Any:
    return lambda topic: _tp(topic) + suffix


for _name, _suffix, _flag, _what in (
        ("max-producers-per-topic", "/maxProducersPerTopic", ("--max-producers-per-topic", "-p"),
         "Max producers per topic"),
        ("max-consumers-per-topic", "/maxConsumersPerTopic", ("--max-consumers-per-topic", "-c"),
         "Max consumers per topic"),
        ("max-consumers-per-subscription", "/maxConsumersPerSubscription",
         ("--max-consumers-per-subscription", "-c"), "Max consumers per subscription"),
        ("max-unacked-messages-per-consumer", "/maxUnackedMessagesPerConsumer",
         ("--max-unacked-messages-per-consumer", "-c"), "Max unacked messages per consumer"),
        ("max-unacked-messages-per-subscription", "/maxUnackedMessagesPerSubscription",
         ("--max-unacked-messages-per-subscription", "-c"), "Max unacked messages per subscription")):
    _limit_commands(namespaces, _name, _nsf(_suffix), _ns_arg, _flag, _what)

for _name, _suffix, _flag, _what in (
        ("max-producers", "/maxProducers", ("--max-producers", "-p"), "Max producers of the topic"),
        ("max-consumers", "/maxConsumers", ("--max-consumers", "-c"), "Max consumers of the topic"),
        ("max-consumers-per-subscription", "/maxConsumersPerSubscription",
         ("--max-consumers-per-subscription", "-c"), "Max consumers per subscription"),
        ("max-unacked-messages-on-consumer", "/maxUnackedMessagesOnConsumer",
         ("--max-unacked-messages", "-m"), "Max unacked messages per consumer"),
        ("max-unacked-messages-on-subscription", "/maxUnackedMessagesOnSubscription",
         ("--max-unacked-messages", "-m"), "Max unacked messages per subscription")):
    _limit_commands(topics, _name, _tpf(_suffix), _topic_arg, _flag, _what)

for _name, _suffix, _kind in (("publish-rate", "/publishRate", "publish"),
                              ("dispatch-rate", "/dispatchRate", "dispatch"),
                              ("subscription-dispatch-rate", "/subscriptionDispatchRate", "dispatch"),
                              ("subscribe-rate", "/subscribeRate", "subscribe")):
    _rate_commands(namespaces, _name, _nsf(_suffix), _ns_arg, _kind)
    _rate_commands(topics, _name, _tpf(_suffix), _topic_arg, _kind)


# ------------------------------------------------------------------ namespace operations


@_cmd(namespaces, "clear-backlog", _ns_arg,
      click.option("--sub", "-s", "subscription", default=None, help="Only this subscription."),
      click.option("--force", "-f", is_flag=True, help="Do not ask (always on: this CLI never asks)."))
def namespaces_clear_backlog(api: _Api, namespace: str, subscription: str | None, force: bool) -> None:
    """Skip the whole backlog of every subscription (or of --sub) on every topic of a namespace."""
    suffix = "/clearBacklog" + (f"/{quote(subscription, safe='')}" if subscription else "")
    api.do("POST", _nsp(namespace, suffix), f"cleared the backlog of {subscription or 'every subscription'} "
                                            f"in {namespace}")


@_cmd(namespaces, "unsubscribe", _ns_arg,
      click.option("--sub", "-s", "subscription", required=True, help="Subscription to delete."))
def namespaces_unsubscribe(api: _Api, namespace: str, subscription: str) -> None:
    """Delete a subscription from every topic of a namespace."""
    api.do("POST", _nsp(namespace, f"/unsubscribe/{quote(subscription, safe='')}"),
           f"deleted subscription {subscription} in {namespace}")


@_cmd(namespaces, "get-deduplication", _ns_arg)
def namespaces_get_dedup(api: _Api, namespace: str) -> None:
    """Show whether deduplication is set on a namespace."""
    api.show(_nsp(namespace, "/deduplication"))


@_cmd(namespaces, "set-schema-compatibility-strategy", _ns_arg,
      click.option("--compatibility", "-c", required=True, help="FULL, BACKWARD, FORWARD, ALWAYS_COMPATIBLE, ..."))
def namespaces_set_strategy(api: _Api, namespace: str, compatibility: str) -> None:
    """Set the schema compatibility strategy."""
    api.do("PUT", _nsp(namespace, "/schemaCompatibilityStrategy"),
           f"set schema compatibility strategy of {namespace} to {compatibility}", compatibility)


@_cmd(namespaces, "get-schema-compatibility-strategy", _ns_arg)
def namespaces_get_strategy(api: _Api, namespace: str) -> None:
    """Show the schema compatibility strategy."""
    api.show(_nsp(namespace, "/schemaCompatibilityStrategy"))


@_cmd(namespaces, "set-is-allow-auto-update-schema", _ns_arg,
      click.option("--enable/--disable", "-e/-d", required=True, help="Let producers add schema versions."))
def namespaces_set_auto_update(api: _Api, namespace: str, enable: bool) -> None:
    """Allow or refuse new schema versions from producers."""
    api.do("POST", _nsp(namespace, "/isAllowAutoUpdateSchema"),
           f"{'enabled' if enable else 'disabled'} schema auto update on {namespace}", enable)


@_cmd(namespaces, "get-is-allow-auto-update-schema", _ns_arg)
def namespaces_get_auto_update(api: _Api, namespace: str) -> None:
    """Show whether producers may add schema versions."""
    api.show(_nsp(namespace, "/isAllowAutoUpdateSchema"))


# ------------------------------------------------------------------ topic operations


@_cmd(topics, "expire-messages-all-subscriptions", _topic_arg,
      click.option("--expireTime", "-t", "expire_time", type=int, required=True,
                   help="Acknowledge the messages published more than this many seconds ago."))
def topics_expire_all(api: _Api, topic: str, expire_time: int) -> None:
    """Expire (acknowledge) the old messages of every subscription of a topic."""
    api.do("POST", f"{_tp(topic)}/all_subscription/expireMessages/{expire_time}",
           f"expired the messages of every subscription of {topic} older than {expire_time} s")


@_cmd(topics, "expire-messages-to-position", _topic_arg, _sub_opt,
      click.option("--position", "-p", required=True, help="ledgerId:entryId: expire up to this message."),
      click.option("--exclude-reset-position", "-e", "exclude", is_flag=True, help="Keep the message itself."))
def topics_expire_to_position(api: _Api, topic: str, subscription: str, position: str, exclude: bool) -> None:
    """Expire (acknowledge) a subscription's messages up to a message id (pulsar-admin's -p)."""
    api.do("POST", f"{_sp(topic, subscription)}/expireMessages", f"expired {subscription} up to {position}",
           {**_message_id(position), "isExcluded": exclude})


@_cmd(topics, "partitioned-stats", _topic_arg,
      click.option("--per-partition", is_flag=True, help="Also the stats of each partition."))
def topics_partitioned_stats(api: _Api, topic: str, per_partition: bool) -> None:
    """Stats of a partitioned topic, summed over its partitions."""
    stats = api.call("GET", _tp(topic) + "/partitioned-stats", params={"perPartition": str(per_partition).lower()})
    if api.as_json:
        _emit(api, stats)
        return
    _emit(api, {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}, title=topic)
    for name, part in (stats.get("partitions") or {}).items():
        _emit(api, {k: v for k, v in part.items() if not isinstance(v, (dict, list))}, title=name)


@_cmd(topics, "set-deduplication", _topic_arg,
      click.option("--enable/--disable", "-e/-d", required=True, help="Turn deduplication on or off."))
def topics_set_dedup(api: _Api, topic: str, enable: bool) -> None:
    """Turn deduplication on or off for one topic (over its namespace's policy)."""
    api.do("POST", _tp(topic) + "/deduplicationEnabled",
           f"{'enabled' if enable else 'disabled'} deduplication on {topic}", enable)


@_cmd(topics, "get-deduplication", _topic_arg)
def topics_get_dedup(api: _Api, topic: str) -> None:
    """Show the topic's own deduplication setting."""
    api.show(_tp(topic) + "/deduplicationEnabled")


@_cmd(topics, "remove-deduplication", _topic_arg)
def topics_remove_dedup(api: _Api, topic: str) -> None:
    """Remove the topic's deduplication setting (its namespace's applies)."""
    api.do("DELETE", _tp(topic) + "/deduplicationEnabled", f"removed the deduplication setting of {topic}")
