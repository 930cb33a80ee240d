"""Namespace and topic permissions (``pulsar-admin namespaces/topics grant-permission`` ...).

* ``GET  /admin/v2/namespaces/{t}/{ns}/permissions``: ``{role: [actions]}``
* ``POST /admin/v2/namespaces/{t}/{ns}/permissions/{role}`` with a JSON list of actions: 204
* ``DELETE /admin/v2/namespaces/{t}/{ns}/permissions/{role}``: 204
* the same under ``/admin/v2/persistent/{t}/{ns}/{topic}/permissions`` for one topic (GET answers
  the topic's grants merged with its namespace's, as Pulsar does).
* subscription permissions (``pulsar-admin namespaces grant-subscription-permission`` ...):
  ``GET /admin/v2/namespaces/{t}/{ns}/permissions/subscription``: ``{subscription: [roles]}``;
  ``POST .../permissions/subscription/{subscription}`` with a JSON list of roles adds them: 204;
  ``DELETE .../permissions/{subscription}/{role}`` removes one: 204.

Stored in the namespace Policies' ``auth_policies`` (`broker.auth`). Who may call these is the
admin REST authorization's business (tenant admins and super users).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protocols.pulsar import NamespaceName, TopicName

from ..auth import check_actions
from ._common import RestError, endpoint, json_body, json_response, namespace_of, no_content, service_of, topic_of

__all__ = ["routes"]


def _role(request: Request) -> str:
    role = request.path_params["role"]
    if not role or len(role) > 1024:
        raise RestError(412, "Role is not valid")
    return role


async def _missing(request: Request, ns: NamespaceName) -> RestError:
    if not await service_of(request).namespaces.tenant_exists(ns.tenant):
        return RestError(404, f"Tenant {ns.tenant} does not exist")
    return RestError(404, f"Namespace {ns} does not exist")


async def _grant(request: Request, ns: NamespaceName, topic: TopicName | None) -> Response:
    role = _role(request)
    try:
        actions = check_actions(await json_body(request, what="list of actions"))
    except ValueError as exc:
        raise RestError(400, str(exc)) from None
    if not await service_of(request).authz.grant(ns, role, actions, topic):
        raise await _missing(request, ns)
    return no_content()


async def _revoke(request: Request, ns: NamespaceName, topic: TopicName | None) -> Response:
    if not await service_of(request).authz.revoke(ns, _role(request), topic):
        raise await _missing(request, ns)
    return no_content()


@endpoint
async def get_namespace_permissions(request: Request) -> Response:
    ns = namespace_of(request)
    found = await service_of(request).authz.namespace_permissions(ns)
    if found is None:
        raise await _missing(request, ns)
    return json_response(found)


@endpoint
async def grant_namespace_permission(request: Request) -> Response:
    return await _grant(request, namespace_of(request), None)


@endpoint
async def revoke_namespace_permission(request: Request) -> Response:
    return await _revoke(request, namespace_of(request), None)


@endpoint
async def get_topic_permissions(request: Request) -> Response:
    topic = topic_of(request)
    found = await service_of(request).authz.topic_permissions(topic)
    if found is None:
        raise await _missing(request, topic.namespace_name)
    return json_response(found)


@endpoint
async def grant_topic_permission(request: Request) -> Response:
    topic = topic_of(request)
    return await _grant(request, topic.namespace_name, topic)


@endpoint
async def revoke_topic_permission(request: Request) -> Response:
    topic = topic_of(request)
    return await _revoke(request, topic.namespace_name, topic)


def _roles(value: object) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(r, str) and r for r in value):
        raise RestError(400, 'the body must be a non-empty JSON list of roles, e.g. ["app"]')
    return sorted(set(value))


@endpoint
async def get_subscription_permissions(request: Request) -> Response:
    ns = namespace_of(request)
    found = await service_of(request).authz.subscription_permissions(ns)
    if found is None:
        raise await _missing(request, ns)
    return json_response(found)


@endpoint
async def grant_subscription_permission(request: Request) -> Response:
    ns = namespace_of(request)
    subscription = request.path_params["subscription"]
    roles = _roles(await json_body(request, what="list of roles"))
    if not await service_of(request).authz.grant_subscription(ns, subscription, roles):
        raise await _missing(request, ns)
    return no_content()


@endpoint
async def revoke_subscription_permission(request: Request) -> Response:
    ns = namespace_of(request)
    subscription = request.path_params["subscription"]
    if not await service_of(request).authz.revoke_subscription(ns, subscription, _role(request)):
        raise await _missing(request, ns)
    return no_content()


def routes() -> list[Route]:
    """The routes of this module (before the generic ``{policy}`` routes)."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions"
    return [
        Route(ns + "/subscription", get_subscription_permissions, methods=["GET"]),
        Route(ns + "/subscription/{subscription}", grant_subscription_permission, methods=["POST"]),
        Route(ns + "/{subscription}/{role}", revoke_subscription_permission, methods=["DELETE"]),
        Route(ns, get_namespace_permissions, methods=["GET"]),
        Route(ns + "/{role}", grant_namespace_permission, methods=["POST"]),
        Route(ns + "/{role}", revoke_namespace_permission, methods=["DELETE"]),
        Route(tp, get_topic_permissions, methods=["GET"]),
        Route(tp + "/{role}", grant_topic_permission, methods=["POST"]),
        Route(tp + "/{role}", revoke_topic_permission, methods=["DELETE"]),
    ]
