"""``magnetar admin clusters``: clusters and their failure domains, as pulsar-admin names them."""

from __future__ import annotations

from urllib.parse import quote

import click

from ._admin_api import AdminApi, admin_command
from ._help import HelpGroup

clusters = HelpGroup("clusters", help="Clusters.")

__all__ = ["clusters"]


_cluster_arg = click.argument("cluster")
_url_opts = (
    click.option("--url", default=None, help="Web service URL (http://host:8080)."),
    click.option("--url-secure", default=None, help="Web service TLS URL (https://host:8443)."),
    click.option("--broker-url", default=None, help="Broker service URL (pulsar://host:6650)."),
    click.option("--broker-url-secure", default=None, help="Broker service TLS URL (pulsar+ssl://host:6651)."),
)
_domain_opt = click.option("--domain-name", "-d", "domain", required=True, help="Failure domain name.")
_brokers_opt = click.option(
    "--broker-list", "-b", "broker_list", required=True, help="Comma-separated brokers (host:port)."
)


def _cluster_body(
    url: str | None, url_secure: str | None, broker_url: str | None, broker_url_secure: str | None
) -> dict[str, str]:
    pairs = (
        ("serviceUrl", url),
        ("serviceUrlTls", url_secure),
        ("brokerServiceUrl", broker_url),
        ("brokerServiceUrlTls", broker_url_secure),
    )
    return {k: v for k, v in pairs if v}


def _cp(cluster: str, suffix: str = "") -> str:
    return f"/admin/v2/clusters/{quote(cluster, safe='')}{suffix}"


@admin_command(clusters, "list")
def clusters_list(api: AdminApi) -> None:
    """List clusters."""
    api.show("/admin/v2/clusters", columns=["cluster"])


@admin_command(clusters, "get", _cluster_arg)
def clusters_get(api: AdminApi, cluster: str) -> None:
    """Show a cluster's URLs."""
    api.show(_cp(cluster), title=cluster)


@admin_command(clusters, "create", _cluster_arg, *_url_opts)
def clusters_create(
    api: AdminApi,
    cluster: str,
    url: str | None,
    url_secure: str | None,
    broker_url: str | None,
    broker_url_secure: str | None,
) -> None:
    """Create a cluster."""
    api.do(
        "PUT", _cp(cluster), f"created cluster {cluster}", _cluster_body(url, url_secure, broker_url, broker_url_secure)
    )


@admin_command(clusters, "update", _cluster_arg, *_url_opts)
def clusters_update(
    api: AdminApi,
    cluster: str,
    url: str | None,
    url_secure: str | None,
    broker_url: str | None,
    broker_url_secure: str | None,
) -> None:
    """Update a cluster's URLs."""
    api.do(
        "POST",
        _cp(cluster),
        f"updated cluster {cluster}",
        _cluster_body(url, url_secure, broker_url, broker_url_secure),
    )


@admin_command(clusters, "delete", _cluster_arg)
def clusters_delete(api: AdminApi, cluster: str) -> None:
    """Delete a cluster (no tenant may still allow it)."""
    api.do("DELETE", _cp(cluster), f"deleted cluster {cluster}")


@admin_command(clusters, "list-failure-domains", _cluster_arg)
def clusters_list_domains(api: AdminApi, cluster: str) -> None:
    """List a cluster's failure domains and their brokers."""
    api.show(_cp(cluster, "/failureDomains"), title="failure domains")


@admin_command(clusters, "get-failure-domain", _cluster_arg, _domain_opt)
def clusters_get_domain(api: AdminApi, cluster: str, domain: str) -> None:
    """Show one failure domain."""
    api.show(_cp(cluster, f"/failureDomains/{quote(domain, safe='')}"), title=domain)


def _set_domain(api: AdminApi, cluster: str, domain: str, broker_list: str, verb: str) -> None:
    body = {"brokers": [b.strip() for b in broker_list.split(",") if b.strip()]}
    api.do(
        "POST",
        _cp(cluster, f"/failureDomains/{quote(domain, safe='')}"),
        f"{verb} failure domain {domain} of {cluster}",
        body,
    )


@admin_command(clusters, "create-failure-domain", _cluster_arg, _domain_opt, _brokers_opt)
def clusters_create_domain(api: AdminApi, cluster: str, domain: str, broker_list: str) -> None:
    """Create a failure domain (a broker belongs to one domain at most)."""
    _set_domain(api, cluster, domain, broker_list, "created")


@admin_command(clusters, "update-failure-domain", _cluster_arg, _domain_opt, _brokers_opt)
def clusters_update_domain(api: AdminApi, cluster: str, domain: str, broker_list: str) -> None:
    """Replace the brokers of a failure domain."""
    _set_domain(api, cluster, domain, broker_list, "updated")


@admin_command(clusters, "delete-failure-domain", _cluster_arg, _domain_opt)
def clusters_delete_domain(api: AdminApi, cluster: str, domain: str) -> None:
    """Delete a failure domain."""
    api.do("DELETE", _cp(cluster, f"/failureDomains/{quote(domain, safe='')}"), f"deleted failure domain {domain}")
