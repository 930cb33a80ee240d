"""Clusters and their failure domains: ``/admin/v2/clusters``, with Pulsar's paths, JSON and codes.

Rules:

* Rule 1 (storage): a cluster's ``ClusterData`` JSON is stored at ``/admin/clusters/{cluster}``
  and each failure domain at ``/admin/clusters/{cluster}/failureDomain/{domain}``, Pulsar's
  metadata paths, so a cluster initialised by other tools reads the same.
* Rule 2 (this broker's cluster): the cluster named by ``clusterName`` always exists. Until
  something is stored for it, GET answers the URLs this broker serves; an update stores data
  for it; it cannot be deleted (412).
* Rule 3 (ClusterData): ``serviceUrl``, ``serviceUrlTls``, ``brokerServiceUrl``,
  ``brokerServiceUrlTls``, ``proxyServiceUrl`` and ``proxyProtocol`` are strings,
  ``peerClusterNames`` a list of strings; other keys are dropped. A URL must use the scheme its
  field names (``http``/``https`` for the web ones, ``pulsar``/``pulsar+ssl`` for the broker
  ones); anything else is 400. A create of an existing cluster is 409, an update or a read of a
  missing one 404; a delete of a cluster a tenant still lists in ``allowedClusters`` is 412.
* Rule 4 (failure domains): ``{"brokers": ["host:port", ...]}``; a broker belongs to at most one
  domain of a cluster (409 naming the other domain, as Pulsar).
* Authorization (`_auth`): any authenticated role reads clusters; changes need a super user.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from metadata import NodeExistsError, NoNodeError

from ..resources._clusters import CLUSTERS_ROOT, ClusterResources
from ..resources._namespaces import POLICIES_ROOT
from ._common import RestError, check_stored_size, endpoint, json_body, json_response, no_content, service_of

__all__ = ["routes", "CLUSTERS_ROOT"]

_URL_SCHEMES = {
    "serviceUrl": ("http://",),
    "serviceUrlTls": ("https://",),
    "brokerServiceUrl": ("pulsar://",),
    "brokerServiceUrlTls": ("pulsar+ssl://",),
    "proxyServiceUrl": ("pulsar://", "pulsar+ssl://", "http://", "https://"),
}
_DOMAIN_DIR = "failureDomain"


def _cluster_name(request: Request, key: str = "cluster") -> str:
    try:
        return ClusterResources.check_name(request.path_params[key])
    except ValueError as exc:
        raise RestError(412, str(exc)) from None


def _path(cluster: str) -> str:
    return f"{CLUSTERS_ROOT}/{cluster}"


def _own_data(request: Request) -> dict[str, Any]:
    s = service_of(request)
    data = {"serviceUrl": s.web_service_url, "brokerServiceUrl": s.service_url}
    if s.service_url_tls:
        data["brokerServiceUrlTls"] = s.service_url_tls
    if s.web_service_url_tls:
        data["serviceUrlTls"] = s.web_service_url_tls
    return data


def _cluster_data(body: Any) -> dict[str, Any]:
    """Rule 3: the ClusterData to store for ``body``; 400 for a bad shape or URL."""
    if not isinstance(body, dict):
        raise RestError(400, "cluster data must be a JSON object")
    out: dict[str, Any] = {}
    for key, schemes in _URL_SCHEMES.items():
        value = body.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str) or not value.startswith(schemes):
            raise RestError(400, f"{key} must be a URL starting with {' or '.join(schemes)}, not {value!r}")
        out[key] = value
    protocol = body.get("proxyProtocol")
    if protocol is not None:
        if protocol != "SNI":
            raise RestError(400, f"proxyProtocol must be SNI, not {protocol!r}")
        out["proxyProtocol"] = protocol
    peers = body.get("peerClusterNames")
    if peers is not None:
        if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
            raise RestError(400, "peerClusterNames must be a list of strings")
        out["peerClusterNames"] = peers
    return out


async def _stored(request: Request, cluster: str) -> dict[str, Any] | None:
    return await ClusterResources(service_of(request).store).get(cluster)


async def _require_cluster(request: Request, cluster: str) -> dict[str, Any]:
    data = await _stored(request, cluster)
    if data is None:
        if cluster == service_of(request).config.cluster_name:
            return _own_data(request)
        raise RestError(404, f"Cluster {cluster} does not exist")
    return data


async def known_clusters(request: Request) -> list[str]:
    """This broker's cluster and every stored one, sorted."""
    s = service_of(request)
    return sorted(set(await ClusterResources(s.store).list()) | {s.config.cluster_name})


@endpoint
async def list_clusters(request: Request) -> Response:
    return json_response(await known_clusters(request))


@endpoint
async def get_cluster(request: Request) -> Response:
    return json_response(await _require_cluster(request, _cluster_name(request)))


@endpoint
async def create_cluster(request: Request) -> Response:
    cluster = _cluster_name(request)
    data = _cluster_data(await json_body(request, what="cluster data"))
    check_stored_size(request, data, "cluster data")
    s = service_of(request)
    if cluster == s.config.cluster_name:
        raise RestError(409, f"Cluster {cluster} already exists")  # Rule 2: it always does
    try:
        await s.store.create(_path(cluster), json.dumps(data).encode(), make_parents=True)
    except NodeExistsError:
        raise RestError(409, f"Cluster {cluster} already exists") from None
    return no_content()


