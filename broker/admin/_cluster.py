"""Brokers, bundles and ownership over REST (multi-broker clusters, `broker.cluster._ownership`).

Routes (Pulsar's v2 admin paths):

* ``GET /admin/v2/brokers`` and ``GET /admin/v2/brokers/{cluster}``: the registered brokers'
  ids (``host:port`` of their admin service); 404 for another cluster's name.
* ``GET /admin/v2/brokers/leaderBroker``: ``{"brokerId": ..., "serviceUrl": ...}`` of the
  load-manager leader.
* ``GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces``: the bundles that broker owns
  (answered by it: another broker's id is redirected there with 307).
* ``GET /admin/v2/broker-stats/load-decisions`` (Magnetar's): the recent assignments, unloads and
  splits with their reasons (Principle 8: explain, don't just act). The load report itself is
  ``broker-stats/load-report`` (`_broker_stats`), which carries the load manager's fields here.
* ``GET /admin/v2/namespaces/{t}/{ns}/bundles``: ``{"boundaries": [...], "numBundles": N}``.
* ``PUT /admin/v2/namespaces/{t}/{ns}/{bundle}/split``: split the bundle in halves (on its owner:
  another broker's bundle is redirected there with 307).
* ``PUT /admin/v2/namespaces/{t}/{ns}/{bundle}/unload`` (307 to the owner when another broker
  owns it; 204 and nothing to do when nobody does) and ``PUT /admin/v2/namespaces/{t}/{ns}/unload``
  (every bundle, each on its owner, asked by this broker with its own credentials: the
  ``brokerClient*`` keys, `broker.cluster._broker_client`).

Standalone (no ownership): the one broker is the only broker and the leader; unloading a bundle
closes its loaded topics (clients reconnect to the same broker).

`OwnerRedirect` (middleware): a topic operation (``/admin/v2/persistent/{t}/{ns}/{topic}/...``)
or an HTTP lookup (``/lookup/v2/topic/persistent/...``) on a broker that does not serve the
topic is answered 307 to the broker that does (its bundle is assigned first when unowned), as
Pulsar's admin API does. Every 307 of this module keeps the request's transport: a request that
came over https goes to the owner's https URL. Partitioned topics (their base name) and
partitioned-topic metadata (``.../{topic}/partitions``: create, update, get, delete) are answered
where asked: the metadata lives in the store.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from magnetar.common.admin_client import AdminError
from protocols.pulsar import InvalidTopicNameError, NamespaceName, TopicName

from .._errors import BrokerServiceError
from ..auth import AuthenticationError
from ..resources._bundles import BundleRange, boundaries_of, bundle_hash, bundles_of, parse_bundle
from ._common import (
    RestError,
    endpoint,
    json_response,
    namespace_of,
    no_content,
    query_bool,
    require_namespace,
    service_of,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from .._service import BrokerService

__all__ = ["OwnerRedirect", "routes"]

log = logging.getLogger("broker.admin")


async def _broker_ids(s: BrokerService) -> list[str]:
    if s.ownership is None:
        return [s.broker_id]
    return sorted(await s.ownership.brokers())


@endpoint
async def list_brokers(request: Request) -> Response:
    return json_response(await _broker_ids(service_of(request)))


@endpoint
async def list_cluster_brokers(request: Request) -> Response:
    s = service_of(request)
    cluster = request.path_params["cluster"]
    if cluster != s.config.cluster_name:
        raise RestError(404, f"Cluster {cluster} does not exist")
    return json_response(await _broker_ids(s))


@endpoint
async def leader_broker(request: Request) -> Response:
    s = service_of(request)
    if s.ownership is None:
        return json_response({"brokerId": s.broker_id, "serviceUrl": s.web_service_url})
    leader = await s.ownership.leader()
    if leader is None:
        raise RestError(404, "no leader broker is elected yet")
    return json_response(leader)


@endpoint
async def owned_namespaces(request: Request) -> Response:
    s = service_of(request)
    cluster, broker = request.path_params["cluster"], request.path_params["broker"]
    if cluster != s.config.cluster_name:
        raise RestError(404, f"Cluster {cluster} does not exist")
    if broker != s.broker_id:
        if s.ownership is None or broker not in await s.ownership.brokers():
            raise RestError(404, f"broker {broker} is not registered in cluster {cluster}")
        info = (await s.ownership.brokers())[broker]
        return _redirect(request, s.ownership.http_url_of(info, _secure(request)) or "")
    out: dict[str, Any] = {}
    if s.ownership is None:
        for ns in await _all_namespaces(s):
            policies = await s.namespaces.get_policies(ns) or {}
            for b in bundles_of(boundaries_of(policies)):
                out[f"{ns}/{b.name}"] = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
    else:
        for ns, b, state in s.ownership.bundles_owned():
            out[f"{ns}/{b.name}"] = {
                "broker_assignment": "shared",
                "is_controlled": False,
                "is_active": state.value == "owned",
            }
    return json_response(out)


async def _all_namespaces(s: BrokerService) -> list[NamespaceName]:
    out = []
    for tenant in await s.namespaces.list_tenants():
        out += [NamespaceName.parse(n) for n in await s.namespaces.list_namespaces(tenant)]
    return out


@endpoint
async def load_decisions(request: Request) -> Response:
    s = service_of(request)
    return json_response(list(s.ownership.decisions) if s.ownership is not None else [])


@endpoint
async def get_bundles(request: Request) -> Response:
    ns = namespace_of(request)
    policies = await require_namespace(service_of(request), ns)
    try:
        b = boundaries_of(policies)
    except ValueError as exc:
        raise RestError(500, f"namespace {ns} has malformed bundles: {exc}") from None
    return json_response({"boundaries": [f"0x{x:08x}" for x in b], "numBundles": len(b) - 1})


def _bundle_of(request: Request, policies: dict[str, Any]) -> BundleRange:
    name = request.path_params["bundle"]
    try:
        bundle = parse_bundle(name)
    except ValueError as exc:
        raise RestError(412, f"Invalid bundle range {name}: {exc}") from None
    if bundle not in bundles_of(boundaries_of(policies)):
        raise RestError(404, f"Bundle {name} is not a bundle of this namespace")
    return bundle


def _secure(request: Request) -> bool:
    """Whether the request came over https: its redirect then goes to the https admin URL."""
    return request.url.scheme == "https"


def _redirect(request: Request, base: str) -> Response:
    if not base:
        raise RestError(503, "the owning broker has no admin URL")
    url = base.rstrip("/") + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(url, status_code=307)


async def _unload_local(s: BrokerService, ns: NamespaceName, bundle: BundleRange) -> None:
    if s.ownership is not None:
        await s.ownership.unload(ns, bundle, reason="admin unload")
        return
    for t in list(s.topics.values()):  # standalone: close the bundle's topics; clients come back
        if t.name.namespace_name == ns and bundle.contains(bundle_hash(str(t.name))):
            await s.unload(t)


@endpoint
async def unload_bundle(request: Request) -> Response:
    s = service_of(request)
    ns = namespace_of(request)
    bundle = _bundle_of(request, await require_namespace(s, ns))
    if s.ownership is not None:
        target = await s.ownership.bundle_admin_target(ns, bundle, _secure(request))
        if target is not None:
            return _redirect(request, target)
    await _unload_local(s, ns, bundle)
    return no_content()


@endpoint
async def unload_namespace(request: Request) -> Response:
    s = service_of(request)
    ns = namespace_of(request)
    policies = await require_namespace(s, ns)
    for bundle in bundles_of(boundaries_of(policies)):
        client = s.broker_client
        target = None if s.ownership is None else await s.ownership.bundle_admin_target(ns, bundle, client.tls_enabled)
        if target is None:
            await _unload_local(s, ns, bundle)
            continue
        # the owner unloads its bundle, asked with this broker's own credentials (brokerClient*
        # keys; a super user, as in Pulsar): the caller was authorized for the namespace here, and
        # the caller's credentials may be a client certificate that cannot travel
        try:
            await client.request("PUT", f"{target.rstrip('/')}/admin/v2/namespaces/{ns}/{bundle.name}/unload")
        except AdminError as exc:  # the owner refused, or could not be reached (status 0)
            raise RestError(exc.status or 503, f"unloading {ns}/{bundle} on {target}: {exc.reason}") from None
        except AuthenticationError as exc:  # our token file is gone
            raise RestError(503, f"unloading {ns}/{bundle} on {target}: {exc}") from None
    return no_content()


@endpoint
async def split_bundle(request: Request) -> Response:
    s = service_of(request)
    ns = namespace_of(request)
    bundle = _bundle_of(request, await require_namespace(s, ns))
    if s.ownership is not None:
        target = await s.ownership.bundle_admin_target(ns, bundle, _secure(request))
        if target is not None:
            return _redirect(request, target)
        try:
            new = await s.ownership.split(ns, bundle)
        except ValueError as exc:
            raise RestError(412, str(exc)) from None
    else:
        new = []

        def change(policies: dict[str, Any]) -> None:
            from ..resources._bundles import split_boundaries

            b = split_boundaries(boundaries_of(policies), bundle)
            policies["bundles"] = {"boundaries": [f"0x{x:08x}" for x in b], "numBundles": len(b) - 1}
            new[:] = [r for r in bundles_of(b) if bundle.lower <= r.lower and r.upper <= bundle.upper]

        try:
            await s.namespaces.modify_policies(ns, change)
        except ValueError as exc:
            raise RestError(412, str(exc)) from None
    if query_bool(request, "unload"):
        for b in new:
            await _unload_local(s, ns, b)
    return no_content()


def routes() -> list[Route]:
    """The routes of this module (before the generic namespace and broker paths)."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    return [
        Route("/admin/v2/brokers", list_brokers, methods=["GET"]),
        Route("/admin/v2/brokers/leaderBroker", leader_broker, methods=["GET"]),
        Route("/admin/v2/broker-stats/load-decisions", load_decisions, methods=["GET"]),
        Route("/admin/v2/brokers/{cluster}", list_cluster_brokers, methods=["GET"]),
        Route("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", owned_namespaces, methods=["GET"]),
        Route(f"{ns}/bundles", get_bundles, methods=["GET"]),
        Route(f"{ns}/unload", unload_namespace, methods=["PUT"]),
        Route(f"{ns}/{{bundle}}/split", split_bundle, methods=["PUT"]),
        Route(f"{ns}/{{bundle}}/unload", unload_bundle, methods=["PUT"]),
    ]


