"""Namespaces: ``/admin/v2/namespaces/{tenant}`` and ``/admin/v2/namespaces/{tenant}/{namespace}``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from metadata import NodeExistsError, NoNodeError
from retention import PolicyOverrides

from .._namespaces import PARTITIONED_ROOT, POLICIES_ROOT, default_policies
from .._retention_hooks import TOPIC_POLICIES_ROOT
from .._topic_name import NamespaceName, TopicName
from ._common import (
    RestError,
    endpoint,
    json_body,
    json_response,
    namespace_of,
    no_content,
    query_bool,
    require_namespace,
    service_of,
)
from ._topic_ops import delete_partitioned_topic, delete_topic

__all__ = ["routes"]


@endpoint
async def list_namespaces(request: Request) -> Response:
    s = service_of(request)
    tenant = request.path_params["tenant"]
    NamespaceName.parse(f"{tenant}/x")
    if not await s.namespaces.tenant_exists(tenant):
        raise RestError(404, f"Tenant {tenant} does not exist")
    return json_response(await s.namespaces.list_namespaces(tenant))


@endpoint
async def get_namespace(request: Request) -> Response:
    return json_response(await require_namespace(service_of(request), namespace_of(request)))


@endpoint
async def create_namespace(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    body = await json_body(request, default=None)
    policies = default_policies(s.config.cluster_name)
    if body is not None:
        if not isinstance(body, dict):
            raise RestError(400, "namespace policies must be a JSON object")
        try:
            PolicyOverrides.from_json(body)
        except ValueError as exc:
            raise RestError(400, f"invalid policies: {exc}") from None
        policies.update(body)
    if not await s.namespaces.tenant_exists(ns.tenant):
        raise RestError(404, f"Tenant {ns.tenant} does not exist")
    try:
        await s.namespaces.create_namespace(ns, policies)
    except NodeExistsError:
        raise RestError(409, f"Namespace {ns} already exists") from None
    except NoNodeError:
        raise RestError(404, f"Tenant {ns.tenant} does not exist") from None
    return no_content()


@endpoint
async def delete_namespace(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    force = query_bool(request, "force")
    partitioned = await s.namespaces.list_partitioned_topics(ns)
    topics = await s.topics_of_namespace(ns)
    if (topics or partitioned) and not force:
        raise RestError(409, f"Cannot delete non empty namespace {ns}: it has {len(topics)} topic(s)")
    for name in partitioned:
        await delete_partitioned_topic(s, TopicName.parse(name), force=True)
    for name in await s.topics_of_namespace(ns):
        await delete_topic(s, TopicName.parse(name), force=True)
    for root in (PARTITIONED_ROOT, TOPIC_POLICIES_ROOT):
        try:
            await s.store.delete(f"{root}/{ns}", recursive=True)
        except NoNodeError:
            pass
    try:
        await s.store.delete(f"{POLICIES_ROOT}/{ns}")
    except NoNodeError:
        raise RestError(404, f"Namespace {ns} does not exist") from None
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    return [
        Route("/admin/v2/namespaces/{tenant}", list_namespaces, methods=["GET"]),
        Route(ns, get_namespace, methods=["GET"]),
        Route(ns, create_namespace, methods=["PUT"]),
        Route(ns, delete_namespace, methods=["DELETE"]),
    ]