@endpoint
async def update_cluster(request: Request) -> Response:
    cluster = _cluster_name(request)
    data = _cluster_data(await json_body(request, what="cluster data"))
    check_stored_size(request, data, "cluster data")
    s = service_of(request)
    path = _path(cluster)
    if await s.store.exists(path) is None:
        if cluster != s.config.cluster_name:
            raise RestError(404, f"Cluster {cluster} does not exist")
        try:  # Rule 2: the first update of this broker's own cluster stores it
            await s.store.create(path, json.dumps(data).encode(), make_parents=True)
            return no_content()
        except NodeExistsError:
            pass  # stored meanwhile: overwrite it like any update
    await s.store.set(path, json.dumps(data).encode(), version=-1)
    return no_content()


async def _tenants_using(request: Request, cluster: str) -> list[str]:
    s = service_of(request)
    using = []
    for tenant in await s.namespaces.list_tenants():
        try:
            data, _ = await s.store.get(f"{POLICIES_ROOT}/{tenant}")
        except NoNodeError:
            continue
        info = json.loads(data) if data else {}
        if cluster in (info.get("allowedClusters") or []):
            using.append(tenant)
    return using


@endpoint
async def delete_cluster(request: Request) -> Response:
    cluster = _cluster_name(request)
    s = service_of(request)
    if cluster == s.config.cluster_name:
        raise RestError(412, f"Cluster {cluster} is the cluster this broker serves (clusterName); it cannot be deleted")
    if await _stored(request, cluster) is None:
        raise RestError(404, f"Cluster {cluster} does not exist")
    tenants = await _tenants_using(request, cluster)
    if tenants:
        raise RestError(412, f"Cluster {cluster} is not empty: tenants {', '.join(tenants[:10])} allow it")
    await s.store.delete(_path(cluster), recursive=True)  # its failure domains go with it
    return no_content()


# ------------------------------------------------------------------ failure domains


def _domain_path(cluster: str, domain: str) -> str:
    return f"{_path(cluster)}/{_DOMAIN_DIR}/{domain}"


async def _domains(request: Request, cluster: str) -> dict[str, dict[str, Any]]:
    s = service_of(request)
    try:
        names = await s.store.children(f"{_path(cluster)}/{_DOMAIN_DIR}")
    except NoNodeError:
        return {}
    out = {}
    for name in sorted(names):
        try:
            data, _ = await s.store.get(_domain_path(cluster, name))
        except NoNodeError:
            continue
        out[name] = json.loads(data) if data else {"brokers": []}
    return out


@endpoint
async def list_domains(request: Request) -> Response:
    cluster = _cluster_name(request)
    await _require_cluster(request, cluster)
    return json_response(await _domains(request, cluster))


@endpoint
async def get_domain(request: Request) -> Response:
    cluster, domain = _cluster_name(request), _cluster_name(request, "domain")
    await _require_cluster(request, cluster)
    found = (await _domains(request, cluster)).get(domain)
    if found is None:
        raise RestError(404, f"Domain {domain} for cluster {cluster} does not exist")
    return json_response(found)


@endpoint
async def set_domain(request: Request) -> Response:
    cluster, domain = _cluster_name(request), _cluster_name(request, "domain")
    await _require_cluster(request, cluster)
    body = await json_body(request, what="failure domain")
    brokers = body.get("brokers") if isinstance(body, dict) else None
    if not isinstance(brokers, list) or not all(isinstance(b, str) and b for b in brokers):
        raise RestError(400, 'failure domain must be {"brokers": ["host:port", ...]}')
    value = {"brokers": sorted(set(brokers))}
    check_stored_size(request, value, "failure domain")
    for other, data in (await _domains(request, cluster)).items():
        taken = set(data.get("brokers") or []) & set(brokers)
        if other != domain and taken:
            raise RestError(409, f"Domain {other} already has brokers {', '.join(sorted(taken))}")
    s = service_of(request)
    path = _domain_path(cluster, domain)
    try:
        await s.store.create(path, json.dumps(value).encode(), make_parents=True)
    except NodeExistsError:
        await s.store.set(path, json.dumps(value).encode(), version=-1)
    return no_content()


@endpoint
async def delete_domain(request: Request) -> Response:
    cluster, domain = _cluster_name(request), _cluster_name(request, "domain")
    await _require_cluster(request, cluster)
    try:
        await service_of(request).store.delete(_domain_path(cluster, domain))
    except NoNodeError:
        raise RestError(404, f"Domain {domain} for cluster {cluster} does not exist") from None
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    c = "/admin/v2/clusters/{cluster}"
    return [
        Route("/admin/v2/clusters", list_clusters, methods=["GET"]),
        Route(c, get_cluster, methods=["GET"]),
        Route(c, create_cluster, methods=["PUT"]),
        Route(c, update_cluster, methods=["POST"]),
        Route(c, delete_cluster, methods=["DELETE"]),
        Route(f"{c}/failureDomains", list_domains, methods=["GET"]),
        Route(c + "/failureDomains/{domain}", get_domain, methods=["GET"]),
        Route(c + "/failureDomains/{domain}", set_domain, methods=["POST"]),
        Route(c + "/failureDomains/{domain}", delete_domain, methods=["DELETE"]),
    ]
