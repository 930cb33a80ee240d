"""Tenants and HTTP lookup: ``/admin/v2/tenants``, ``/lookup/v2`` (clusters: `_clusters`)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from metadata import NodeExistsError, NoNodeError
from protocols.pulsar import TopicName

from .._errors import ServiceNotReadyError
from ..resources._namespaces import POLICIES_ROOT
from ._clusters import known_clusters
from ._common import (
    RestError,
    check_stored_size,
    endpoint,
    json_body,
    json_response,
    no_content,
    service_of,
    tenant_of,
    topic_of,
)

__all__ = ["routes"]

LISTENER_NAME_HEADER = "X-Pulsar-ListenerName"


async def _tenant_info(request: Request, body: Any) -> dict[str, Any]:
    """The TenantInfo to store for ``body`` (None: an empty body); 400 for a body of the wrong
    shape, 412 for an unknown cluster (this broker's or one created through `_clusters`), 413 when
    too large to store. Other keys are dropped, as Pulsar's TenantInfo has no others."""
    cluster = service_of(request).config.cluster_name
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise RestError(400, "tenant info must be a JSON object")
    roles = body.get("adminRoles") or []
    clusters = body.get("allowedClusters")
    if clusters is None or clusters == []:
        clusters = [cluster]
    for key, value in (("adminRoles", roles), ("allowedClusters", clusters)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RestError(400, f"{key} must be a list of strings")
    known = set(await known_clusters(request))
    unknown = [c for c in clusters if c not in known]
    if unknown:
        raise RestError(412, f"Clusters do not exist: {', '.join(unknown)}")
    info = {"adminRoles": roles, "allowedClusters": clusters}
    check_stored_size(request, info, "tenant info")
    return info


@endpoint
async def list_tenants(request: Request) -> Response:
    return json_response(await service_of(request).namespaces.list_tenants())


@endpoint
async def get_tenant(request: Request) -> Response:
    tenant = tenant_of(request)
    try:
        data, _ = await service_of(request).store.get(f"{POLICIES_ROOT}/{tenant}")
    except NoNodeError:
        raise RestError(404, f"Tenant {tenant} does not exist") from None
    info = json.loads(data) if data else {}
    return json_response({"adminRoles": info.get("adminRoles", []), "allowedClusters": info.get("allowedClusters", [])})


@endpoint
async def create_tenant(request: Request) -> Response:
    tenant = tenant_of(request)
    info = await _tenant_info(request, await json_body(request, default=None, what="tenant info"))
    try:
        await service_of(request).namespaces.create_tenant(tenant, info)
    except NodeExistsError:
        raise RestError(409, f"Tenant {tenant} already exists") from None
    return no_content()


@endpoint
async def update_tenant(request: Request) -> Response:
    tenant = tenant_of(request)
    s = service_of(request)
    info = await _tenant_info(request, await json_body(request, default=None, what="tenant info"))
    path = f"{POLICIES_ROOT}/{tenant}"
    try:
        _, stat = await s.store.get(path)
        await s.store.set(path, json.dumps(info).encode(), version=stat.version)
    except NoNodeError:
        raise RestError(404, f"Tenant {tenant} does not exist") from None
    return no_content()


@endpoint
async def delete_tenant(request: Request) -> Response:
    tenant = tenant_of(request)
    s = service_of(request)
    if not await s.namespaces.tenant_exists(tenant):
        raise RestError(404, f"Tenant {tenant} does not exist")
    if await s.namespaces.list_namespaces(tenant):
        raise RestError(409, f"The tenant {tenant} still has active namespaces")
    try:
        await s.store.delete(f"{POLICIES_ROOT}/{tenant}")
    except NoNodeError:
        raise RestError(404, f"Tenant {tenant} does not exist") from None
    return no_content()


@endpoint
async def lookup(request: Request) -> Response:
    return await lookup_response(request, topic_of(request))


async def lookup_response(request: Request, topic: TopicName) -> Response:
    """The HTTP lookup answer for ``topic`` (persistent or not): its broker's URLs for the
    listener the request names."""
    s = service_of(request)
    await s.check_topic(topic, create=True)
    # the advertised listener asked for (the listenerName parameter, else the X-Pulsar-ListenerName
    # header, as Pulsar), else the internal one; Pulsar answers an unknown name with 500
    listener = request.query_params.get("listenerName") or request.headers.get(LISTENER_NAME_HEADER, "")
    try:
        urls = s.lookup_urls(listener)
    except ServiceNotReadyError as exc:
        raise RestError(500, exc.message) from None
    plain, tls = urls["brokerServiceUrl"], urls.get("brokerServiceUrlTls", "")
    return json_response(
        {
            "brokerUrl": plain if plain != tls else "",
            "httpUrl": s.web_service_url,
            "nativeUrl": plain,
            "brokerUrlTls": tls,
            "httpUrlTls": s.web_service_url_tls,
        }
    )


def routes() -> list[Route]:
    """The routes of this module."""
    return [
        Route("/admin/v2/tenants", list_tenants, methods=["GET"]),
        Route("/admin/v2/tenants/{tenant}", get_tenant, methods=["GET"]),
        Route("/admin/v2/tenants/{tenant}", create_tenant, methods=["PUT"]),
        Route("/admin/v2/tenants/{tenant}", update_tenant, methods=["POST"]),
        Route("/admin/v2/tenants/{tenant}", delete_tenant, methods=["DELETE"]),
        Route("/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}", lookup, methods=["GET"]),
    ]
