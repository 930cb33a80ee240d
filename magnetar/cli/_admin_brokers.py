"""``magnetar admin brokers`` and ``broker-stats``: health, membership, leader, load, dynamic
configuration and statistics, as pulsar-admin names them."""

from __future__ import annotations

import json
from urllib.parse import quote

import click

from ._admin_api import AdminApi, admin_command, emit
from ._help import HelpGroup

brokers = HelpGroup("brokers", help="Brokers.")
broker_stats = HelpGroup("broker-stats", help="Statistics of the broker.")

__all__ = ["broker_stats", "brokers"]


@admin_command(
    brokers,
    "healthcheck",
    click.option(
        "--topic-version",
        "-tv",
        "topic_version",
        type=click.Choice(["V1", "V2"]),
        default="V2",
        show_default=True,
        help="Heartbeat topic naming (V2: pulsar/{broker}/healthcheck).",
    ),
)
def brokers_healthcheck(api: AdminApi, topic_version: str) -> None:
    """Write and read back a heartbeat message on this broker (exit status 1 when unhealthy)."""
    answer = api.call("GET", "/admin/v2/brokers/health", params={"topicVersion": topic_version})
    if api.as_json:
        click.echo(json.dumps({"ok": True, "message": answer}))
    else:
        click.echo(answer)


# ------------------------------------------------------------------ cluster membership and load

_optional_cluster_arg = click.argument("cluster", required=False)


@admin_command(brokers, "list", _optional_cluster_arg)
def brokers_list(api: AdminApi, cluster: str | None) -> None:
    """List the active brokers (of CLUSTER, default the one answering)."""
    path = "/admin/v2/brokers" if not cluster else f"/admin/v2/brokers/{cluster}"
    api.show(path, columns=["broker"])


@admin_command(brokers, "leader-broker")
def brokers_leader(api: AdminApi) -> None:
    """Show the load-manager leader."""
    api.show("/admin/v2/brokers/leaderBroker", title="leader broker")


@admin_command(brokers, "load-report")
def brokers_load_report(api: AdminApi) -> None:
    """Show the answering broker's load report (bundles, topics, rates, CPU, memory)."""
    api.show("/admin/v2/broker-stats/load-report", title="load report")


@admin_command(brokers, "load-decisions")
def brokers_load_decisions(api: AdminApi) -> None:
    """Show the answering broker's recent bundle assignments, unloads and splits, with reasons."""
    api.show("/admin/v2/broker-stats/load-decisions", columns=["time", "action", "bundle", "broker", "reason"])


@admin_command(
    brokers,
    "owned-namespaces",
    click.argument("cluster"),
    click.argument("broker", required=False),
    click.option(
        "--url",
        "-u",
        "broker_url",
        default=None,
        help="The broker, as pulsar-admin's brokers namespaces names it (instead of BROKER).",
    ),
)
def brokers_owned(api: AdminApi, cluster: str, broker: str | None, broker_url: str | None) -> None:
    """Show the bundles BROKER (host:port of its admin service) owns."""
    if (broker is None) == (broker_url is None):
        raise click.UsageError("name the broker once: BROKER or --url")
    broker = broker or broker_url
    api.show(f"/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", title=f"bundles owned by {broker}")


# ------------------------------------------------------------------ dynamic configuration

_CONFIG = "/admin/v2/brokers/configuration"
_config_opt = click.option("--config", "-c", "name", required=True, help="Configuration key (Pulsar's name).")


@admin_command(brokers, "list-dynamic-config")
def brokers_list_dynamic(api: AdminApi) -> None:
    """List the keys that can be changed on running brokers."""
    api.show(_CONFIG, columns=["key"])


@admin_command(brokers, "get-all-dynamic-config")
def brokers_get_dynamic(api: AdminApi) -> None:
    """Show the stored dynamic overrides."""
    api.show(f"{_CONFIG}/values", title="dynamic configuration")


@admin_command(brokers, "get-runtime-config")
def brokers_get_runtime(api: AdminApi) -> None:
    """Show this broker's running configuration."""
    api.show(f"{_CONFIG}/runtime", title="runtime configuration")


@admin_command(
    brokers, "update-dynamic-config", _config_opt, click.option("--value", "-v", required=True, help="New value.")
)
def brokers_update_dynamic(api: AdminApi, name: str, value: str) -> None:
    """Change a dynamic key on every broker of the cluster."""
    api.do("POST", f"{_CONFIG}/{quote(name, safe='')}/{quote(value, safe='')}", f"set {name} to {value}")


@admin_command(brokers, "delete-dynamic-config", _config_opt)
def brokers_delete_dynamic(api: AdminApi, name: str) -> None:
    """Remove a dynamic override (the config file's value applies again)."""
    api.do("DELETE", f"{_CONFIG}/{quote(name, safe='')}", f"removed the override of {name}")


# ------------------------------------------------------------------ broker-stats


@admin_command(broker_stats, "topics")
def broker_stats_topics(api: AdminApi) -> None:
    """Stats of every topic loaded on the broker (JSON)."""
    emit(api, api.call("GET", "/admin/v2/broker-stats/topics"))


@admin_command(broker_stats, "monitoring-metrics")
def broker_stats_metrics(api: AdminApi) -> None:
    """Per-namespace broker metrics."""
    rows = api.call("GET", "/admin/v2/broker-stats/metrics") or []
    if api.as_json:
        emit(api, rows)
        return
    emit(api, [{**r["dimensions"], **r["metrics"]} for r in rows])


@admin_command(broker_stats, "load-report")
def broker_stats_load_report(api: AdminApi) -> None:
    """The broker's load report (cpu, memory, bandwidth, rates)."""
    api.show("/admin/v2/broker-stats/load-report", title="load report")