class OwnerRedirect:
    """ASGI middleware: topic operations and HTTP lookups go to the broker serving the topic (307)."""

    def __init__(self, app: ASGIApp, service: BrokerService) -> None:
        self.app = app
        self.service = service

    def _topic(self, path: str) -> TopicName | None:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:3] == ["admin", "v2", "persistent"] and len(parts) >= 7:
            if parts[6:] == ["partitions"]:
                return None  # partitioned-topic metadata: any broker answers it, as in Pulsar
            rest = parts[3:6]
        elif parts[:4] == ["lookup", "v2", "topic", "persistent"] and len(parts) >= 7:
            rest = parts[4:7]
        else:
            return None
        try:
            return TopicName.parse(f"persistent://{rest[0]}/{rest[1]}/{rest[2]}")
        except InvalidTopicNameError:
            return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ownership = self.service.ownership
        topic = self._topic(scope.get("path", "")) if scope["type"] == "http" and ownership is not None else None
        target = None
        # a topic this broker serves needs no redirect, nor the metadata reads that decide one
        if topic is not None and not ownership.owns_topic(topic):
            try:
                plain = topic.partition >= 0 or not await self.service.namespaces.get_partitions(topic)
                if plain and await self.service.namespaces.namespace_exists(topic.namespace_name):
                    target = await ownership.admin_target(topic, scope.get("scheme") == "https", _authoritative(scope))
            except BrokerServiceError as exc:
                await JSONResponse({"reason": exc.message}, status_code=503)(scope, receive, send)
                return
        if target is None:
            await self.app(scope, receive, send)
            return
        # authoritative=true, as Pulsar's redirects carry: the target serves the request (taking an
        # unowned bundle it was picked for) rather than picking a broker again
        query = [
            (k, v)
            for k, v in parse_qsl(scope.get("query_string", b"").decode(), keep_blank_values=True)
            if k != "authoritative"
        ]
        url = target.rstrip("/") + scope["path"] + "?" + urlencode([*query, ("authoritative", "true")])
        await RedirectResponse(url, status_code=307)(scope, receive, send)


def _authoritative(scope: Scope) -> bool:
    """Whether the request carries ``authoritative=true`` (it was redirected here by another broker)."""
    return any(
        k == "authoritative" and v.lower() == "true" for k, v in parse_qsl(scope.get("query_string", b"").decode())
    )
