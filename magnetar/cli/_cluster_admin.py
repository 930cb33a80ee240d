"""``magnetar admin`` commands of multi-broker clusters: brokers, leader, load, bundles, unload.

Registered on the ``brokers`` and ``namespaces`` groups of `magnetar.cli.cmd_admin` (imported by
its group before a sub-command is resolved), as pulsar-admin names them:
``brokers list|leader-broker|load-report|owned-namespaces``, ``namespaces bundles|split-bundle|unload``.
"""

from __future__ import annotations

import click

from magnetar.cli.cmd_admin import _Api, _cmd, _ns_arg, _nsp, brokers, namespaces

_cluster_arg = click.argument("cluster", required=False)


@_cmd(brokers, "list", _cluster_arg)
def brokers_list(api: _Api, cluster: str | None) -> None:
    """List the active brokers (of CLUSTER, default the one answering)."""
    path = "/admin/v2/brokers" if not cluster else f"/admin/v2/brokers/{cluster}"
    api.show(path, columns=["broker"])


@_cmd(brokers, "leader-broker")
def brokers_leader(api: _Api) -> None:
    """Show the load-manager leader."""
    api.show("/admin/v2/brokers/leaderBroker", title="leader broker")


@_cmd(brokers, "load-report")
def brokers_load_report(api: _Api) -> None:
    """Show the answering broker's load report (bundles, topics, rates, CPU, memory)."""
    api.show("/admin/v2/broker-stats/load-report", title="load report")


@_cmd(brokers, "load-decisions")
def brokers_load_decisions(api: _Api) -> None:
    """Show the answering broker's recent bundle assignments, unloads and splits, with reasons."""
    api.show("/admin/v2/broker-stats/load-decisions", columns=["time", "action", "bundle", "broker", "reason"])


@_cmd(brokers, "owned-namespaces", click.argument("cluster"), click.argument("broker"))
def brokers_owned(api: _Api, cluster: str, broker: str) -> None:
    """Show the bundles BROKER (host:port of its admin service) owns."""
    api.show(f"/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", title=f"bundles owned by {broker}")


@_cmd(namespaces, "bundles", _ns_arg)
def namespaces_bundles(api: _Api, namespace: str) -> None:
    """Show a namespace's bundle boundaries."""
    api.show(_nsp(namespace, "/bundles"), title=f"bundles of {namespace}")


_bundle_opt = click.option("--bundle", "-b", default=None, help="The bundle, e.g. 0x00000000_0x40000000.")


@_cmd(namespaces, "split-bundle", _ns_arg, click.option("--bundle", "-b", required=True,
                                                         help="The bundle, e.g. 0x00000000_0x40000000."),
      click.option("--unload", "-u", is_flag=True, help="Unload the new bundles after the split."))
def namespaces_split(api: _Api, namespace: str, bundle: str, unload: bool) -> None:
    """Split a bundle of a namespace in two halves (on its owner)."""
    api.do("PUT", _nsp(namespace, f"/{bundle}/split"), f"split {namespace}/{bundle}",
           params={"unload": str(unload).lower()})


@_cmd(namespaces, "unload", _ns_arg, _bundle_opt)
def namespaces_unload(api: _Api, namespace: str, bundle: str | None) -> None:
    """Unload a namespace (every bundle) or one bundle: topics close, clients move by themselves."""
    suffix = f"/{bundle}/unload" if bundle else "/unload"
    api.do("PUT", _nsp(namespace, suffix), f"unloaded {namespace}{'/' + bundle if bundle else ''}")
