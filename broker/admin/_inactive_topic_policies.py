"""``inactiveTopicPolicies`` of namespaces and topics (enforced by `broker.housekeeping._inactive_topics`), with
Pulsar's v2 paths, JSON and status codes.

* ``/admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies``: GET answers the namespace's
  policies (204 when it sets none), POST sets them (body: ``{"inactiveTopicDeleteMode":
  "delete_when_no_subscriptions" | "delete_when_subscriptions_caught_up",
  "maxInactiveDurationSeconds": int, "deleteWhileInactive": bool}``), DELETE removes them. Stored
  in the namespace Policies as ``inactive_topic_policies``.
* ``/admin/v2/persistent/{tenant}/{namespace}/{topic}/inactiveTopicPolicies``: the same for a topic
  (its topic policies' ``inactiveTopicPolicies``); ``?applied=true`` on a GET answers the policies
  in force (topic, else namespace, else the broker's keys). 404 for a topic that does not exist.
A body that does not parse is 400. The next inactivity check uses the new policies.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..housekeeping._inactive_topics import NAMESPACE_KEY, TOPIC_KEY, InactiveTopicPolicies
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
    topic_of,
)
from ._topic_ops import topic_exists_any

__all__ = ["routes"]


async def _parsed_body(request: Request) -> dict[str, Any]:
    try:
        return InactiveTopicPolicies.from_json(await json_body(request, what="inactiveTopicPolicies")).to_json()
    except ValueError as exc:
        raise RestError(400, f"invalid inactiveTopicPolicies: {exc}") from None


@endpoint
async def ns_get(request: Request) -> Response:
    policies = await require_namespace(service_of(request), namespace_of(request))
    return json_response(policies.get(NAMESPACE_KEY))


@endpoint
async def ns_set(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    await s.namespaces.update_policies(ns, {NAMESPACE_KEY: await _parsed_body(request)})
    return no_content()


@endpoint
async def ns_delete(request: Request) -> Response:
    s, ns = service_of(request), namespace_of(request)
    await require_namespace(s, ns)
    await s.namespaces.update_policies(ns, {NAMESPACE_KEY: None})
    return no_content()


async def _existing(request: Request) -> tuple[Any, Any]:
    s, topic = service_of(request), topic_of(request)
    await require_namespace(s, topic.namespace_name)
    if not await topic_exists_any(s, topic):
        raise RestError(404, f"Topic {topic} not found")
    return s, topic


@endpoint
async def topic_get(request: Request) -> Response:
    s, topic = await _existing(request)
    if query_bool(request, "applied"):
        return json_response((await s.inactive_topics.policies(topic)).to_json())
    return json_response((await s.topic_policies.get(topic)).get(TOPIC_KEY))


@endpoint
async def topic_set(request: Request) -> Response:
    s, topic = await _existing(request)
    await s.topic_policies.update(topic, TOPIC_KEY, await _parsed_body(request))
    return no_content()


@endpoint
async def topic_delete(request: Request) -> Response:
    s, topic = await _existing(request)
    await s.topic_policies.update(topic, TOPIC_KEY, None)
    return no_content()


def routes() -> list[Route]:
    """The routes of this module."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies"
    tp = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/inactiveTopicPolicies"
    return [
        Route(ns, ns_get, methods=["GET"]),
        Route(ns, ns_set, methods=["POST"]),
        Route(ns, ns_delete, methods=["DELETE"]),
        Route(tp, topic_get, methods=["GET"]),
        Route(tp, topic_set, methods=["POST"]),
        Route(tp, topic_delete, methods=["DELETE"]),
    ]
